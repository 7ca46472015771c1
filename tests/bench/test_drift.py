"""The drift gauntlet's harness: a drift is rows, the loop repairs it, the report says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from bench.drift import GAUNTLET, KINDS_BY_TOOL, gauntlet_run
from bench.stats import mcnemar_exact
from policies.models import Strategy
from sandbox.models import ContractDrift
from traces.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (0, 8, 2 / 2**8), (3, 3, 1.0), (1, 9, 2 * 11 / 2**10), (9, 1, 2 * 11 / 2**10)],
)
def test_mcnemar_exact(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p)


def test_the_gauntlet_is_rows_of_at_least_twelve_distinct_drifts() -> None:
    assert len(GAUNTLET) >= 12
    assert len({d.name for d in GAUNTLET}) == len(GAUNTLET)
    assert len({json.dumps(d.rows, sort_keys=True) for d in GAUNTLET}) == len(GAUNTLET)
    for drift in GAUNTLET:
        assert drift.tool in KINDS_BY_TOOL
        for row in drift.rows:
            ContractDrift(**row).full_clean()  # each is a valid sandbox row
    layouts = {row.get("layout", "flat") for d in GAUNTLET for row in d.rows}
    assert layouts == set(ContractDrift.Layout.values)


@pytest.mark.parametrize(
    "names",
    [["returns-prefix-changed", "skus-unavailable"], ["products-new-required-param"]],
    ids=["format-and-503", "new-param"],
)
def test_drifts_are_repaired_and_reported(
    small_shop: Any, tmp_path: Path, settings: Any, names: list[str]
) -> None:
    settings.LLM_BACKEND = "simulated"
    report = gauntlet_run(
        seed=4,
        tasks_per_drift=20,
        train_fraction=0.4,
        concurrency=4,
        only=names,
        output_dir=tmp_path,
        command="test",
        progress=lambda line: None,
    )
    assert [d["name"] for d in report["drifts"]] == names
    for drift in report["drifts"]:
        # The drift broke the control arm's calls to its tool, and treatment learned a
        # strategy on that tool that won tasks back, paired task by task.
        assert drift["heldout"] == 12
        assert drift["treatment_only"] > drift["control_only"]
        assert drift["repaired"] is (drift["p_value"] < 0.01)
        assert any(s["tool"] == drift["tool"] for s in drift["strategies"])
        assert drift["failed_runs_until_fix"] is not None
        assert not drift["worse"]
    assert report["headline"].endswith("drifts repaired with no code change; 0 made worse")
    saved = json.loads((tmp_path / "drift-latest.json").read_text())
    assert saved["config"]["llm_backend"] == "simulated"
    markdown = (tmp_path / "drift-latest.md").read_text()
    assert "simulated" in markdown and names[0] in markdown
    # Nothing of the gauntlet is left behind: no drift, no learned strategy.
    assert not ContractDrift.objects.exists()
    assert not Strategy.objects.exists()
    [bench] = Job.objects.filter(kind=Job.Kind.BENCHMARK)
    assert (bench.status, bench.done, bench.total) == ("finished", len(names), len(names))


def test_the_command_refuses_bad_input(db: None) -> None:
    with pytest.raises(CommandError, match="dedicated database"):
        call_command("bench_drift")
    with pytest.raises(CommandError, match="at least 10"):
        call_command("bench_drift", "--yes", "--tasks", "9")
    with pytest.raises(CommandError, match="unknown drift"):
        call_command("bench_drift", "--yes", "--only", "no-such-drift")
    with pytest.raises(CommandError, match="endpoint must be one of"):
        call_command("bench_drift", "--yes", "--custom", '{"endpoint": "users", "kind": "x"}')
    with pytest.raises(CommandError, match="--custom"):
        call_command("bench_drift", "--yes", "--custom", "not json")
    with pytest.raises(CommandError, match="invalid custom drift"):
        call_command("bench_drift", "--yes", "--custom", '{"endpoint": "orders", "kind": "case"}')
    assert not ContractDrift.objects.exists()
