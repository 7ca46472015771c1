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
