"""Error handlers: the app's own pages for people, JSON for API clients.

With DEBUG off Django renders templates/404.html, 500.html, …; under /api/ a client expects
the same ``{"detail": …}`` body DRF gives for its own errors, not an HTML page.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

API_PREFIX = "/api/"


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404: JSON under /api/, the app's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """500: JSON under /api/, the app's page elsewhere; neither says what failed."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "A server error occurred."}, status=500)
    return defaults.server_error(request)
