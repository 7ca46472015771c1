"""The stuck-run sweeper: runs whose message was lost are handed over again, once each."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import kombu.pools
import pytest
from django.utils import timezone

import agents.tasks  # noqa: F401  (its time limits are read at import: before a test shrinks them)
from agents.services import run_enqueue
from agents.tasks import sweep_stuck_runs
from config.celery import app as celery_app
from sandbox.models import Order
from traces.models import Step, Trace
from traces.services import trace_create, traces_stuck

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop_runs(
    live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any, settings: Any
) -> Any:
    """Make runs of order questions, aged as if their worker or message were lost."""
    settings.AGENT_EXECUTOR = "inprocess"
    settings.LLM_SIM_ERROR_RATES = {}
    stuck_age = timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 3)
    orders = iter(Order.objects.order_by("order_id"))

    def make(*, status: str, age: timedelta = stuck_age) -> Trace:
        trace = trace_create(
            agent_id=support_agent.pk,
            query=f"Where is my order {next(orders).order_id}?",
            llm_backend="simulated",
        )
        Trace.objects.filter(pk=trace.pk).update(status=status, created_at=timezone.now() - age)
        trace.refresh_from_db()
        return trace

    return make


@pytest.fixture
def unread_broker(settings: Any) -> Iterator[None]:
    """Runs go to Celery through an in-memory broker that no worker reads: they stay queued."""
    settings.AGENT_EXECUTOR = "celery"
    previous = celery_app.conf.broker_url, celery_app.conf.broker_transport

    def reset_pools() -> None:
        kombu.pools.reset()  # one pool per broker URL, process-wide
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    reset_pools()
    celery_app.conf.broker_url, celery_app.conf.broker_transport = "memory://", None
    yield
    reset_pools()
    celery_app.conf.broker_url, celery_app.conf.broker_transport = previous


def wait_terminal(*traces: Trace, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for trace in traces:
            trace.refresh_from_db()
        if all(trace.is_terminal for trace in traces):
            return
        time.sleep(0.1)  # polling the DB that the event-loop thread writes
    raise AssertionError([(str(t.pk), t.status) for t in traces])


def test_sweep_hands_over_runs_without_progress_and_leaves_the_others(shop_runs: Any) -> None:
    # given runs lost while queued and while running, and runs that must be left alone
    lost_queued = shop_runs(status=Trace.Status.QUEUED)
    lost_running = shop_runs(status=Trace.Status.RUNNING)
    progressing = shop_runs(status=Trace.Status.RUNNING)
    Step.objects.create(
        trace=progressing, step_number=1, phase=Step.Phase.REASONING, started_at=timezone.now()
    )
    just_queued = shop_runs(status=Trace.Status.QUEUED, age=timedelta(0))
    ended = shop_runs(status=Trace.Status.FAILED)

    # when beat runs the sweeper
    handed_over = sweep_stuck_runs()

    # then exactly the lost runs are executed again, to the end
    assert handed_over == 2
    wait_terminal(lost_queued, lost_running)
    for trace in (lost_queued, lost_running):
        assert trace.status == Trace.Status.FINISHED, trace.final_answer
        assert trace.steps.filter(phase=Step.Phase.FINAL).count() == 1
    for trace, status in (
        (progressing, Trace.Status.RUNNING),
        (just_queued, Trace.Status.QUEUED),
        (ended, Trace.Status.FAILED),
    ):
        trace.refresh_from_db()
        assert trace.status == status
        assert trace.attempts == 0


def test_a_run_handed_over_twice_is_executed_to_one_end(shop_runs: Any, settings: Any) -> None:
    # given a lost run that two sweeps both found stuck (beat overlapping a slow sweep)
    lost = shop_runs(status=Trace.Status.QUEUED)
    stuck = traces_stuck(older_than=timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 2))
    assert stuck == [str(lost.pk)]

    # when both hand it over
    run_enqueue(trace_id=stuck[0])
    run_enqueue(trace_id=stuck[0])

    # then it ends once: one final answer, one unbroken sequence of steps
    wait_terminal(lost)
    assert lost.status == Trace.Status.FINISHED, lost.final_answer
    numbers = list(lost.steps.order_by("step_number").values_list("step_number", flat=True))
    assert numbers == list(range(1, len(numbers) + 1))
    assert lost.steps.filter(phase=Step.Phase.FINAL).count() == 1
    assert lost.total_steps == len(numbers)
    # and nothing is left to sweep
    assert sweep_stuck_runs() == 0


def test_a_run_still_waiting_is_handed_over_once_per_window(
    shop_runs: Any, unread_broker: None, settings: Any
) -> None:
    # given a lost run, handed over by a sweep, whose new message no worker has read yet
    waiting = shop_runs(status=Trace.Status.QUEUED)
    settings.AGENT_RUN_HARD_TIME_LIMIT = 1  # a window of two seconds
    assert sweep_stuck_runs() == 1

    # when beat sweeps again within the window, the run is not queued a second time
    assert sweep_stuck_runs() == 0
    waiting.refresh_from_db()
    assert waiting.status == Trace.Status.QUEUED

    # then once the window has passed without progress, it is handed over again
    deadline = time.monotonic() + 60
    while sweep_stuck_runs() == 0:
        assert time.monotonic() < deadline, "the run was never handed over again"
        time.sleep(0.1)  # waiting for the window to pass
