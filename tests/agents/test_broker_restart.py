"""A Redis restart under a real Celery worker: the worker lives on and no accepted run is lost.

The test owns its Redis server (a free port, nothing on disk, so a restart empties every
queue) and its worker process, started the way ``bin/serve`` starts them (threads pool,
spare capacity, so the worker is waiting on BRPOP while runs are in flight).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import agents.tasks  # noqa: F401  (its time limits are read at import: before a test shrinks them)
from agents.services import run_start
from agents.tasks import sweep_stuck_runs
from sandbox.models import Order
from sandbox.services import faultrule_clear, faultrule_set
from tests.celery_process import broker_fixture, worker_pid, worker_process  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture, wait_for  # noqa: F401
from traces.models import Step, Trace

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(broker: RedisServer, live_sandbox: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real worker process, bin/serve's command line, on the test database and broker."""
    yield from worker_process(
        broker=broker,
        sandbox_url=live_sandbox,
        log=tmp_path / "worker.log",
        node=f"restart-{broker.port}@test",
    )


def _statuses(traces: list[Trace]) -> list[str]:
    return list(
        Trace.objects.filter(pk__in=[t.pk for t in traces])
        .order_by("created_at")
        .values_list("status", flat=True)
    )


def _all_terminal(traces: list[Trace]) -> bool:
    return all(s in Trace.TERMINAL_STATUSES for s in _statuses(traces))


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_worker_survives_a_redis_restart_and_every_accepted_run_ends(
    worker: dict[str, Any],
    broker: RedisServer,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    settings: Any,
    stop_signal: signal.Signals,
) -> None:
    log, process = worker["log"], worker["process"]
    pid = process.pid
    assert worker_pid(worker) == pid
    orders = list(Order.objects.order_by("order_id")[:5])

    def start(order: Order) -> Trace:
        return run_start(agent=support_agent, query=f"Where is my order {order.order_id}?")

    # given two runs in flight: the worker holds their messages unacknowledged (acks_late)
    # while the order lookup is slow, and has idle threads waiting on the broker
    faultrule_set(endpoint="orders", rate_slow=1.0, slow_ms=1500)
    in_flight = [start(orders[0]), start(orders[1])]
    wait_for(
        lambda: set(_statuses(in_flight)) == {Trace.Status.RUNNING},
        what="both runs to be running",
        log=log,
        alive=process,
    )

    # when Redis goes away, runs are accepted while it is away, and it comes back empty
    broker.stop(stop_signal)
    accepted_in_outage = [start(orders[2]), start(orders[3])]
    assert _statuses(accepted_in_outage) == [Trace.Status.QUEUED] * 2
    broker.start()
    faultrule_clear(endpoint="orders")

    # then the runs in flight finish on their own, in the same worker process
    wait_for(
        lambda: _all_terminal(in_flight), what="the in-flight runs to end", log=log, alive=process
    )
    # and that process reconnects and consumes what is sent after the restart
    after_restart = [start(orders[4])]
    wait_for(
        lambda: _all_terminal(after_restart),
        what="a run sent after the restart",
        log=log,
        alive=process,
    )
    reported = wait_for(lambda: worker_pid(worker), what="the worker", log=log, alive=process)
    assert reported == pid

    # and the sweeper, as beat runs it, hands over the runs whose messages never reached
    # Redis (a restart without persistence loses queued messages the same way)
    settings.AGENT_RUN_HARD_TIME_LIMIT = 1  # "stuck" = no progress for two seconds

    def swept() -> bool:
        sweep_stuck_runs()
        return _all_terminal(accepted_in_outage)

    wait_for(swept, what="the sweeper to end the runs of the outage", log=log, alive=process)

    # and each run was executed once to the end: answered from the shop's data (the slow
    # lookups of the runs in flight may have timed out, so only their ending is certain)
    runs = in_flight + accepted_in_outage + after_restart
    for trace in runs:
        numbers = list(trace.steps.order_by("step_number").values_list("step_number", flat=True))
        assert numbers == list(range(1, len(numbers) + 1))
    for trace, order in zip(accepted_in_outage + after_restart, orders[2:], strict=True):
        trace.refresh_from_db()
        assert trace.status == Trace.Status.FINISHED, trace.final_answer
        assert order.order_id in trace.final_answer
    assert "Unrecoverable error" not in log.read_text()
    assert process.poll() is None


def test_worker_survives_a_dropped_connection_and_redelivered_runs_end_once(
    worker: dict[str, Any],
    broker: RedisServer,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
) -> None:
    log, process = worker["log"], worker["process"]
    orders = list(Order.objects.order_by("order_id")[:2])
    # given two runs in flight, their messages unacknowledged, idle threads on BRPOP
    faultrule_set(endpoint="orders", rate_slow=1.0, slow_ms=1500)
    in_flight = [
        run_start(agent=support_agent, query=f"Where is my order {order.order_id}?")
        for order in orders
    ]
    wait_for(
        lambda: set(_statuses(in_flight)) == {Trace.Status.RUNNING},
        what="both runs to be running",
        log=log,
        alive=process,
    )

    # when Redis stays up but drops every client connection (a proxy, a failover, `timeout`)
    client = redis.Redis(port=broker.port)
    for kind in ("normal", "pubsub"):
        client.client_kill_filter(_type=kind)

    # then the worker puts the unacknowledged messages back and runs them again beside the
    # originals: each run still ends once, with one unbroken sequence of steps
    wait_for(lambda: _all_terminal(in_flight), what="the runs to end", log=log, alive=process)
    endings = (Step.Phase.FINAL, Step.Phase.FALLBACK, Step.Phase.STOPPED)
    for trace in in_flight:
        numbers = list(trace.steps.order_by("step_number").values_list("step_number", flat=True))
        assert numbers == list(range(1, len(numbers) + 1))
        assert trace.steps.filter(phase__in=endings).count() == 1
    # and the same worker process goes on consuming
    faultrule_clear(endpoint="orders")
    after = [run_start(agent=support_agent, query=f"Where is my order {orders[0].order_id}?")]
    wait_for(lambda: _all_terminal(after), what="a run sent after the drop", log=log, alive=process)
    assert wait_for(lambda: worker_pid(worker), what="the worker", alive=process) == process.pid
    assert "Unrecoverable error" not in log.read_text()
