"""An ended run's hand-off to the learning loop is durable: the run's end marks it as owed
(``Trace.learning``), each part of the hand-off clears its part of the mark, and the
learning sweep finishes hand-offs that a killed worker or an absent broker cut short,
without scoring a run twice."""

from __future__ import annotations

import logging
import signal
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import cache
from django.utils import timezone

from policies import tasks
from policies.reflexion import failures_of_trace
from policies.services import run_ended
from sandbox.models import Order
from sandbox.services import faultrule_set
from tests.agents.runtime_helpers import run_query
from tests.celery_process import broker_fixture, reset_broker_pools  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture  # noqa: F401
from traces.models import Step, Trace
from traces.services import trace_create, trace_finish


def _run(support_agent: Any, *, strategy_id: int, ok: bool = True) -> Trace:
    """A run with one action step that applied the adapter ``strategy_id``, still open."""
    trace = trace_create(
        agent_id=support_agent.pk, query="Where is my order #W1000001?", llm_backend="simulated"
    )
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        tool_name="get_order",
        action_input={"order_id": "#W1000001"},
        ok=ok,
        error_type="" if ok else "TYPE_MISMATCH",
        status_code=200 if ok else 400,
        started_at=timezone.now(),
        strategies_applied=[{"id": strategy_id, "kind": "adapter"}],
    )
    return trace


def _finish(trace: Trace, *, failed: bool = False, learn: bool = True) -> Trace:
    return trace_finish(
        trace_id=str(trace.pk),
        status="failed" if failed else "finished",
        final_answer="" if failed else "Your order has shipped.",
        outcome="failed" if failed else "answered_from_data",
        error_type="TYPE_MISMATCH" if failed else "",
        learn=learn,
    )


def _learning(trace: Trace) -> str:
    return Trace.objects.values_list("learning", flat=True).get(pk=trace.pk)


def _queued(server: RedisServer, queue: str = "reflexion") -> int:
    """Messages waiting on ``queue`` in the test's own broker (kombu keeps one Redis list
    per queue and priority)."""
    client = redis.Redis(port=server.port)
    return sum(int(client.llen(key)) for key in client.scan_iter(f"{queue}*"))


def _broker_back_and_swept(broker: RedisServer, trace: Trace) -> None:
    """The broker comes back; the next sweep queues the run's one Reflexion job and clears
    its mark."""
    broker.start()
    reset_broker_pools()
    assert tasks.runs_learning_sweep() == 1
    assert _queued(broker) == 1
    assert _learning(trace) == ""


def _debounce_keys(trace: Trace) -> list[str]:
    return [f"reflexion:{facts.signature}" for facts in failures_of_trace(trace)]


@pytest.mark.django_db
def test_a_run_is_owed_from_its_end_and_scored_once_however_often_it_is_handed_off(
    make_strategy: Any, support_agent: Any
) -> None:
    adapter = make_strategy()
    trace = _finish(_run(support_agent, strategy_id=adapter.pk))
    assert trace.learning == Trace.Learning.PENDING == _learning(trace)

    run_ended(trace_id=str(trace.pk))
    # a redelivered run, or the sweep racing the hand-off, hands it off again
    run_ended(trace_id=str(trace.pk))
    run_ended(trace_id=str(trace.pk), trace=trace)  # even with the stale row in hand

    adapter.refresh_from_db()
    assert (adapter.applications, adapter.successes) == (1, 1)
    assert _learning(trace) == ""


@pytest.mark.django_db
def test_a_run_ended_without_learning_is_never_scored(
    make_strategy: Any, support_agent: Any
) -> None:
    # a replay, or a run the learning loop must not see
    adapter = make_strategy()
    trace = _finish(_run(support_agent, strategy_id=adapter.pk), learn=False)
    assert _learning(trace) == ""

    run_ended(trace_id=str(trace.pk))

    adapter.refresh_from_db()
    assert adapter.applications == 0


@pytest.mark.django_db
def test_the_sweep_waits_out_the_grace_period_and_takes_the_oldest_first(
    make_strategy: Any, support_agent: Any, settings: Any
) -> None:
    settings.LEARNING_SWEEP_GRACE_SECONDS = 300
    adapter = make_strategy()
    now = timezone.now()
    ages = {"recent": 60, "old": 1200, "older": 2400}
    runs = {}
    for name, age in ages.items():
        trace = _finish(_run(support_agent, strategy_id=adapter.pk))
        Trace.objects.filter(pk=trace.pk).update(finished_at=now - timedelta(seconds=age))
        runs[name] = trace

    assert tasks.runs_learning_sweep(limit=1) == 1
    assert [_learning(runs[n]) for n in ("recent", "old", "older")] == ["pending", "pending", ""]
    assert tasks.runs_learning_sweep() == 1
    # the run that ended a minute ago may still be in its own hand-off
    assert [_learning(runs[n]) for n in ("recent", "old", "older")] == ["pending", "", ""]
    assert tasks.runs_learning_sweep() == 0
    adapter.refresh_from_db()
    assert adapter.applications == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_a_broker_away_leaves_the_run_scored_and_the_sweep_queues_its_reflexion_once(
    broker: RedisServer,
    make_strategy: Any,
    support_agent: Any,
    error_rules: None,
    settings: Any,
) -> None:
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 30
    settings.LEARNING_SWEEP_GRACE_SECONDS = 0
    adapter = make_strategy()
    trace = _finish(_run(support_agent, strategy_id=adapter.pk, ok=False), failed=True)
    keys = _debounce_keys(trace)
    assert keys
    cache.delete_many(keys)

    # when the broker is away as the run is handed off
    broker.stop(signal.SIGKILL)
    with pytest.raises(Exception):  # noqa: B017 - kombu's error for a refused connection
        run_ended(trace_id=str(trace.pk))

    # then the run is scored, once, and still owes its Reflexion; the signatures it claimed
    # are released, or the retry would be debounced away
    adapter.refresh_from_db()
    assert (adapter.applications, adapter.successes) == (1, 0)
    assert _learning(trace) == Trace.Learning.SCORED
    assert cache.get_many(keys) == {}

    # and once the broker is back, the sweep queues one Reflexion job and clears the mark
    _broker_back_and_swept(broker, trace)
    assert tasks.runs_learning_sweep() == 0
    adapter.refresh_from_db()
    assert adapter.applications == 1
    cache.delete_many(keys)


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_a_run_that_fails_while_the_broker_is_away_ends_and_is_learned_from_later(
    broker: RedisServer,
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: None,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real run, on the simulated model, against an API that changed its contract."""
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 30
    faultrule_set(endpoint="orders", drift="require_int_id")
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    broker.stop(signal.SIGKILL)

    with caplog.at_level(logging.WARNING, logger="agents.services"):
        trace, outcome = run_query(
            support_agent, f"Where is my order {order.order_id}?", backend="simulated"
        )

    # the run ends for the customer although its hand-off failed, and says why it is deferred
    assert outcome is not None and trace.is_terminal
    assert trace.steps.filter(error_type="TYPE_MISMATCH").exists()
    assert trace.learning == Trace.Learning.SCORED
    [deferred] = [r for r in caplog.records if r.getMessage() == "run.learning_deferred"]
    assert deferred.trace_id == str(trace.pk)  # type: ignore[attr-defined]
    keys = _debounce_keys(trace)
    assert keys and cache.get_many(keys) == {}

    # a sweep while the broker is still away changes nothing, and gives up after a few
    # refusals in a row rather than trying every owed run
    settings.LEARNING_SWEEP_GRACE_SECONDS = 0
    more = [_run(support_agent, strategy_id=0, ok=False) for _ in range(2)]
    for other in more:
        Trace.objects.filter(pk=other.pk).update(
            status="failed", finished_at=timezone.now(), learning=Trace.Learning.SCORED
        )
    tried = []
    real_run_ended = run_ended

    def counted(**kwargs: Any) -> None:
        tried.append(kwargs["trace_id"])
        real_run_ended(**kwargs)

    with (
        caplog.at_level(logging.WARNING, logger="policies.tasks"),
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr("policies.services.run_ended", counted)
        patch.setattr(tasks, "SWEEP_FAILURES_IN_A_ROW", 2)
        assert tasks.runs_learning_sweep() == 0
    assert tried == [str(trace.pk), str(more[0].pk)]
    Trace.objects.filter(pk__in=[o.pk for o in more]).update(learning="")
    assert _learning(trace) == Trace.Learning.SCORED
    assert cache.get_many(keys) == {}

    _broker_back_and_swept(broker, trace)
    cache.delete_many(keys)


@pytest.mark.django_db(transaction=True)
def test_an_ingested_run_whose_hand_off_was_lost_is_learned_by_the_sweep(
    make_strategy: Any, error_rules: None, settings: Any
) -> None:
    from tests.policies.test_external_runs_learning import _export_body, ingest_without_hand_off

    settings.LEARNING_SWEEP_GRACE_SECONDS = 0
    body, ids = _export_body(2)
    # the request's hand-off is lost (the process ended before its commit hook ran)
    ingest_without_hand_off(body)
    owed = Trace.objects.filter(pk__in=ids)
    assert set(owed.values_list("learning", flat=True)) == {Trace.Learning.PENDING}

    assert tasks.runs_learning_sweep() == 2
    assert set(owed.values_list("learning", flat=True)) == {""}


def test_the_sweep_runs_on_beat_and_in_the_embedded_worker() -> None:
    from agents.hooks import periodic_jobs

    [entry] = [
        e
        for e in django_settings.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == "policies.learning_sweep"
    ]
    assert entry["schedule"] == django_settings.LEARNING_SWEEP_INTERVAL_SECONDS
    [job] = [j for j in periodic_jobs() if j.name == "policies.learning_sweep"]
    assert job.interval_seconds == django_settings.LEARNING_SWEEP_INTERVAL_SECONDS
    assert tasks.learning_sweep.name == "policies.learning_sweep"


@pytest.mark.django_db
def test_the_sweep_task_runs_a_pass(make_strategy: Any, support_agent: Any, settings: Any) -> None:
    settings.LEARNING_SWEEP_GRACE_SECONDS = 0
    adapter = make_strategy()
    trace = _finish(_run(support_agent, strategy_id=adapter.pk))

    assert tasks.learning_sweep() == 1
    assert _learning(trace) == ""


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_without_a_debounce_a_refused_job_releases_nothing_and_ingested_runs_go_to_the_broker(
    broker: RedisServer, support_agent: Any, error_rules: None, settings: Any
) -> None:
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 0
    trace = _finish(_run(support_agent, strategy_id=0, ok=False), failed=True)
    keys = _debounce_keys(trace)

    # an empty hand-off sends nothing; a request's ended runs go as one task
    tasks.external_runs_hand_off(trace_ids=[])
    assert _queued(broker) == 0
    tasks.external_runs_hand_off(trace_ids=[str(trace.pk)])
    assert _queued(broker) == 1

    broker.stop(signal.SIGKILL)
    with pytest.raises(Exception):  # noqa: B017 - kombu's error for a refused connection
        tasks.reflexion_enqueue(trace_id=str(trace.pk), trace=trace)
    assert cache.get_many(keys) == {}
