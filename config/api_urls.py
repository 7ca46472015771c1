"""The REST API under /api/."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from agents.api.views import RunCreateView
from traces.api.views import StepViewSet, TraceViewSet

router = DefaultRouter()
router.register("traces", TraceViewSet, basename="trace")
router.register("steps", StepViewSet, basename="step")

urlpatterns = [
    path("runs/", RunCreateView.as_view(), name="run-create"),
    *router.urls,
]
