"""The mutation report's bookkeeping: which mutants run, how the kill rate is counted, and
how a survivor is shown with its reason (the mutmut run itself is too slow for a test)."""

from __future__ import annotations

from pathlib import Path

from bench.mutation import (
    _markdown,
    justified_survivors,
    module_prefix,
    mutants_to_run,
    spread_sample,
    summarise,
    survivor_reason,
)

SSRF = "agents.tools.ssrf.x__parse_ipv4_number__mutmut_"
REVIEWS = "reviews.services.x_review_item_lock__mutmut_"


def test_module_prefix_is_how_mutmut_names_mutants() -> None:
    assert module_prefix("policies/replay.py") == "policies.replay."


def test_a_sample_is_spread_over_the_module_in_source_order_and_stable() -> None:
    names = [f"{SSRF}{number}" for number in range(1, 21)]
    sample = spread_sample(list(reversed(names)), 4)
    # mutmut_10 sorts after mutmut_9: by number, not as text.
    assert sample == [f"{SSRF}1", f"{SSRF}6", f"{SSRF}11", f"{SSRF}16"]
    assert spread_sample(names, 4) == sample
    assert spread_sample(names[:3], 10) == names[:3]


def test_only_unchecked_mutants_are_passed_unless_asked_to_rerun() -> None:
    results = {
        f"{SSRF}1": "killed",
        f"{SSRF}2": "not checked",
        f"{SSRF}3": "survived",
        f"{REVIEWS}1": "not checked",
    }
    assert mutants_to_run(["agents/tools/ssrf.py"], results, sample=None, rerun=False) == [
        f"{SSRF}2"
    ]
    assert mutants_to_run(["agents/tools/ssrf.py"], results, sample=None, rerun=True) == [
        f"{SSRF}1",
        f"{SSRF}2",
        f"{SSRF}3",
    ]
    assert mutants_to_run(["agents/tools/ssrf.py"], results, sample=2, rerun=True) == [
        f"{SSRF}1",
        f"{SSRF}2",
    ]
    assert mutants_to_run(
        ["agents/tools/ssrf.py", "reviews/services.py"],
        results,
        sample=None,
        rerun=False,
        survivors=True,
    ) == [f"{SSRF}2", f"{SSRF}3", f"{REVIEWS}1"]
    # Before mutmut generated anything there are no names yet: the module globs.
    assert mutants_to_run(
        ["agents/tools/ssrf.py", "reviews/services.py"], {}, sample=5, rerun=False
    ) == [
        "agents.tools.ssrf.*",
        "reviews.services.*",
    ]


def test_the_kill_rate_counts_untested_mutants_as_missed_and_skips_unchecked_ones() -> None:
    results = {
        f"{SSRF}1": "killed",
        f"{SSRF}2": "killed",
        f"{SSRF}3": "timeout",
        f"{SSRF}4": "survived",
        f"{SSRF}5": "no tests",
        f"{SSRF}6": "not checked",
        f"{REVIEWS}1": "killed",
    }
    justified = {f"{SSRF}4": "equivalent: the two spellings parse alike"}
    summary = summarise(
        ["agents/tools/ssrf.py"],
        results,
        justified=justified,
        diff=lambda name: f"- old {name}\n+ new",
    )
    row = summary["agents/tools/ssrf.py"]
    assert row["mutants"] == 6
    assert row["counts"] == {
        "killed": 2,
        "no tests": 1,
        "not checked": 1,
        "survived": 1,
        "timeout": 1,
    }
    assert row["kill_rate"] == 3 / 5
    assert row["kill_rate_without_justified"] == 3 / 4
    assert (row["justified"], row["unjustified"]) == (1, 1)
    assert [(s["mutant"], s["status"], s["reason"]) for s in row["survivors"]] == [
        (f"{SSRF}4", "survived", "equivalent: the two spellings parse alike"),
        (f"{SSRF}5", "no tests", "unjustified"),
    ]
    report = {
        "runs": [
            {
                "started_at": "2026-12-02T17:00:00+00:00",
                "modules": ["agents/tools/ssrf.py"],
                "sample_per_module": None,
                "mutants_run": 6,
                "budget_minutes": 5.0,
                "seconds": 61.0,
                "ended": "finished",
                "seconds_by_module": {"setup": 40.0, "agents/tools/ssrf.py": 21.0},
            }
        ],
        "modules": summary,
    }
    text = _markdown(report)
    assert (
        "| agents/tools/ssrf.py | 6 | 2 | 1 | 1 | 1 | 1 | 0 | 60.0% | 1 | 1 | 75.0% | 21 |" in text
    )
    assert "| 5 | 61 | 40 | finished |" in text
    assert f"### {SSRF}5 (no tests)\n\nReason: unjustified" in text
    assert f"- old {SSRF}4\n+ new" in text


def test_justified_survivors_are_read_from_a_toml_table(tmp_path: Path) -> None:
    listed = tmp_path / "equivalent.toml"
    listed.write_text(f'[survivors]\n"{SSRF}4" = "equivalent"\n"{REVIEWS}*" = "import time"\n')
    justified = justified_survivors(listed)
    assert justified == {f"{SSRF}4": "equivalent", f"{REVIEWS}*": "import time"}
    assert survivor_reason(f"{SSRF}4", justified) == "equivalent"
    assert survivor_reason(f"{SSRF}40", justified) is None
    assert survivor_reason(f"{REVIEWS}12", justified) == "import time"
    assert justified_survivors(tmp_path / "missing.toml") == {}
