"""The Step insert-rate benchmark inserts what it says, through the recorder's batch
insert, and reports every table it measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum

from bench.step_inserts import _measure, report_write
from traces.models import Step, StepRollupHourly, Trace

pytestmark = pytest.mark.django_db


def test_measure_inserts_the_rows_in_batches_with_their_rollups(support_agent: Any) -> None:
    result = _measure(rows=300, batch=100, seed=3)

    assert result["steps_before"] == 0
    assert result["rows"] == 300 == Step.objects.filter(trace__source="bench-insert").count()
    assert result["batches"] == 3
    # The recorder's insert: the rollups counted every step in the same transaction.
    assert StepRollupHourly.objects.aggregate(n=Sum("steps"))["n"] == 300
    tool_steps = Step.objects.filter(action_type="tool")
    assert tool_steps.exists()
    assert not tool_steps.filter(idempotency_key__isnull=True).exists()
    # A batch mixes runs, as the group commit does: the first batch has many traces.
    first = Step.objects.order_by("id")[:100]
    assert len({step.trace_id for step in first}) > 20
    assert Trace.objects.filter(source="bench-insert").count() >= 300 // 10
    names = {index["name"] for index in result["indexes"]}
    assert "traces_step_pkey" in names and "step_time" in names
    assert (
        result["rows_per_s"] > 0 and result["insert_statement_rows_per_s"] >= result["rows_per_s"]
    )


def test_report_names_every_table_and_the_indexes_of_the_biggest(tmp_path: Path) -> None:
    def run(before: int, rate: float) -> dict[str, Any]:
        return {
            "steps_before": before,
            "rows": 10,
            "seconds": 10 / rate,
            "rows_per_s": rate,
            "batch_p50_ms": 5.0,
            "insert_statement_s": 1.0,
            "insert_statement_rows_per_s": rate * 2,
            "batches": 1,
            "table_bytes": 2**20,
            "indexes": [{"name": f"idx_{before}", "bytes": 2**21}],
        }

    result = {
        "command": "python -m bench.step_inserts",
        "machine": "m",
        "load_average": "1.0",
        "run_at": "now",
        "rows": 10,
        "batch": 5,
        "repeats": 1,
        "targets": [
            {
                "name": "empty",
                "rows_per_s_median": 900.0,
                "insert_statement_rows_per_s_median": 1800.0,
                "runs": [run(0, 900.0)],
            },
            {
                "name": "10m",
                "rows_per_s_median": 800.0,
                "insert_statement_rows_per_s_median": 1600.0,
                "runs": [run(10_000_000, 800.0)],
            },
        ],
    }
    written = report_write(result, output_dir=tmp_path, name="step-inserts-t")
    markdown = (tmp_path / "step-inserts-t.md").read_text()
    assert json.loads((tmp_path / "step-inserts-t.json").read_text()) == result
    assert len(written) == 2
    assert "| empty | 0 | 900 |" in markdown and "| 10m | 10,000,000 | 800 |" in markdown
    assert "`idx_10000000`: 2 MB" in markdown and "idx_0`" not in markdown
