"""``GET /healthz``: whether this web process can reach its database.

For a load balancer or an orchestrator's probe: no login, no session, JSON. 200 with
``{"status": "ok", "database": "ok"}``, or 503 with ``"database": "unavailable"``, the
``database_unavailable`` code and ``Retry-After`` while PostgreSQL is away (the same answer
every other request gets then: config/db_unavailable.py). It says nothing else about the
installation.
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from config.db_unavailable import unavailable_response


@never_cache
@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        extra = {"status": "unavailable", "database": "unavailable"}
        return unavailable_response(request, exc, extra=extra)
    return JsonResponse({"status": "ok", "database": "ok"})
