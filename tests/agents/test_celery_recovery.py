"""Recovery through a real Celery worker process on a broker of the test's own: the task's
time limits end a run with ``trace_abort``, and a redelivered run resumes from its records
without repeating a recorded tool call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.services import run_enqueue, run_start
from agents.tasks import run_agent
from sandbox.models import Order
from sandbox.services import faultrule_set
from tests.celery_process import broker_fixture, worker_process  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture, wait_for  # noqa: F401
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def start_worker(
    broker: RedisServer, live_sandbox: str, tmp_path: Path
) -> Iterator[Callable[..., dict[str, Any]]]:
    """Start a worker process with the given pool and extra environment; stopped after."""
    with contextlib.ExitStack() as stack:

        def start(*, pool: str = "threads", env: dict[str, str] | None = None) -> dict[str, Any]:
            workers = worker_process(
                broker=broker,
                sandbox_url=live_sandbox,
                log=tmp_path / f"worker-{pool}.log",
                node=f"recovery-{pool}-{broker.port}@test",
                pool=pool,
                concurrency=1 if pool == "prefork" else 2,
                env=env,
            )
            handle = next(workers)
            stack.callback(lambda: next(workers, None))
            return handle

        yield start


def wait_terminal(trace: Trace, worker: dict[str, Any]) -> Trace:
    def ended() -> bool:
        trace.refresh_from_db()
        return trace.is_terminal

    wait_for(ended, what=f"run {trace.pk} to end", log=worker["log"], alive=worker["process"])
    return trace


def order_question(support_agent: Any) -> tuple[Order, Trace]:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    return order, run_start(agent=support_agent, query=f"Where is my order {order.order_id}?")


# --- time limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "env", "soft_limit"),
    [
        # threads pool (bin/serve's): no Celery time limits there; the task stops waiting
        # at the hard limit it reads from the settings (TimeoutError)
        ("threads", {"AGENT_RUN_HARD_TIME_LIMIT": "2"}, None),
        # prefork: Celery's soft time limit, sent with the message, raises
        # SoftTimeLimitExceeded inside the task
        ("prefork", {}, 5),
    ],
    ids=["hard-limit-threads", "soft-limit-prefork"],
)
def test_a_run_past_the_task_time_limit_is_aborted_by_the_task(
    start_worker: Callable[..., dict[str, Any]],
    support_agent: Any,
    error_rules: Any,
    openai_server: Any,
    pool: str,
    env: dict[str, str],
    soft_limit: int | None,
) -> None:
    # given a hosted model that holds the request far longer than the task may run
    openai_server.enqueue(("hang", 60))
    worker = start_worker(
        pool=pool,
        env={
            **env,
            "LLM_BASE_URL": openai_server.base_url,
            "LLM_API_KEY": "test-key",
            "LLM_MODEL": "fake-model",
            "LLM_MAX_RETRIES": "0",
            "LLM_TIMEOUT_SECONDS": "120",
        },
    )
    trace = trace_create(
        agent_id=support_agent.pk, query="Where is my order #W1000001?", llm_backend="openai"
    )
    # when the run is handed to the worker as the API does, or sent with a soft limit
    if soft_limit is None:
        run_enqueue(trace_id=str(trace.pk))
    else:
        run_agent.apply_async((str(trace.pk),), soft_time_limit=soft_limit, time_limit=120)
    # then the task's handler ends it with a STOPPED step while the model call hangs
    trace = wait_terminal(trace, worker)
    assert (trace.status, trace.error_type) == (Trace.Status.FAILED, "RUN_TIME_LIMIT")
    stopped = trace.steps.get()
    assert stopped.phase == Step.Phase.STOPPED and stopped.error_detail == "task time limit"
    log = worker["log"].read_text()
    assert "run.time_limit" in log
    if soft_limit is not None:
        assert f"Soft time limit ({soft_limit}s) exceeded" in log


# --- redelivery ----------------------------------------------------------------------------


def _died_after(support_agent: Any, worker: dict[str, Any], keep: int) -> tuple[Order, Trace]:
    """A run executed by the worker, then cut back to its first ``keep`` steps and marked
    running: what a worker that died after writing them leaves behind."""
    order, trace = order_question(support_agent)
    trace = wait_terminal(trace, worker)
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    assert [s.phase for s in trace.steps.order_by("step_number")][:2] == ["reasoning", "action"]
    trace.steps.filter(step_number__gt=keep).delete()
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.RUNNING, final_answer="", outcome="", finished_at=None
    )
    return order, trace


def test_a_redelivered_run_does_not_repeat_its_recorded_tool_call(
    start_worker: Callable[..., dict[str, Any]],
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
) -> None:
    # given a run whose worker died right after recording its order lookup
    worker = start_worker()
    order, trace = _died_after(support_agent, worker, keep=2)
    recorded = trace.steps.get(step_number=2)
    # and an orders endpoint that now fails every call: a repeated call would show
    faultrule_set(endpoint="orders", rate_500=1.0)
    # when the message is delivered again
    run_enqueue(trace_id=str(trace.pk))
    # then the run carries on from the recorded observation to the same answer
    trace = wait_terminal(trace, worker)
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    assert order.order_id in trace.final_answer
    actions = list(trace.steps.filter(phase=Step.Phase.ACTION))
    assert [a.pk for a in actions] == [recorded.pk]
    numbers = list(trace.steps.order_by("step_number").values_list("step_number", flat=True))
    assert numbers == list(range(1, len(numbers) + 1))
    assert trace.attempts == 2


def test_a_run_that_died_during_its_tool_call_resumes_from_the_recorded_decision(
    start_worker: Callable[..., dict[str, Any]],
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
) -> None:
    # given a run whose worker died while its order lookup was in flight (EXECUTING_TOOL):
    # the decision is recorded, the call is not
    worker = start_worker()
    order, trace = _died_after(support_agent, worker, keep=1)
    decision = trace.steps.get(step_number=1)
    # when the message is delivered again
    run_enqueue(trace_id=str(trace.pk))
    # then the recorded decision is carried out (the model is not asked again) and the run
    # ends with one unbroken sequence of steps
    trace = wait_terminal(trace, worker)
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    assert order.order_id in trace.final_answer
    steps = list(trace.steps.order_by("step_number"))
    assert steps[0].pk == decision.pk
    assert [s.phase for s in steps[:3]] == ["reasoning", "action", "reflection"]
    assert steps[1].tool_name == decision.tool_name and steps[1].ok
    assert [s.step_number for s in steps] == list(range(1, len(steps) + 1))
    assert trace.steps.filter(phase=Step.Phase.ACTION).count() == 1


@pytest.mark.parametrize(
    ("run_soft", "run_hard", "task_soft"),
    [(120, 150, 130), (8, 10, 10), (100, 105, 105)],
)
def test_the_task_soft_limit_never_passes_the_hard_limit(
    run_soft: float, run_hard: float, task_soft: float
) -> None:
    # Celery refuses to enqueue a task whose soft limit is above its hard one: with the
    # run's limits less than 10 s apart, every POST /api/runs/ answered 500.
    from celery import Celery

    from agents.tasks import celery_soft_time_limit

    limit = celery_soft_time_limit(run_soft=run_soft, run_hard=run_hard)
    assert limit == task_soft
    # not the current app: shared tasks (run_agent) would resolve to it for later tests
    app = Celery("limits", broker="memory://", set_as_current=False)

    @app.task(soft_time_limit=limit, time_limit=run_hard, shared=False)
    def noop() -> None:
        return None

    noop.apply_async()  # raises ValueError when the soft limit passes the hard one
