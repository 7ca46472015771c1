"""The rollout benchmark plays a seeded day through the production rollout rules."""

from __future__ import annotations

import json
from pathlib import Path

from bench.rollout import bench_rollout, report_write, traffic
from policies.rollout_stats import RolloutRules


def test_a_small_day_promotes_the_good_strategy_and_rolls_back_the_bad_ones(
    tmp_path: Path,
) -> None:
    # The product's defaults; smaller samples make p95 noisy enough to roll back a good
    # strategy on latency alone (docs/learning-loop.md, "Rollouts").
    report = bench_rollout(
        seed=7,
        sessions=20_000,
        rules=RolloutRules(min_samples=100, latency_min_samples=30, burst=5),
        schedule=[1, 5, 25, 50, 100],
        window=86400,
    )
    good, harmful, breaking = report["days"]
    assert good["outcome"] == "promoted to 100%"
    assert [d["action"] for d in good["decisions"]] == [
        "promote",
        "promote",
        "promote",
        "complete",
    ]
    for bad in (harmful, breaking):
        assert bad["outcome"] == "rolled back"
        assert bad["max_percent"] <= 5 and bad["canary_sessions_share"] <= 0.05
        assert bad["failures_at_once"] > bad["failures_canary"]
    assert breaking["decisions"][-1]["reason"].startswith("burst")
    # the same seed is the same day
    assert traffic(seed=7, sessions=300) == traffic(seed=7, sessions=300)
    assert traffic(seed=7, sessions=300) != traffic(seed=8, sessions=300)

    json_path, md_path = report_write(report, output_dir=tmp_path, command="bench x")
    written = json.loads(json_path.read_text())
    assert written["command"] == "bench x" and written["machine"]["cpus"]
    assert "| harmful: more errors of known kinds | rolled back |" in md_path.read_text()
