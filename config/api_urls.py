"""The REST API under /api/."""

from django.http import HttpRequest, JsonResponse
from django.urls import path
from rest_framework.routers import DefaultRouter

from agents.api.views import RunCreateView
from traces.api.views import StepViewSet, TraceViewSet

router = DefaultRouter()
# No `.json` suffix routes: ids may contain dots, and ?format= does the same job.
router.include_format_suffixes = False
router.register("traces", TraceViewSet, basename="trace")
router.register("steps", StepViewSet, basename="step")

urlpatterns = [
    path("runs/", RunCreateView.as_view(), name="run-create"),
    *router.urls,
]


def api_not_found(request: HttpRequest) -> JsonResponse:
    """Any other /api/ path: a 404 in the API's error shape, not the site's HTML page."""
    return JsonResponse({"detail": "Not found."}, status=404)
