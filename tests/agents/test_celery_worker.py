"""A real Celery worker, fed through the Redis broker, runs an agent against the sandbox."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from agents.services import run_start
from config.celery import app as celery_app
from sandbox.models import Order
from tests.celery_process import broker_fixture  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture  # noqa: F401
from traces.models import Trace

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def celery_worker(broker: RedisServer) -> Iterator[Any]:
    # A broker of this test's own: nothing to purge, and no one else's queue is touched.
    assert celery_app.conf.broker_url == broker.url
    with start_worker(
        celery_app,
        pool="threads",
        concurrency=4,
        queues=["agents", "default"],
        perform_ping_check=False,
        shutdown_timeout=30,
    ) as worker:
        yield worker


def wait_terminal(trace: Trace, timeout: float = 60.0) -> Trace:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trace.refresh_from_db()
        if trace.is_terminal:
            return trace
        time.sleep(0.1)  # polling the DB that the worker writes
    raise AssertionError(f"trace {trace.pk} still {trace.status} after {timeout}s")


def test_worker_runs_the_agent_and_writes_every_step(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    settings: Any,
    celery_worker: Any,
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    order = Order.objects.first()
    assert order is not None
    # when a run is started the way the API starts it (queued, enqueued after commit)
    trace = run_start(agent=support_agent, query=f"Where is my order {order.order_id}?")
    assert trace.status == Trace.Status.QUEUED
    trace = wait_terminal(trace)
    # then the worker executed it over HTTP and recorded every phase in order
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    steps = list(trace.steps.order_by("step_number"))
    assert [s.step_number for s in steps] == list(range(1, len(steps) + 1))
    assert [s.phase for s in steps][:3] == ["reasoning", "action", "reflection"]
    assert steps[-1].phase == "final"
    action = steps[1]
    assert action.tool_name == "get_order"
    assert action.status_code == 200
    assert action.endpoint.startswith(live_sandbox)
    assert order.order_id in trace.final_answer
    assert trace.attempts == 1
    assert trace.total_steps == len(steps)
