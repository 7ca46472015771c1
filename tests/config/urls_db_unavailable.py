"""The project's URLconf plus views that cannot reach the database, or time out in it."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import handler404, handler500
from config.urls import urlpatterns as project_urlpatterns
from tests.redis_server import free_port

PASSWORD = "unit-dsn-password-never-shown"


def database_wrapper(**changes: Any) -> DatabaseWrapper:
    """A connection of its own, to the test database unless ``changes`` say otherwise."""
    return DatabaseWrapper({**connection.settings_dict, **changes}, alias="db_unavailable_test")


def _unreachable() -> None:
    """What a view meets while PostgreSQL is stopped: nobody listens on the port."""
    database_wrapper(PORT=str(free_port()), PASSWORD=PASSWORD).ensure_connection()


def page_view(request: HttpRequest) -> HttpResponse:
    _unreachable()
    return HttpResponse("never")


class ApiView(APIView):
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    def get(self, request: Any) -> Response:
        _unreachable()
        return Response({})


def timeout_view(request: HttpRequest) -> HttpResponse:
    """A real error that is not the database being away: a statement timeout."""
    session = database_wrapper()
    try:
        with session.cursor() as cursor:
            cursor.execute("SET statement_timeout = '20ms'")
            cursor.execute("SELECT pg_sleep(2)")
    finally:
        session.close()
    return HttpResponse("never")


urlpatterns = [
    path("_test/db-down/", page_view),
    path("api/_test/db-down/", ApiView.as_view()),
    path("api/_test/timeout/", timeout_view),
    *project_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
