"""The run task while PostgreSQL restarts: a run whose database went away is tried again
(and resumes), any other database error fails the task as before.

The first attempt meets a real connection failure (Django connecting to a port nobody
listens on, what a stopped PostgreSQL gives); the next attempt is the real run. Celery's
``apply`` runs a retry at once, in this process."""

from __future__ import annotations

from typing import Any

import pytest

from agents import tasks
from agents.tasks import run_agent
from sandbox.models import Order
from tests.config.urls_db_unavailable import database_wrapper
from tests.redis_server import free_port
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


def _database_away() -> None:
    database_wrapper(PORT=str(free_port())).ensure_connection()


def _bad_query() -> None:
    session = database_wrapper()
    try:
        with session.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")
    finally:
        session.close()


@pytest.fixture
def attempts() -> list[str]:
    """The trace id of each attempt of the task."""
    return []


def _flaky(
    monkeypatch: pytest.MonkeyPatch, attempts: list[str], *, failures: int, fault: Any
) -> None:
    real = tasks.run_execute_blocking

    def attempt(*, trace_id: str, timeout: float | None = None) -> None:
        attempts.append(trace_id)
        if len(attempts) <= failures:
            fault()
        real(trace_id=trace_id, timeout=timeout)

    monkeypatch.setattr(tasks, "run_execute_blocking", attempt)


def test_a_run_whose_database_went_away_is_tried_again_and_ends(
    support_agent: Any,
    error_rules: None,
    small_shop: dict[str, int],
    live_sandbox: str,
    monkeypatch: pytest.MonkeyPatch,
    attempts: list[str],
) -> None:
    # given a queued run (stored, not handed to any worker yet), and a database that is
    # away at the task's first attempt
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Where is my order {order.order_id}?",
        llm_backend="simulated",
    )
    _flaky(monkeypatch, attempts, failures=1, fault=_database_away)
    # when the worker runs the task
    result = run_agent.apply(args=[str(trace.pk)])
    # then it was tried again, and the run ended
    assert attempts == [str(trace.pk)] * 2
    assert result.state == "SUCCESS"
    trace.refresh_from_db()
    assert trace.status == Trace.Status.FINISHED


def test_a_database_away_for_longer_than_the_retries_fails_the_task(
    monkeypatch: pytest.MonkeyPatch, attempts: list[str]
) -> None:
    monkeypatch.setattr(tasks, "RUN_DB_MAX_RETRIES", 2)
    _flaky(monkeypatch, attempts, failures=99, fault=_database_away)
    result = run_agent.apply(args=["00000000-0000-0000-0000-000000000001"])
    # the first attempt and two retries; then the sweeper's turn
    assert len(attempts) == 3
    assert result.state == "FAILURE"
    assert type(result.result).__name__ == "OperationalError"


def test_another_database_error_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch, attempts: list[str]
) -> None:
    _flaky(monkeypatch, attempts, failures=1, fault=_bad_query)
    result = run_agent.apply(args=["00000000-0000-0000-0000-000000000001"])
    assert len(attempts) == 1
    assert result.state == "FAILURE"
    assert type(result.result).__name__ == "ProgrammingError"
