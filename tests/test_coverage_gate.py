"""The coverage gate of `make test`: a core module below its floor fails the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.coverage_gate import CORE_MODULES, coverage_gate_check, main


def report(**percent: float) -> dict[str, Any]:
    return {
        "files": {
            path.replace("__", "/") + ".py": {"summary": {"percent_covered": value}}
            for path, value in percent.items()
        }
    }


def test_a_module_at_its_floor_passes_and_one_below_fails() -> None:
    results = coverage_gate_check(
        report(agents__runtime=95.0, agents__ssrf=94.99),
        {"agents/runtime.py": None, "agents/tools/ssrf.py": None},
        95.0,
    )
    assert [(r.path, r.ok) for r in results] == [
        ("agents/runtime.py", True),
        ("agents/tools/ssrf.py", False),
    ]


def test_a_module_missing_from_the_report_fails() -> None:
    (result,) = coverage_gate_check(report(), {"agents/tasks.py": None}, 95.0)
    assert result.percent is None and not result.ok


def test_a_module_floor_of_its_own_wins_over_the_default() -> None:
    (result,) = coverage_gate_check(report(agents__tasks=80.0), {"agents/tasks.py": 75.0}, 95.0)
    assert result.ok and result.floor == 75.0


def test_the_command_exits_non_zero_below_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps(report(**{m[:-3].replace("/", "__"): 96.0 for m in CORE_MODULES})))
    monkeypatch.delenv("COVERAGE_FAIL_UNDER", raising=False)
    assert main(["coverage_gate", str(path)]) == 0
    monkeypatch.setenv("COVERAGE_FAIL_UNDER", "97")
    assert main(["coverage_gate", str(path)]) == 1
    assert "below their coverage floor" in capsys.readouterr().err
