"""bench/profile_run.py's instruments: statements counted on every thread's connection, and
cProfile on the threads the run's database work goes to."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from bench.profile_run import QueryCounter, ThreadProfiles, _profile_off, parts_per_run


def _select(marker: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [marker])


@pytest.mark.django_db(transaction=True)
def test_query_counter_counts_statements_on_a_new_threads_connection() -> None:
    counter = QueryCounter()
    counter.install()
    try:
        _select(1)  # not counted: counting is off

        def other_thread() -> None:
            try:
                _select(2)
                _select(3)
            finally:
                connection.close()

        counter.enabled = True
        _select(4)
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        counter.enabled = False
    finally:
        counter.uninstall()
    _select(5)  # uninstalled: not counted
    assert counter.total == 3
    assert counter.shapes == {"SELECT %s": 3}


def _busy() -> int:
    return threading.get_ident() + sum(i * i for i in range(20_000)) * 0


def test_thread_profiles_see_the_sync_to_async_thread() -> None:
    # As in the benchmark: a plain event loop, the database work on asgiref's thread, which
    # exists before profiling starts.
    assert asyncio.run(sync_to_async(_busy)()) != threading.get_ident()
    profiles = ThreadProfiles()
    profiles.start()
    try:
        asyncio.run(sync_to_async(_busy)())
    finally:
        stats = profiles.stop()
    seen = {(name, calls) for (_, _, name), (_, calls, _, _, _) in stats.stats.items()}  # type: ignore[attr-defined]
    assert ("_busy", 1) in seen
    assert parts_per_run(stats, 1) == []  # no run path part ran
    _profile_off()
