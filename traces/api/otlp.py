"""OTLP/HTTP trace ingest: ``POST /otlp/v1/traces`` (protobuf or JSON), token-authenticated.

A standard exporter works with ``OTEL_EXPORTER_OTLP_ENDPOINT=http://<host>/otlp`` and
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Token <key>``. Bad input is a 4xx and stores
nothing; a good request answers with an ExportTraceServiceResponse in its own encoding,
whose partial_success counts the spans that were not GenAI spans. An error answers with a
``google.rpc.Status`` in the request's encoding, as the OTLP/HTTP specification asks.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import OperationalError
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from config import db_unavailable
from config.db_unavailable import is_connection_failure, unavailable_response
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


# HTTP status -> the google.rpc.Code of the Status message OTLP/HTTP answers errors with.
_RPC_CODES = {
    400: 3,  # INVALID_ARGUMENT
    401: 16,  # UNAUTHENTICATED
    403: 7,  # PERMISSION_DENIED
    413: 8,  # RESOURCE_EXHAUSTED
    415: 3,
    429: 8,
    503: 14,  # UNAVAILABLE
}
# SQLSTATEs of a transaction that lost to a concurrent one (two export requests writing the
# same traces): worth the exporter's retry, which it makes on a 503, not on a 500.
_RETRYABLE_SQLSTATES = frozenset({"40P01", "40001", "55P03"})  # deadlock, serialization, lock


def _media_type(request: Any) -> str:
    return (request.content_type or "").split(";")[0].strip().lower()


def _error(status: int, message: str, media_type: str = JSON) -> HttpResponse:
    """An OTLP/HTTP error: a google.rpc.Status in the request's own encoding (protobuf, else
    JSON), which exporters decode and log."""
    code = _RPC_CODES.get(status, 13)  # INTERNAL
    if media_type == PROTOBUF:
        from google.rpc.status_pb2 import Status

        body = Status(code=code, message=message).SerializeToString()
        return HttpResponse(body, status=status, content_type=PROTOBUF)
    return HttpResponse(
        json.dumps({"code": code, "message": message}), status=status, content_type=JSON
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

    def handle_exception(self, exc: Exception) -> HttpResponse:  # type: ignore[override]
        """DRF's refusals (401, 403, …) and the database being away (503) as OTLP Status
        messages, their headers kept (an HttpResponse: DRF passes it on as it does the
        view's own)."""
        if is_connection_failure(exc):
            # PostgreSQL away (a restart, too many connections): exporters retry a 503.
            unavailable = unavailable_response(self.request._request, exc)
            error = _error(503, db_unavailable.MESSAGE, _media_type(self.request))
            error["Retry-After"] = unavailable["Retry-After"]
            error._has_been_logged = True  # type: ignore[attr-defined]  # logged once above
            return error
        response = super().handle_exception(exc)
        data = response.data
        detail = data.get("detail", data) if isinstance(data, dict) else data
        error = _error(response.status_code, str(detail), _media_type(self.request))
        for header in ("WWW-Authenticate", "Retry-After"):
            if header in response:
                error[header] = response[header]
        return error

    @extend_schema(exclude=True)  # OTLP's own protocol, documented in docs/observability.md
    def post(self, request: Request) -> HttpResponse:
        media_type = _media_type(request)
        if media_type not in (PROTOBUF, JSON):
            return _error(415, f"Content-Type must be {PROTOBUF} or {JSON}.")
        limit = settings.OTLP_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _error(400, "Content-Length is not a number.", media_type)
        if length > limit:
            return _error(413, f"The request body is larger than {limit} bytes.", media_type)
        raw = request._request.read(limit + 1)
        if len(raw) > limit:
            return _error(413, f"The request body is larger than {limit} bytes.", media_type)
        try:
            body = otlp_body_decompress(
                raw, request.META.get("HTTP_CONTENT_ENCODING", ""), max_bytes=limit
            )
            if media_type == PROTOBUF:
                spans = otlp_spans_from_protobuf(body)
            else:
                spans = otlp_spans_from_json(body)
        except OtlpBodyTooLarge as exc:
            return _error(413, str(exc), media_type)
        except OtlpRequestInvalid as exc:
            return _error(400, str(exc), media_type)
        # Only the spans that are stored count (a Collector's batch carries every span of
        # the app: HTTP, database, …); the body limit bounds the rest.
        genai = sum(1 for span in spans if span.operation)
        if genai > settings.OTLP_MAX_SPANS:
            return _error(
                413,
                f"At most {settings.OTLP_MAX_SPANS} GenAI spans per request ({genai} sent); "
                "send smaller batches (the Collector's batch processor: send_batch_max_size).",
                media_type,
            )
        try:
            result = otlp_spans_ingest(spans, user_id=request.user.pk)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) not in _RETRYABLE_SQLSTATES:
                raise
            error = _error(
                503,
                "A concurrent request was writing the same traces; nothing was stored. "
                "Send the request again.",
                media_type,
            )
            error["Retry-After"] = "1"
            return error
        return _success(result, media_type)
