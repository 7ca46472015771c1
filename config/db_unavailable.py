"""503 while the database is away: a clear answer instead of a 500 and a traceback.

When PostgreSQL restarts (or the network to it drops), every request that needs the
database fails with a connection error. Those are not bugs of the app, and a client should
simply try again: each one is answered **503 Service Unavailable** with ``Retry-After``,

- a small plain HTML page for people,
- ``{"detail": "...", "code": "database_unavailable"}`` for ``/api/...`` and other JSON
  clients (``Accept: application/json``, the sandbox's API, OTLP ingest),

and logged as one warning line (method, path, the error's class and SQLSTATE; never the
message, which may name the server, the user or the database).

Only connection-level failures are mapped: an error without a server-side SQLSTATE (no
connection could be made, or it broke mid-query), SQLSTATE class 08 (connection exception),
57P01-57P03 (the server shutting down, crashed, or not accepting connections yet) and 53300
(too many connections). A lock timeout, a statement timeout, a deadlock or a bad query keep
their 500: they say something about the app, not about the database being away.

Three routes lead here, so that every request path is covered:

- ``DatabaseUnavailableMiddleware.process_exception``: a view raised it (DRF's own handler
  re-raises what it does not know, so API views arrive here too; ``api_exception_handler``
  also maps it, for DRF views whose ``dispatch`` another caller uses);
- ``config.errors.server_error``: another middleware raised it (a session saved on the way
  out), Django's 500 handler then runs inside the ``except`` and finds it there;
- ``config.health.healthz``: the health check reports the database as down.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import utils as db_utils
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger("config.db_unavailable")

CODE = "database_unavailable"
MESSAGE = (
    "The database is unavailable; Agent Ops will answer again when it is back. "
    "Try again in a moment."
)
RETRY_AFTER_SECONDS = 5
# SQLSTATEs that mean "the server is not there for you right now".
_UNAVAILABLE_SQLSTATES = {
    "57P01",  # admin_shutdown: terminating connection due to administrator command
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: the database system is starting up / shutting down
    "53300",  # too_many_connections
}
# psycopg_pool's: no connection could be had in time, or too many requests wait for one.
_POOL_ERRORS = {"PoolTimeout", "TooManyRequests"}
# Paths whose clients read JSON whatever they send in Accept.
_JSON_PREFIXES = ("/api/", "/sandbox/api/", "/otlp/", "/healthz")

_HTML = (
    "<!doctype html>\n"
    '<html lang="en"><head><meta charset="utf-8"><title>Database unavailable</title>'
    "</head>\n<body><h1>Agent Ops: database unavailable</h1>\n<p>{message}</p>\n"
    "</body></html>\n"
)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it (Django wraps the driver's error)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _sqlstate(exc: BaseException) -> str | None:
    for link in _chain(exc):
        state = getattr(link, "sqlstate", None)
        if state:
            return str(state)
    return None


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached, as opposed to a query failing.

    Django wraps the driver's error in its own ``OperationalError`` (or ``InterfaceError``);
    the psycopg error underneath decides. It is one when it carries SQLSTATE class 08 or
    one of the shutdown / too-many-connections states, or no SQLSTATE at all (the server
    never answered: refused, reset, closed mid-query; with psycopg 3 a closed connection is
    an ``OperationalError`` too; psycopg_pool's ``PoolTimeout`` when the pool could not
    open or lend a connection in time). SQLite's errors (the embedded shape) are never mapped:
    its file does not go away the way a server does.
    """
    if not isinstance(exc, db_utils.OperationalError | db_utils.InterfaceError):
        return False
    import psycopg
    from psycopg import errors

    driver = next((e for e in _chain(exc) if isinstance(e, psycopg.Error)), None)
    if not isinstance(driver, psycopg.OperationalError):
        # psycopg's InterfaceError is a misuse (a closed cursor, no dumper), not the network.
        return False
    state = driver.sqlstate
    if state is None:
        # Client-side: "connection failed", "server closed the connection unexpectedly",
        # "the connection is closed", a connection timeout, no pooled connection within
        # the pool's timeout (the ASGI servers' pool). An aborted pipeline is not.
        return type(driver) in (psycopg.OperationalError, errors.ConnectionTimeout) or (
            type(driver).__name__ in _POOL_ERRORS
            and type(driver).__module__.startswith("psycopg_pool")
        )
    return state.startswith("08") or state in _UNAVAILABLE_SQLSTATES


def wants_json(request: HttpRequest) -> bool:
    if request.path.startswith(_JSON_PREFIXES):
        return True
    accept = request.headers.get("Accept", "")
    return "json" in accept and "text/html" not in accept


def unavailable_response(
    request: HttpRequest,
    exc: BaseException | None = None,
    *,
    extra: dict[str, str] | None = None,
) -> HttpResponse:
    """The 503 itself, logged as one warning line (Django's own 5xx log is skipped);
    ``extra`` goes into the JSON body before ``detail`` and ``code``."""
    if exc is not None:
        logger.warning(
            "db.unavailable method=%s path=%s error=%s sqlstate=%s",
            request.method,
            request.path,
            type(_driver_or_self(exc)).__name__,
            _sqlstate(exc) or "-",
        )
    response: HttpResponse
    if wants_json(request):
        response = JsonResponse({**(extra or {}), "detail": MESSAGE, "code": CODE}, status=503)
    else:
        response = HttpResponse(
            _HTML.format(message=MESSAGE), status=503, content_type="text/html; charset=utf-8"
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    # Already logged above, as one line: django.request would log it again as an error
    # (with a traceback on the 500-handler route).
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def _driver_or_self(exc: BaseException) -> BaseException:
    """The driver's error under Django's wrapper, for its class name in the log line."""
    return next((e for e in _chain(exc) if type(e).__module__.startswith("psycopg")), exc)


class DatabaseUnavailableMiddleware:
    """Answers 503 for a view that failed because the database is unreachable."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if is_connection_failure(exception):
            return unavailable_response(request, exception)
        return None
