"""`make bench` runs end to end at a tiny size: every implementation records the steps of
every episode it ran, side by side, and the in-flight part still runs.

The peers (LangGraph, the Agents SDK) come from the bench-only extra `.[peers]`, which the
test suite does not need: without it, this runtime and the plain loop are measured and the
report says the peers were not; with it (as `make bench` installs it), all of them are."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from bench.peers import EPISODE_STEPS, peers_available
from traces.models import Job, Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)

# Rows (or checkpoints, or episodes) each implementation must have recorded per episode.
RECORDS_PER_EPISODE = {
    "ours": 5,  # Step rows: reasoning, action, reflection, reasoning, final
    "plain": 5,  # one INSERT per step
    "plain_no_http": 5,
    "langgraph": 6,  # checkpoints: input, start, agent, tools, reflect, agent
    "agents_sdk": 1,  # nothing persisted: episodes that gave the final answer
}


def test_side_by_side_records_every_step_of_every_path(
    error_rules: Any, small_shop: Any, live_sandbox: str, tmp_path: Path
) -> None:
    out = StringIO()
    call_command(
        "bench_runtime",
        *("--sequential-runs", "2", "--concurrent-runs", "3", "--rounds", "1"),
        *("--in-flight", "4", "--latency", "0.01", "--pool-size", "2"),
        *("--sandbox-url", live_sandbox, "--output", str(tmp_path)),
        stdout=out,
    )
    report = json.loads((tmp_path / "runtime-latest.json").read_text())
    side = report["side_by_side"]
    expected = {"ours", "plain", "plain_no_http"}
    if peers_available():
        expected |= {"langgraph", "agents_sdk"}
    assert side["peers_installed"] is peers_available()
    for mode, runs in (("sequential", 2), ("concurrent", 3)):
        rows = side["results"][mode]
        assert set(rows) == expected
        for impl, row in rows.items():
            [sample] = row["samples"]
            assert sample["runs"] == runs
            assert sample["records"] == runs * RECORDS_PER_EPISODE[impl], impl
            assert sample["steps"] == runs * EPISODE_STEPS
        assert set(side["ratios_steps_per_s"][mode]) == {f"ours/{i}" for i in expected - {"ours"}}
    # The measured runs went through the run path against the served sandbox, and the
    # benchmark removed them afterwards (the in-flight part's runs too).
    assert not Trace.objects.filter(source="bench").exists()
    assert not Step.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("select count(*) from bench_plain_step")
        assert cursor.fetchone() == (0,)
    goals = {g["goal"]: g for g in report["goals"]}
    assert goals["client CPU per step (sequential) <= 0.3 ms"]["measured"] > 0
    assert report["in_flight"]["max_runs_waiting_on_the_model_at_once"] == 4
    markdown = (tmp_path / "runtime-latest.md").read_text()
    assert "NOT an LLM" in markdown
    assert ("the peers were not measured" in markdown) is not peers_available()
    [job] = Job.objects.filter(kind=Job.Kind.BENCHMARK)
    assert (job.status, job.done, job.total) == ("finished", 2, 2)
