"""The run loop's database pool: bounded connections, shared by many runs, healed after a
connection drops."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.db import OperationalError, connection

from agents.loop_runner import loop_runner
from traces.db_threads import db_async, db_call, db_threads_close

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_pid() -> tuple[int, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0], threading.current_thread().name


def _on_the_run_loop(count: int) -> list[tuple[int, str]]:
    async def many() -> list[tuple[int, str]]:
        return list(await asyncio.gather(*(db_async(_backend_pid)() for _ in range(count))))

    return loop_runner().submit(many()).result(timeout=60)


def test_calls_of_many_runs_share_at_most_the_configured_connections(settings: Any) -> None:
    # given a pool of three threads
    settings.AGENT_DB_THREADS = 3
    db_threads_close()
    # when 60 calls are made at once on the run loop
    seen = _on_the_run_loop(60)
    # then they ran on the pool's threads, over at most three server sessions
    assert {name.split("_")[0] for _, name in seen} == {"agent-db"}
    assert 1 <= len({pid for pid, _ in seen}) <= 3
    # and the sessions are kept for the next calls, not opened anew
    again = _on_the_run_loop(30)
    assert {pid for pid, _ in again} <= {pid for pid, _ in seen}


def test_elsewhere_a_call_runs_as_sync_to_async_would(settings: Any) -> None:
    # a caller's own loop (a test, manage.py ask) keeps asgiref's thread-sensitive thread,
    # so code inside a caller's transaction still sees it
    _pid, name = asyncio.run(db_async(_backend_pid)())
    assert not name.startswith("agent-db")


def test_a_dropped_connection_is_reopened_on_the_next_call(settings: Any) -> None:
    # given a pool of one thread whose session the server ended (a restart, a failover)
    settings.AGENT_DB_THREADS = 1
    db_threads_close()
    [(first, _)] = _on_the_run_loop(1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])
    # when the next call on the thread meets the dead session it fails, as any query would
    with pytest.raises(OperationalError):
        _on_the_run_loop(1)
    # then the call after it runs on a new session instead of failing forever
    [(second, _)] = _on_the_run_loop(1)
    assert second != first


def test_a_task_thread_writes_through_the_pool(settings: Any) -> None:
    # a Celery task thread that must write once (an abort) borrows a pool connection
    settings.AGENT_DB_THREADS = 1
    db_threads_close()
    [(pooled, _)] = _on_the_run_loop(1)
    pid, name = db_call(_backend_pid)
    assert (pid, name.startswith("agent-db")) == (pooled, True)
