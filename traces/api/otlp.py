"""OTLP/HTTP trace ingest: ``POST /otlp/v1/traces`` (protobuf or JSON), token-authenticated.

A standard exporter works with ``OTEL_EXPORTER_OTLP_ENDPOINT=http://<host>/otlp`` and
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Token <key>``. Bad input is a 4xx and stores
nothing; a good request answers with an ExportTraceServiceResponse in its own encoding,
whose partial_success counts the spans that were not GenAI spans.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from traces.otlp import (
    IngestResult,
    OtlpBodyTooLarge,
    OtlpRequestInvalid,
    otlp_body_decompress,
    otlp_spans_from_json,
    otlp_spans_from_protobuf,
    otlp_spans_ingest,
)
from traces.selectors import INGEST_TRACES

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class CanIngestTraces(permissions.BasePermission):
    message = "Sending traces needs the traces.ingest_traces permission (ops or admin role)."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user.has_perm(INGEST_TRACES))


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse(
        json.dumps({"detail": message}), status=status, content_type="application/json"
    )


def _success(result: IngestResult, media_type: str) -> HttpResponse:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if result.rejected:
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = result.message
    if media_type == PROTOBUF:
        return HttpResponse(response.SerializeToString(), content_type=PROTOBUF)
    body: dict[str, object] = {}
    if result.rejected:
        body["partialSuccess"] = {
            "rejectedSpans": str(result.rejected),
            "errorMessage": result.message,
        }
    return HttpResponse(json.dumps(body), content_type=JSON)


class OtlpTracesView(APIView):
    permission_classes = [permissions.IsAuthenticated, CanIngestTraces]

    @extend_schema(exclude=True)  # OTLP's own protocol, documented in docs/observability.md
    def post(self, request: Request) -> HttpResponse:
        media_type = (request.content_type or "").split(";")[0].strip().lower()
        if media_type not in (PROTOBUF, JSON):
            return _error(415, f"Content-Type must be {PROTOBUF} or {JSON}.")
        limit = settings.OTLP_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _error(400, "Content-Length is not a number.")
        if length > limit:
            return _error(413, f"The request body is larger than {limit} bytes.")
        raw = request._request.read(limit + 1)
        if len(raw) > limit:
            return _error(413, f"The request body is larger than {limit} bytes.")
        try:
            body = otlp_body_decompress(
                raw, request.META.get("HTTP_CONTENT_ENCODING", ""), max_bytes=limit
            )
            if media_type == PROTOBUF:
                spans = otlp_spans_from_protobuf(body)
            else:
                spans = otlp_spans_from_json(body)
        except OtlpBodyTooLarge as exc:
            return _error(413, str(exc))
        except OtlpRequestInvalid as exc:
            return _error(400, str(exc))
        if len(spans) > settings.OTLP_MAX_SPANS:
            return _error(413, f"At most {settings.OTLP_MAX_SPANS} spans per request.")
        result = otlp_spans_ingest(spans, user_id=request.user.pk)
        return _success(result, media_type)
