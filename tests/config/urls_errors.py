"""The project's URLconf plus views that fail, to see the error pages a person would see."""

from django.core.exceptions import BadRequest, PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.urls import handler404, handler500
from config.urls import urlpatterns as project_urlpatterns


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("boom: settings.CELERY_BROKER_URL is never shown")


def forbidden(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("not for this role")


def bad_request(request: HttpRequest) -> HttpResponse:
    raise BadRequest("malformed")


urlpatterns = [
    path("_test/crash/", crash),
    path("api/_test/crash/", crash),
    path("_test/forbidden/", forbidden),
    path("_test/bad-request/", bad_request),
    *project_urlpatterns,
]

__all__ = ["handler404", "handler500", "urlpatterns"]
