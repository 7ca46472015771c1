"""The OTLP benchmark leaves no task behind on its broker: a worker started later on the
same Redis database (an end-to-end test's) would otherwise run the benchmark's hand-offs."""

from __future__ import annotations

from bench.otlp_ingest import _broker_purge
from config.celery import app


def test_the_broker_pass_purges_the_learning_queue_too() -> None:
    _broker_purge()
    for queue in ("reflexion", "agents", "default"):
        app.send_task("policies.external_runs_learn", args=[["not-a-trace"]], queue=queue)
    assert _broker_purge() == 3
    assert _broker_purge() == 0
