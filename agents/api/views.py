from drf_spectacular.utils import extend_schema
from rest_framework import permissions, status
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api.serializers import RunAcceptedSerializer, RunCreateSerializer
from agents.services import (
    START_RUN,
    TooManyRunsInFlight,
    agent_ensure_default,
    run_admission_check,
    run_start,
)
from config.api_parsers import BoundedJSONParser
from traces.api.schema import AUTH_ERRORS, BAD_REQUEST, TOO_MANY_RUNS, UNSUPPORTED_MEDIA_TYPE

# A refused run (too many in flight) is worth retrying after a few seconds.
RETRY_AFTER_SECONDS = 5


class CanStartRuns(permissions.BasePermission):
    message = "Starting runs needs the agents.start_run permission (support, ops or admin role)."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user.has_perm(START_RUN))


class RunCreateView(APIView):
    """Start an agent run: stored as queued, executed by a worker after commit."""

    permission_classes = [permissions.IsAuthenticated, CanStartRuns]
    # JSON only: form encodings would turn any typed value into text ("query" an object).
    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=RunCreateSerializer,
        responses={
            202: RunAcceptedSerializer,
            400: BAD_REQUEST,
            415: UNSUPPORTED_MEDIA_TYPE,
            429: TOO_MANY_RUNS,
            **AUTH_ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        serializer = RunCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            run_admission_check(user_id=request.user.pk)
        except TooManyRunsInFlight as exc:
            raise Throttled(wait=RETRY_AFTER_SECONDS, detail=str(exc)) from exc
        trace = run_start(
            agent=data.get("agent") or agent_ensure_default(),
            query=data["query"],
            customer_id=data["customer_id"],
            session_id=data["session_id"],
            locale=data["locale"],
            time_zone=data["time_zone"],
            user_id=request.user.pk,
            source="api",
        )
        body = RunAcceptedSerializer(trace, context={"request": request}).data
        return Response(body, status=status.HTTP_202_ACCEPTED)
