"""While the database is away, a 503 with a clear message, not a 500 and a traceback.

The errors here are real: a Django connection to a port nobody listens on, a session ended
by the server (``pg_terminate_backend``, what a fast shutdown does to every session), a lock
timeout, a statement timeout, a bad query. Only the first two are the database being away.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, ProgrammingError, connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.http import HttpResponse
from django.test import Client, RequestFactory

from config.db_unavailable import (
    CODE,
    MESSAGE,
    DatabaseUnavailableMiddleware,
    is_connection_failure,
)
from config.errors import server_error
from tests.config.urls_db_unavailable import PASSWORD, database_wrapper
from tests.redis_server import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.config.urls_db_unavailable")]


@pytest.fixture
def wrappers() -> Iterator[Callable[..., DatabaseWrapper]]:
    made: list[DatabaseWrapper] = []

    def make(**changes: Any) -> DatabaseWrapper:
        made.append(database_wrapper(**changes))
        return made[-1]

    yield make
    for wrapper in made:
        with contextlib.suppress(DatabaseError):
            wrapper.close()


def caught(action: Callable[[], object]) -> DatabaseError:
    with pytest.raises(DatabaseError) as info:
        action()
    return info.value


def refused(make: Callable[..., DatabaseWrapper]) -> DatabaseError:
    """What Django raises when no server listens (PostgreSQL stopped)."""
    return caught(make(PORT=str(free_port()), PASSWORD=PASSWORD).ensure_connection)


def _sql(wrapper: DatabaseWrapper, sql: str) -> None:
    with wrapper.cursor() as cursor:
        cursor.execute(sql)


# --- classification -------------------------------------------------------------------


def test_a_refused_connection_is_the_database_being_away(wrappers) -> None:
    error = refused(wrappers)
    assert type(error).__name__ == "OperationalError"
    assert is_connection_failure(error)


def test_a_pool_that_cannot_lend_a_connection_is_the_database_being_away() -> None:
    # the ASGI servers' pool (config/settings/production.py), its server not answering
    wrapper = database_wrapper(
        PORT=str(free_port()),
        CONN_MAX_AGE=0,
        OPTIONS={"pool": {"min_size": 1, "max_size": 2, "timeout": 0.5}},
    )
    wrapper.alias = "db_unavailable_pool_test"
    try:
        error = caught(wrapper.ensure_connection)
    finally:
        wrapper.close_pool()
    assert type(error.__cause__).__name__ == "PoolTimeout"
    assert is_connection_failure(error)


def test_a_session_ended_by_the_server_is_the_database_being_away(wrappers) -> None:
    # given a session of its own, which the server then ends (a fast shutdown does that)
    victim = wrappers()
    with victim.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    # when it is used: the server's message (57P01), then a closed connection
    ended = caught(lambda: _sql(victim, "SELECT 1"))
    closed = caught(lambda: _sql(victim, "SELECT 1"))
    # then both are the database being away
    assert getattr(ended.__cause__, "sqlstate", None) == "57P01"
    assert is_connection_failure(ended)
    assert is_connection_failure(closed)


def test_a_lock_timeout_is_not_the_database_being_away(wrappers) -> None:
    holder, waiter = wrappers(), wrappers()
    holder.set_autocommit(False)
    _sql(holder, "LOCK TABLE django_migrations IN ACCESS EXCLUSIVE MODE")
    _sql(waiter, "SET lock_timeout = '50ms'")
    error = caught(lambda: _sql(waiter, "SELECT count(*) FROM django_migrations"))
    holder.rollback()
    assert getattr(error.__cause__, "sqlstate", None) == "55P03"
    assert type(error).__name__ == "OperationalError"
    assert not is_connection_failure(error)


def test_a_statement_timeout_is_not_the_database_being_away(wrappers) -> None:
    session = wrappers()
    _sql(session, "SET statement_timeout = '20ms'")
    error = caught(lambda: _sql(session, "SELECT pg_sleep(2)"))
    assert getattr(error.__cause__, "sqlstate", None) == "57014"
    assert type(error).__name__ == "OperationalError"
    assert not is_connection_failure(error)


def test_a_bad_query_is_not_the_database_being_away(wrappers) -> None:
    error = caught(lambda: _sql(wrappers(), "SELECT * FROM no_such_table"))
    assert isinstance(error, ProgrammingError)
    assert not is_connection_failure(error)


def test_an_error_of_another_kind_is_not_the_database_being_away() -> None:
    assert not is_connection_failure(RuntimeError("connection failed"))


# --- the middleware ---------------------------------------------------------------------


def _middleware() -> DatabaseUnavailableMiddleware:
    return DatabaseUnavailableMiddleware(lambda request: HttpResponse())


def test_an_api_request_gets_a_json_503_with_retry_after(wrappers, caplog) -> None:
    request = RequestFactory().get("/api/traces/")
    with caplog.at_level(logging.WARNING, logger="config.db_unavailable"):
        response = _middleware().process_exception(request, refused(wrappers))
    assert response.status_code == 503
    assert json.loads(response.content) == {"detail": MESSAGE, "code": CODE}
    assert int(response["Retry-After"]) > 0
    # one warning line, naming the path and the error's class, never the DSN
    records = [r for r in caplog.records if r.name == "config.db_unavailable"]
    assert len(records) == 1
    line = records[0].getMessage()
    assert "/api/traces/" in line and "OperationalError" in line
    assert PASSWORD not in line and records[0].exc_info is None


def test_a_page_gets_a_plain_html_503(wrappers) -> None:
    request = RequestFactory().get("/traces/", HTTP_ACCEPT="text/html")
    response = _middleware().process_exception(request, refused(wrappers))
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert MESSAGE in response.content.decode()
    assert PASSWORD not in response.content.decode()


def test_a_json_client_of_a_page_gets_json(wrappers) -> None:
    request = RequestFactory().get("/traces/", HTTP_ACCEPT="application/json")
    response = _middleware().process_exception(request, refused(wrappers))
    assert json.loads(response.content)["code"] == CODE


def test_a_lock_timeout_is_left_to_the_500_handler(wrappers) -> None:
    holder, waiter = wrappers(), wrappers()
    holder.set_autocommit(False)
    _sql(holder, "LOCK TABLE django_migrations IN ACCESS EXCLUSIVE MODE")
    _sql(waiter, "SET lock_timeout = '50ms'")
    error = caught(lambda: _sql(waiter, "SELECT count(*) FROM django_migrations"))
    holder.rollback()
    assert _middleware().process_exception(RequestFactory().get("/api/traces/"), error) is None


def test_the_500_handler_answers_503_for_an_error_raised_outside_a_view(wrappers) -> None:
    # Django calls handler500 inside the except that caught a middleware's error.
    error = refused(wrappers)
    request = RequestFactory().get("/traces/")
    try:
        raise error
    except DatabaseError:
        response = server_error(request)
    assert response.status_code == 503
    assert MESSAGE in response.content.decode()


# --- through the whole stack: a Django view and a DRF view that cannot reach the database


def test_a_page_view_answers_503_through_the_middleware() -> None:
    response = Client(raise_request_exception=False).get("/_test/db-down/")
    assert response.status_code == 503
    assert MESSAGE in response.content.decode()


def test_a_drf_view_answers_the_json_503() -> None:
    response = Client(raise_request_exception=False).get("/api/_test/db-down/")
    assert response.status_code == 503
    assert response.json() == {"detail": MESSAGE, "code": CODE}
    assert response["Retry-After"]


def test_a_statement_timeout_in_a_view_is_still_a_500() -> None:
    response = Client(raise_request_exception=False).get("/api/_test/timeout/")
    assert response.status_code == 500


def test_healthz_reports_the_database_up() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}
