from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from traces.api.serializers import StepSerializer, TraceDetailSerializer, TraceSerializer
from traces.models import Step, Trace
from traces.selectors import steps_visible_to, traces_visible_to

TRACE_FILTERS = [
    OpenApiParameter("status", str, description="queued|running|finished|fallback|failed"),
    OpenApiParameter("error_type", str),
    OpenApiParameter("outcome", str, description="|".join(Trace.Outcome.values)),
    OpenApiParameter("agent", str, description="agent slug"),
]


@extend_schema_view(list=extend_schema(parameters=TRACE_FILTERS))
class TraceViewSet(viewsets.ReadOnlyModelViewSet):
    """Traces the requesting user may see, newest first."""

    def get_queryset(self) -> QuerySet[Trace]:
        qs = traces_visible_to(user=self.request.user)
        params = self.request.query_params
        if params.get("status"):
            qs = qs.filter(status=params["status"])
        if params.get("error_type"):
            qs = qs.filter(error_type=params["error_type"])
        if params.get("outcome"):
            qs = qs.filter(outcome=params["outcome"])
        if params.get("agent"):
            qs = qs.filter(agent__slug=params["agent"])
        if self.action == "retrieve":
            qs = qs.prefetch_related("steps")
        return qs

    def get_serializer_class(self) -> type[TraceSerializer]:
        return TraceDetailSerializer if self.action == "retrieve" else TraceSerializer

    @extend_schema(responses=StepSerializer(many=True))
    @action(detail=True, methods=["get"])
    def steps(self, request: Request, pk: str | None = None, format: str | None = None) -> Response:
        trace = self.get_object()
        after = int(request.query_params.get("after", 0) or 0)
        steps = trace.steps.filter(step_number__gt=after).order_by("step_number")
        return Response(StepSerializer(steps, many=True).data)


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("trace", str),
            OpenApiParameter("error_type", str),
            OpenApiParameter("tool", str),
        ]
    )
)
class StepViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = StepSerializer

    def get_queryset(self) -> QuerySet[Step]:
        qs = steps_visible_to(user=self.request.user).order_by("-created_at")
        params = self.request.query_params
        if params.get("trace"):
            qs = qs.filter(trace_id=params["trace"])
        if params.get("error_type"):
            qs = qs.filter(error_type=params["error_type"])
        if params.get("tool"):
            qs = qs.filter(tool_name=params["tool"])
        return qs
