"""The OTLP benchmark leaves no task behind on its broker: a worker started later on the
same Redis database (an end-to-end test's) would otherwise run the benchmark's hand-offs.
Its database CPU is its own connection's backend's."""

from __future__ import annotations

import pytest

from bench.otlp_ingest import BackendCpu, _broker_purge
from config.celery import app


def test_the_broker_pass_purges_the_learning_queue_too() -> None:
    _broker_purge()
    for queue in ("reflexion", "agents", "default"):
        app.send_task("policies.external_runs_learn", args=[["not-a-trace"]], queue=queue)
    assert _broker_purge() == 3
    assert _broker_purge() == 0


@pytest.mark.django_db(transaction=True)  # the connection is closed and opened again
def test_the_database_cpu_is_read_from_this_connections_backend_and_only_from_it() -> None:
    from django.db import connection

    backend = BackendCpu()
    first = backend.read()
    assert first is not None and first >= 0
    with connection.cursor() as cursor:  # some work on the backend: its count never falls
        cursor.execute("SELECT count(*) FROM generate_series(1, 200000)")
    second = backend.read()
    assert second is not None and second >= first
    connection.close()  # another connection, another backend: not counted as this one
    connection.ensure_connection()
    assert backend.read() is None


@pytest.mark.django_db(transaction=True)  # each export request commits, as the endpoint's
def test_a_tiny_run_measures_every_path_and_leaves_no_row_or_task_behind() -> None:
    """Warm-ups included: every pass's traces are deleted, and the broker pass's tasks
    purged, so that a second run (or a test after it) starts from the same state."""
    from bench.otlp_ingest import PATHS, bench_otlp_ingest
    from traces.models import Step, Trace

    traces_before = Trace.objects.count()
    result = bench_otlp_ingest(traces=4, batch=2, repeats=1)

    assert result["paths"] == list(PATHS)
    assert result["requests_per_repeat"] == 2
    assert result["rows_per_repeat"] == 4 * 3  # a trace and its 2 steps each
    assert all(len(rates) == 1 and rates[0] > 0 for rates in result["rows_per_s"].values())
    assert Trace.objects.count() == traces_before
    assert not Step.objects.filter(idempotency_key__startswith="otel:").exists()
    assert _broker_purge() == 0
