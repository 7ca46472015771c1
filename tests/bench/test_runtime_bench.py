"""The runtime benchmark runs end to end at a small size and reports side by side."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from traces.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_runtime_reports_both_loops_and_in_flight_runs(
    error_rules: Any, tmp_path: Path
) -> None:
    out = StringIO()
    call_command(
        "bench_runtime",
        "--runs",
        "5",
        "--repeats",
        "2",
        "--in-flight",
        "20",
        "--latency",
        "0.05",
        "--output",
        str(tmp_path),
        stdout=out,
    )
    report = json.loads((tmp_path / "runtime-latest.json").read_text())
    assert len(report["orchestration"]["runtime_seconds"]) == 2
    assert len(report["orchestration"]["baseline_seconds"]) == 2
    assert report["in_flight"]["max_runs_waiting_on_the_model_at_once"] == 20
    assert "steps/s" in out.getvalue()
    [job] = Job.objects.filter(kind=Job.Kind.BENCHMARK)
    # two phases per repeat, then the in-flight measurement
    assert (job.status, job.done, job.total) == ("finished", 5, 5)
    assert job.message.startswith("20 runs in flight")
