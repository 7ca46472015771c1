"""The embedded worker: runs started inside a request finish after the request has ended,
and the in-process sweeper recovers stuck runs the way Celery beat does."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import AsyncClient
from django.utils import timezone

from agents.inprocess import embedded_worker_start, stuck_runs_sweep_forever
from agents.loop_runner import loop_runner
from sandbox.models import Order
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for_terminal(trace_id: Any, *, deadline_s: float = 60.0) -> Trace:
    """Poll the row until the run ends; the deadline only bounds a hung test."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        trace = Trace.objects.get(pk=trace_id)
        if trace.is_terminal:
            return trace
        time.sleep(0.05)
    raise AssertionError(f"run {trace_id} never ended: {Trace.objects.get(pk=trace_id).status}")


@pytest.fixture
def inprocess(settings: Any, live_sandbox: str) -> None:
    settings.AGENT_EXECUTOR = "inprocess"
    settings.LLM_SIM_ERROR_RATES = {}


def test_a_run_posted_through_the_asgi_app_finishes_after_the_request_ends(
    inprocess: None, small_shop: Any, support_agent: Any, error_rules: Any, ops_user: Any
) -> None:
    # given a run posted through Django's ASGI handler (the path daphne serves), whose
    # per-request executors asgiref shuts down once the response is sent
    order = Order.objects.first()
    assert order is not None

    async def request() -> Any:
        client = AsyncClient()
        await client.aforce_login(ops_user)
        return await client.post(
            "/api/runs/",
            {"query": f"Where is my order {order.order_id}?"},
            content_type="application/json",
        )

    response = asyncio.run(request())
    assert response.status_code == 202, response.content
    # then the run still ends, answered, with its steps recorded
    trace = wait_for_terminal(response.json()["id"])
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    assert trace.steps.filter(phase="action", ok=True).exists()


def test_the_embedded_sweeper_re_enqueues_a_run_left_queued(
    inprocess: None, small_shop: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    # given a run whose message was lost when the process stopped, older than the cutoff
    order = Order.objects.first()
    assert order is not None
    trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Where is my order {order.order_id}?",
        llm_backend="simulated",
    )
    old = timezone.now() - timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 2 + 5)
    Trace.objects.filter(pk=trace.pk).update(created_at=old)
    # and a fresh queued run that is not stuck yet
    fresh = trace_create(agent_id=support_agent.pk, query="hello", llm_backend="simulated")
    # when the sweeper runs
    sweeper = loop_runner().submit(stuck_runs_sweep_forever(interval=0.05))
    try:
        # then the stuck run is executed to the end, and the fresh one is left alone
        assert wait_for_terminal(trace.pk).status == Trace.Status.FINISHED
        assert Trace.objects.get(pk=fresh.pk).status == Trace.Status.QUEUED
    finally:
        sweeper.cancel()


def test_the_embedded_sweeper_is_not_started_when_celery_runs_the_agents(settings: Any) -> None:
    settings.AGENT_EXECUTOR = "celery"
    assert embedded_worker_start() is False


def test_the_embedded_worker_starts_once_runs_every_registered_job_and_stops(
    settings: Any,
) -> None:
    from agents import inprocess
    from agents.hooks import periodic_jobs
    from agents.inprocess import embedded_worker_stop

    settings.AGENT_EXECUTOR = "inprocess"
    embedded_worker_stop()  # whatever an earlier test's ASGI import started
    assert embedded_worker_start() is True
    assert embedded_worker_start() is False
    loops = list(inprocess._loops)
    # the sweeper, plus the jobs the learning loop registered (the rollout evaluator)
    assert "policies.evaluate_rollouts" in {job.name for job in periodic_jobs()}
    assert len(loops) == 1 + len(periodic_jobs())

    embedded_worker_stop()
    end = time.monotonic() + 30
    while not all(loop.done() for loop in loops):
        assert time.monotonic() < end, "the worker's loops did not stop"
        time.sleep(0.02)  # polling the futures' state
    assert all(loop.cancelled() for loop in loops)
    # and it can start again
    assert embedded_worker_start() is True
    embedded_worker_stop()
