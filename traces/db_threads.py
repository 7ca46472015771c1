"""Database access from the run loop: a bounded pool of threads, each with its own connection.

Runs are coroutines on one event loop per process (``agents.loop_runner``). asgiref's
default ``sync_to_async`` sends every database call of that loop to one thread, so all
runs of the process queue behind each other's Step writes and lookups. Calls made with
``db_async`` from a loop that ``db_threads_bind`` registered go to a pool of
``AGENT_DB_THREADS`` threads instead (8 on PostgreSQL, 1 on SQLite, whose single writer
gains nothing from more). Django keeps one connection per thread, so the pool is also the
process's connection pool: at most that many connections, each reused across runs
(``CONN_MAX_AGE``), reopened only when it breaks or ages out. A time limit that strikes
hundreds of runs at once queues their aborts on the same threads instead of opening a
connection per task thread.

Any other loop (a test's ``async_to_sync``, a caller's own ``asyncio.run``) keeps asgiref's
thread-sensitive default, so code that runs inside a caller's transaction still sees it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

P = ParamSpec("P")
R = TypeVar("R")

_bound_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_executor: ThreadPoolExecutor | None = None
_executor_pid = 0
_executor_size = 0
_lock = threading.Lock()


def db_threads_bind(loop: asyncio.AbstractEventLoop) -> None:
    """Send ``db_async`` calls made on ``loop`` to the bounded pool."""
    _bound_loops.add(loop)


def db_threads_size() -> int:
    size = getattr(settings, "AGENT_DB_THREADS", None)
    if size:
        return max(1, int(size))
    return 1 if connections["default"].vendor == "sqlite" else 8


def db_executor() -> ThreadPoolExecutor:
    """The pool of this process (a forked child makes its own)."""
    global _executor, _executor_pid, _executor_size
    with _lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor_size = db_threads_size()
            _executor = ThreadPoolExecutor(
                max_workers=_executor_size, thread_name_prefix="agent-db"
            )
            _executor_pid = os.getpid()
        return _executor


def _with_live_connections(func: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(func)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        # A pool thread keeps its connection for the life of the process: one that failed
        # (the server restarted, the network dropped) is closed here and reopened by the
        # query, instead of failing every later call that lands on this thread.
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and conn.errors_occurred and not conn.is_usable():
                conn.close()
        return func(*args, **kwargs)

    return call


def db_async(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``func`` as a coroutine function: on a bound loop it runs on the bounded pool (in a
    copy of the caller's context, as ``asyncio.to_thread`` does), elsewhere as asgiref's
    thread-sensitive ``sync_to_async`` would run it."""
    pooled = _with_live_connections(func)
    default = sync_to_async(func)

    @functools.wraps(func)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        if loop in _bound_loops:
            context = contextvars.copy_context()
            return await loop.run_in_executor(
                db_executor(), functools.partial(context.run, pooled, *args, **kwargs)
            )
        return await default(*args, **kwargs)

    return call


def db_threads_close() -> None:
    """Close every pool thread's connections and retire the pool (the next call makes a
    new one): a test session must leave no connection open on the database it drops."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is None or _executor_pid != os.getpid():
        return
    size = _executor_size
    # One job per thread: each closes its own connections (a connection may be closed only
    # by the thread that opened it), then waits until every thread holds one.
    barrier = threading.Barrier(size)

    def close_mine() -> None:
        connections.close_all()
        barrier.wait(timeout=30)

    for future in [executor.submit(close_mine) for _ in range(size)]:
        future.result()
    executor.shutdown(wait=True)


def db_call(func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``func`` on the pool from a plain thread and wait (a Celery task thread that must
    write once, e.g. to abort its run, without opening a connection of its own)."""
    return db_executor().submit(_with_live_connections(func), *args, **kwargs).result()
