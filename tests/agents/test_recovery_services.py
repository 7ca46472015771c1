"""Recovery at the service level: what counts as stuck, ending a run that cannot go on, a
crashing run, and the Celery task giving up at its hard time limit (run in this process,
on the real event-loop thread; the worker-process versions are in test_celery_recovery)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.services import run_execute
from agents.tasks import run_agent
from tests.agents.runtime_helpers import declared_tool, tools_registered, use_fake_llm
from traces.models import Job, Step, Trace
from traces.services import (
    JOB_STALE_AFTER,
    job_start,
    jobs_abandon_stale,
    trace_abort,
    trace_create,
    traces_stuck,
)

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW = timedelta(minutes=10)
STARTED: list[str] = []
CANCELLED: list[str] = []


@declared_tool(
    name="hangs_until_cancelled",
    description="Test tool: waits far longer than the task may run.",
    params_schema={"type": "object", "properties": {}, "additionalProperties": False},
    timeout_seconds=300,
)
async def hangs_until_cancelled() -> dict[str, str]:
    STARTED.append("hangs_until_cancelled")
    try:
        await asyncio.sleep(300)
    except asyncio.CancelledError:
        CANCELLED.append("hangs_until_cancelled")
        raise
    return {"late": "yes"}


@pytest.fixture
def agent(support_agent: Any, error_rules: None) -> Any:
    return support_agent


def make_trace(agent: Any, *, status: str, age: timedelta, step_ages: tuple = ()) -> Trace:
    trace = trace_create(agent_id=agent.pk, query="Where is my order?", llm_backend="simulated")
    Trace.objects.filter(pk=trace.pk).update(status=status, created_at=timezone.now() - age)
    for number, step_age in enumerate(step_ages, start=1):
        step = Step.objects.create(
            trace=trace, step_number=number, phase="reasoning", started_at=timezone.now()
        )
        Step.objects.filter(pk=step.pk).update(created_at=timezone.now() - step_age)
    return trace


# --- what the sweeper picks up -------------------------------------------------------------


def test_stuck_means_unfinished_and_without_progress_for_the_whole_window(agent: Any) -> None:
    # given runs on either side of the window
    queued_long_ago = make_trace(agent, status="queued", age=WINDOW * 2)
    running_old_steps = make_trace(
        agent, status="running", age=WINDOW * 3, step_ages=(WINDOW * 2, WINDOW + timedelta(1))
    )
    make_trace(agent, status="queued", age=WINDOW - timedelta(minutes=1))  # too young
    make_trace(agent, status="running", age=WINDOW * 3, step_ages=(WINDOW * 2, timedelta(0)))
    make_trace(agent, status="failed", age=WINDOW * 3)  # ended
    make_trace(agent, status="finished", age=WINDOW * 3, step_ages=(WINDOW * 2,))
    # when
    stuck = traces_stuck(older_than=WINDOW)
    # then exactly the two without progress for the window, each once
    assert sorted(stuck) == sorted([str(queued_long_ago.pk), str(running_old_steps.pk)])


def test_a_stale_job_is_failed_and_a_reporting_one_is_left(
    db: None, caplog: pytest.LogCaptureFixture
) -> None:
    stale = job_start(kind=Job.Kind.values[0], name="stale")
    fresh = job_start(kind=Job.Kind.values[0], name="fresh")
    Job.objects.filter(pk=stale.pk).update(
        updated_at=timezone.now() - JOB_STALE_AFTER - timedelta(minutes=1)
    )
    assert jobs_abandon_stale() == 1
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == Job.Status.FAILED and stale.finished_at is not None
    assert stale.message.startswith("no progress for 30 min")
    assert fresh.status == Job.Status.RUNNING
    # ... and an operator's log says how many were given up
    [record] = [
        r for r in caplog.records if r.name == "traces.services" and r.levelname == "WARNING"
    ]
    assert (record.getMessage(), record.__dict__["count"]) == ("job.abandoned", 1)


# --- ending a run that cannot go on --------------------------------------------------------


def test_abort_ends_the_run_with_a_stopped_step_after_the_last(agent: Any) -> None:
    trace = make_trace(agent, status="running", age=timedelta(0), step_ages=(timedelta(0),) * 2)
    detail = "worker lost; card 4111 1111 1111 1111 " + "x" * 3000
    trace_abort(trace_id=str(trace.pk), error_type="RUN_TIME_LIMIT", detail=detail)
    trace.refresh_from_db()
    stopped = trace.steps.get(step_number=3)
    assert stopped.phase == Step.Phase.STOPPED and not stopped.ok
    assert stopped.error_type == "RUN_TIME_LIMIT"
    assert "4111 1111 1111 1111" not in stopped.error_detail
    assert len(stopped.error_detail) == 2000
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FAILED,
        Trace.Outcome.FAILED,
        "RUN_TIME_LIMIT",
    )
    assert trace.total_steps == 3 and trace.finished_at is not None


def test_abort_leaves_an_ended_run_as_it_ended(agent: Any) -> None:
    trace = make_trace(agent, status="finished", age=timedelta(0), step_ages=(timedelta(0),))
    trace_abort(trace_id=str(trace.pk), error_type="RUN_TIME_LIMIT", detail="late")
    trace.refresh_from_db()
    assert trace.status == Trace.Status.FINISHED and trace.error_type == ""
    assert trace.steps.count() == 1


def test_a_crashing_run_is_aborted_as_unknown_and_the_error_raised(agent: Any) -> None:
    trace = trace_create(agent_id=agent.pk, query="Where is my order?", llm_backend="no-such")
    with pytest.raises(ValueError, match="Unknown LLM_BACKEND 'no-such'"):
        async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    assert (trace.status, trace.error_type) == (Trace.Status.FAILED, "UNKNOWN")
    stopped = trace.steps.get()
    assert stopped.phase == Step.Phase.STOPPED
    assert stopped.error_detail.startswith("ValueError: Unknown LLM_BACKEND")


def test_a_missing_or_ended_run_is_not_executed(agent: Any) -> None:
    import uuid

    assert async_to_sync(run_execute)(trace_id=str(uuid.uuid4())) is None
    ended = make_trace(agent, status="failed", age=timedelta(0))
    assert async_to_sync(run_execute)(trace_id=str(ended.pk)) is None
    ended.refresh_from_db()
    assert ended.attempts == 0 and ended.steps.count() == 0


# --- the Celery task at its hard time limit -------------------------------------------------


@pytest.fixture
def hanging_tool(agent: Any) -> Iterator[None]:
    from agents.services import tools_sync

    STARTED.clear()
    CANCELLED.clear()
    with tools_registered(hangs_until_cancelled):
        tools_sync(agents=[agent])
        yield


def test_the_task_gives_up_at_its_hard_limit_aborts_the_run_and_cancels_it(
    agent: Any, hanging_tool: None, settings: Any, openai_server: Any
) -> None:
    # given a redelivered run whose recorded decision is a call of a tool that hangs, and a
    # task allowed two seconds (no model call comes before the tool's)
    use_fake_llm(settings, openai_server)
    settings.AGENT_RUN_HARD_TIME_LIMIT = 2
    trace = trace_create(agent_id=agent.pk, query="Do the slow thing", llm_backend="openai")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase=Step.Phase.REASONING,
        action_type=Step.ActionType.TOOL,
        tool_name="hangs_until_cancelled",
        started_at=timezone.now(),
    )
    # when the task runs (as a worker would call it)
    run_agent(str(trace.pk))
    # then the run is ended by the task's handler, not left running
    trace.refresh_from_db()
    assert (trace.status, trace.error_type) == (Trace.Status.FAILED, "RUN_TIME_LIMIT")
    assert [s.phase for s in trace.steps.order_by("step_number")] == ["reasoning", "stopped"]
    assert trace.steps.get(step_number=2).error_detail == "task time limit"
    # and the run's coroutine was cancelled wherever it was: a run left going would hang in
    # the tool (on a slow machine the limit may strike before the call starts)
    deadline = time.monotonic() + 30
    while _runs_on_the_loop():
        assert time.monotonic() < deadline, "the run's coroutine is still going"
        time.sleep(0.05)  # waiting for the event-loop thread
    assert CANCELLED == STARTED
    assert trace.steps.count() == 2


def _runs_on_the_loop() -> list[asyncio.Task[Any]]:
    from agents.loop_runner import loop_runner

    async def pending() -> list[asyncio.Task[Any]]:
        return [
            task
            for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__qualname__", "") == "run_execute"
        ]

    return asyncio.run_coroutine_threadsafe(pending(), loop_runner().loop).result(timeout=10)
