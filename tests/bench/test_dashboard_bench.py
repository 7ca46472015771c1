"""The dashboard benchmark runs end to end at a small size, and its traffic looks like the
traffic the docstring promises."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from bench.dashboard import dashboard_data_fill
from traces.models import Step, StepRollupHourly, Trace

pytestmark = pytest.mark.django_db


def test_bench_dashboard_times_every_endpoint_and_writes_the_report(
    support_agent: Any, tmp_path: Path
) -> None:
    out = StringIO()
    call_command(
        "bench_dashboard",
        "--steps",
        "2000",
        "--days",
        "10",
        "--samples",
        "2",
        "--output",
        str(tmp_path),
        stdout=out,
    )
    report = json.loads((tmp_path / "dashboard-latest.json").read_text())
    markdown = (tmp_path / "dashboard-latest.md").read_text()

    assert report["table_rows"]["steps"] == report["fill"]["steps"] >= 2000
    assert len(report["endpoints"]) == 26
    assert all(row["queries"] <= 7 for row in report["endpoints"])
    assert StepRollupHourly.objects.aggregate(n=Sum("steps"))["n"] == Step.objects.count()
    assert "| `/dashboards/data/failures.json?window=7d` |" in markdown
    assert "Goal: p50 < 100 ms" in markdown


def test_generated_traffic_has_the_documented_shape(support_agent: Any) -> None:
    now = timezone.now()
    fill = dashboard_data_fill(steps=20_000, days=30, seed=3, now=now, agent_id=support_agent.pk)

    origins = Counter(Trace.objects.values_list("origin", flat=True))
    calls = Step.objects.filter(phase="action")
    failed = calls.exclude(error_type="")
    errors = Counter(failed.values_list("error_type", flat=True))
    late = failed.filter(error_type="UNAUTHORIZED")

    assert fill.steps >= 20_000
    assert 0.03 < origins["replay"] / fill.traces < 0.07
    assert 0.01 < origins["experiment"] / fill.traces < 0.05
    assert 0.08 < failed.count() / calls.count() < 0.20
    assert errors.most_common(1)[0][0] == "RESOURCE_NOT_FOUND"
    assert late.exists()
    assert not late.filter(created_at__lt=now - timedelta(days=5, minutes=1)).exists()
    assert set(Trace.objects.values_list("policy_version", flat=True)) == {"v1", "v2", "v3"}
