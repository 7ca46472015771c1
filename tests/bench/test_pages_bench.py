"""The list-page benchmark runs end to end at a small size and reports every list."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from traces.models import Trace

pytestmark = pytest.mark.django_db


def test_bench_pages_times_every_list_for_both_users_and_writes_the_report(
    support_agent: Any, tmp_path: Path
) -> None:
    call_command(
        "bench_pages",
        "--steps",
        "2000",
        "--samples",
        "1",
        "--label",
        "small",
        "--output",
        str(tmp_path),
        stdout=StringIO(),
    )
    report = json.loads((tmp_path / "pages-small.json").read_text())
    assert (tmp_path / "pages-latest.json").exists()
    markdown = (tmp_path / "pages-small.md").read_text()
    rows = {(row["user"], row["path"].split("?")[0]) for row in report["endpoints"]}
    for path in ("/traces/", "/api/traces/", "/api/steps/"):
        assert ("ops", path) in rows and ("support", path) in rows
    assert ("ops", "/reviews/") in rows and ("ops", "/policies/versions/") in rows
    assert (
        report["table_rows"]["support_traces"]
        == Trace.objects.filter(created_by__username="bench-pages-support").count()
        > 0
    )
    trace_lists = [
        r
        for r in report["endpoints"]
        if r["path"].startswith("/traces/?") or r["path"] == "/traces/"
    ]
    assert trace_lists and all(
        row["step_queries"] == 0
        for row in trace_lists
        if "tool=" not in row["path"] and "step_error=" not in row["path"]
    )
    assert "Goal: p50 < 100 ms for every list at 10M steps; measured here at" in markdown
