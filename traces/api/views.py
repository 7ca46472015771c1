from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from config.api_fields import LIST_PARAMETERS, unknown_names_errors
from traces.api.schema import AUTH_ERRORS, BAD_REQUEST, NOT_FOUND
from traces.api.serializers import (
    StepCursorSerializer,
    StepFilterSerializer,
    StepSerializer,
    TraceDetailSerializer,
    TraceFilterSerializer,
    TraceSerializer,
)
from traces.models import Step, Trace
from traces.selectors import steps_visible_to, traces_visible_to


def _ordered(qs: QuerySet, ordering: str) -> QuerySet:
    """``ordering`` (already checked against the list's choices), the id breaking ties."""
    return qs.order_by(ordering, "-pk" if ordering.startswith("-") else "pk")


def _validated_params(serializer_class: type, request: Request, *, paginated: bool = True) -> dict:
    """The query parameters a view declares, validated; a 400 names each bad one, and each
    one the view does not take (a misspelt filter must not return the whole list)."""
    # A plain dict: from a QueryDict, DRF would read `?trace=` as "not given" instead of
    # refusing the empty value.
    params = serializer_class(data=request.query_params.dict())
    known = [*params.fields, *(LIST_PARAMETERS if paginated else ("format",))]
    unknown = unknown_names_errors(request.query_params.keys(), known, what="parameter")
    if not params.is_valid() or unknown:
        raise ValidationError({**(params.errors if params.errors else {}), **unknown})
    return params.validated_data


@extend_schema_view(
    list=extend_schema(
        parameters=[TraceFilterSerializer],
        responses={200: TraceSerializer(many=True), 400: BAD_REQUEST, **AUTH_ERRORS},
    ),
    retrieve=extend_schema(responses={200: TraceDetailSerializer, 404: NOT_FOUND, **AUTH_ERRORS}),
)
class TraceViewSet(viewsets.ReadOnlyModelViewSet):
    """Traces the requesting user may see, newest first unless `ordering` says otherwise."""

    # Any id reaches the view, so a malformed one is the API's JSON 404, not the site's page.
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Trace]:
        qs = traces_visible_to(user=self.request.user)
        if self.action == "list":
            filters = _validated_params(TraceFilterSerializer, self.request)
            if "status" in filters:
                qs = qs.filter(status=filters["status"])
            if "error_type" in filters:
                qs = qs.filter(error_type=filters["error_type"])
            if "outcome" in filters:
                qs = qs.filter(outcome=filters["outcome"])
            if "agent" in filters:
                qs = qs.filter(agent__slug=filters["agent"])
            if "origin" in filters:
                qs = qs.filter(origin=filters["origin"])
            qs = _ordered(qs, filters["ordering"])
        if self.action == "retrieve":
            qs = qs.prefetch_related("steps")
        return qs

    def get_serializer_class(self) -> type[TraceSerializer]:
        return TraceDetailSerializer if self.action == "retrieve" else TraceSerializer

    @extend_schema(
        parameters=[StepCursorSerializer],
        responses={
            200: StepSerializer(many=True),
            400: BAD_REQUEST,
            404: NOT_FOUND,
            **AUTH_ERRORS,
        },
    )
    # A cursor, not pages: the chat and clients poll for the steps after the last one seen.
    @action(detail=True, methods=["get"], pagination_class=None)
    def steps(self, request: Request, pk: str | None = None, format: str | None = None) -> Response:
        """The trace's steps in order, optionally only those after step number `after`."""
        after = _validated_params(StepCursorSerializer, request, paginated=False)["after"]
        trace = self.get_object()
        steps = trace.steps.filter(step_number__gt=after).order_by("step_number")
        return Response(StepSerializer(steps, many=True).data)


@extend_schema_view(
    list=extend_schema(
        parameters=[StepFilterSerializer],
        responses={200: StepSerializer(many=True), 400: BAD_REQUEST, **AUTH_ERRORS},
    ),
    retrieve=extend_schema(responses={200: StepSerializer, 404: NOT_FOUND, **AUTH_ERRORS}),
)
class StepViewSet(viewsets.ReadOnlyModelViewSet):
    """Steps of the traces the requesting user may see, newest first unless `ordering` says
    otherwise."""

    serializer_class = StepSerializer
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Step]:
        qs = steps_visible_to(user=self.request.user).order_by("-created_at", "-pk")
        if self.action == "list":
            filters = _validated_params(StepFilterSerializer, self.request)
            if "trace" in filters:
                qs = qs.filter(trace_id=filters["trace"])
            if "error_type" in filters:
                qs = qs.filter(error_type=filters["error_type"])
            if "tool" in filters:
                qs = qs.filter(tool_name=filters["tool"])
            qs = _ordered(qs, filters["ordering"])
        return qs
