"""OpenAPI descriptions of the error responses the API views give, shared by every view."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    """DRF's shape for authentication, permission and not-found errors."""

    detail = serializers.CharField()


BAD_REQUEST = OpenApiResponse(
    response={
        "type": "object",
        "description": "Each invalid field or parameter with its messages; `detail` when the "
        "body cannot be parsed.",
        "additionalProperties": {
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
        },
    },
    description="Invalid input.",
)
UNAUTHENTICATED = OpenApiResponse(
    ErrorDetailSerializer, description="No or invalid credentials (`WWW-Authenticate: Token`)."
)
FORBIDDEN = OpenApiResponse(
    ErrorDetailSerializer,
    description="Authenticated but not allowed, or a session request without its CSRF token.",
)
NOT_FOUND = OpenApiResponse(
    ErrorDetailSerializer, description="No such object among those this user may see."
)
UNSUPPORTED_MEDIA_TYPE = OpenApiResponse(
    ErrorDetailSerializer, description="The body is not JSON, form or multipart data."
)

AUTH_ERRORS = {401: UNAUTHENTICATED, 403: FORBIDDEN}
TOO_MANY_RUNS = OpenApiResponse(
    ErrorDetailSerializer,
    description="The user already has `AGENT_RUNS_IN_FLIGHT_PER_USER` runs queued or running "
    "(`Retry-After` in seconds).",
)
