"""``GET /healthz``: whether this web process can reach its database.

For a load balancer or an orchestrator's probe: no login, no session, JSON. 200 with
``{"status": "ok", "database": "ok"}``, or 503 with ``"database": "unavailable"``, the
``database_unavailable`` code and ``Retry-After`` while PostgreSQL is away (the same answer
every other request gets then: config/db_unavailable.py), within ``POOL_WAIT_SECONDS``
when the ASGI servers' connection pool is on. It says nothing else about the installation.
"""

from __future__ import annotations

import psycopg
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from config.db_unavailable import unavailable_response

# A probe wants its answer quickly: a pooled connection is waited for this long, not for
# the pool's own timeout (DB_POOL_TIMEOUT, 10 s), which ordinary requests wait.
POOL_WAIT_SECONDS = 2.0


def _database_answers() -> None:
    pool = getattr(connection, "pool", None)
    if pool is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return
    pool.open()  # as Django's first borrow would
    with pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
        conn.execute("SELECT 1").fetchone()


@never_cache
@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    try:
        _database_answers()
    except (DatabaseError, psycopg.Error) as exc:
        extra = {"status": "unavailable", "database": "unavailable"}
        return unavailable_response(request, exc, extra=extra)
    return JsonResponse({"status": "ok", "database": "ok"})
