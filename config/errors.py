"""Error handlers: the app's own pages for people, JSON for API clients.

With DEBUG off Django renders templates/404.html, 500.html, …; under /api/ a client expects
the same ``{"detail": …}`` body DRF gives for its own errors, not an HTML page.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework.response import Response
from rest_framework.views import exception_handler

from config.db_unavailable import is_connection_failure, unavailable_response

API_PREFIX = "/api/"


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404: JSON under /api/, the app's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500: JSON under /api/, the app's page elsewhere; neither says what failed.

    Django calls it inside the ``except`` that caught the error. A database that cannot be
    reached, raised outside any view (a middleware saving the session), is a 503 instead,
    like the one ``DatabaseUnavailableMiddleware`` gives for views.
    """
    exc = sys.exc_info()[1]
    if exc is not None and is_connection_failure(exc):
        return unavailable_response(request, exc)
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "A server error occurred."}, status=500)
    return defaults.server_error(request)


def api_exception_handler(exc: Exception, context: dict) -> Response | HttpResponse | None:
    """DRF's handler, plus the 503 for an unreachable database (config/db_unavailable.py).

    DRF re-raises what its own handler does not know, and the middleware then answers;
    mapping it here too keeps the answer the same for a DRF view called without the
    middleware stack (a view's ``dispatch`` used directly)."""
    request = context.get("request")
    if request is not None and is_connection_failure(exc):
        return unavailable_response(
            request._request if hasattr(request, "_request") else request, exc
        )
    return exception_handler(exc, context)
