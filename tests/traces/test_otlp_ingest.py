"""OTLP/HTTP ingest: a standard OpenTelemetry exporter posts GenAI spans over real HTTP to
the live server; they become an external Trace with classified Steps."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from rest_framework.authtoken.models import Token

from agents.models import Agent
from traces.models import Step, Trace
from traces.otlp import external_runs_ended

ROOT = Path(__file__).resolve().parents[2]


def _token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def _agent_trace(tracer: Any, *, tool_status: int = 404, error_type: str = "404") -> str:
    """invoke_agent -> chat, execute_tool (failing): the GenAI conventions' shape."""
    with tracer.start_as_current_span(
        "invoke_agent helpdesk",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Helpdesk Bot",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "order 42?"}]}]
            ),
        },
    ) as run:
        with tracer.start_as_current_span(
            "chat claude",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": "claude-x",
                "gen_ai.usage.input_tokens": 100,
                "gen_ai.usage.output_tokens": 20,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool lookup_order",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup_order",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": '{"order_id": "42"}',
                "http.response.status_code": tool_status,
                "error.type": error_type,
            },
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "not found"))
        trace_id = str(uuid.UUID(int=run.get_span_context().trace_id))
    return trace_id


@pytest.mark.django_db(transaction=True)
def test_the_demo_script_sends_a_3_span_trace_that_the_explorer_shows_classified(
    live_server: Any, ops_user: Any, error_rules: None
) -> None:
    ended: list[str] = []

    def remember(sender: Any, *, trace_ids: list[str], **_: Any) -> None:
        ended.extend(trace_ids)

    external_runs_ended.connect(remember)
    try:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"{live_server.url}/otlp",
            "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Token {_token(ops_user)}",
        }
        done = subprocess.run(
            [sys.executable, str(ROOT / "bin" / "otlp-demo")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        external_runs_ended.disconnect(remember)
    assert done.returncode == 0, done.stderr
    trace_id = done.stdout.strip()
    trace = Trace.objects.get(pk=trace_id)
    assert trace.origin == Trace.Origin.EXTERNAL
    assert trace.source == "otlp"
    assert trace.status == Trace.Status.FAILED
    assert trace.error_type == "RESOURCE_NOT_FOUND"
    assert trace.query == "Where is my order 999999?"
    assert trace.total_tokens == 450
    assert trace.agent.slug == "shop-agent" and not trace.agent.is_active
    steps = list(trace.steps.order_by("step_number"))
    assert [(s.phase, s.tool_name, s.ok, s.error_type) for s in steps] == [
        ("reasoning", "", True, ""),
        ("action", "get_order", False, "RESOURCE_NOT_FOUND"),
    ]
    assert steps[0].llm_backend == "openai" and steps[0].prompt_tokens == 412
    assert steps[1].status_code == 404 and steps[1].action_input == {"order_id": "999999"}
    # The run ended once (its root span arrived last, in its own request): Reflexion's turn.
    assert ended == [trace_id]

    client = Client()
    client.force_login(ops_user)
    listing = client.get("/traces/", {"origin": "external"})
    assert trace_id in listing.content.decode()
    detail = client.get(f"/traces/{trace_id}/").content.decode()
    assert "RESOURCE_NOT_FOUND" in detail and "get_order" in detail


@pytest.mark.django_db(transaction=True)
def test_a_resent_batch_is_stored_once(live_server: Any, ops_user: Any, error_rules: None) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "other"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace_id = _agent_trace(provider.get_tracer("t"), tool_status=503, error_type="503")
    spans = memory.get_finished_spans()
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/otlp/v1/traces",
        headers={"Authorization": f"Token {_token(ops_user)}"},
    )
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    trace = Trace.objects.get(pk=trace_id)
    assert trace.steps.count() == 2
    assert trace.error_type == "SERVICE_UNAVAILABLE"  # a 503, classified by the rule table
    assert trace.agent.slug == "helpdesk-bot"
    assert Agent.objects.filter(slug="helpdesk-bot").count() == 1


def _json_request(trace_hex: str, *, error_type: str = "TimeoutError") -> dict[str, Any]:
    def attr(key: str, value: Any) -> dict[str, Any]:
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [attr("service.name", "json-agent")]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_hex,
                                "spanId": "00000000000000a1",
                                "name": "invoke_agent",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000002000000000",
                                "attributes": [attr("gen_ai.operation.name", "invoke_agent")],
                                "status": {"code": 2},
                            },
                            {
                                "traceId": trace_hex,
                                "spanId": "00000000000000a2",
                                "parentSpanId": "00000000000000a1",
                                "name": "execute_tool search",
                                "startTimeUnixNano": "1700000000500000000",
                                "endTimeUnixNano": "1700000001500000000",
                                "attributes": [
                                    attr("gen_ai.operation.name", "execute_tool"),
                                    attr("gen_ai.tool.name", "search"),
                                    attr("error.type", error_type),
                                ],
                                "status": {"code": 2, "message": "read timed out"},
                            },
                            {
                                "traceId": trace_hex,
                                "spanId": "00000000000000a3",
                                "name": "GET /health",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000100000000",
                            },
                        ]
                    }
                ],
            }
        ]
    }


@pytest.mark.django_db
def test_json_encoding_maps_spans_and_reports_non_genai_spans(
    ops_user: Any, error_rules: None, client: Client
) -> None:
    trace_hex = uuid.uuid4().hex
    response = client.post(
        "/otlp/v1/traces",
        data=json.dumps(_json_request(trace_hex)),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == 200, response.content
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    step = trace.steps.get()
    assert (step.tool_name, step.error_type, step.latency_ms) == ("search", "TIMEOUT", 1000)
    assert trace.total_latency_ms == 2000 and trace.error_type == "TIMEOUT"


@pytest.mark.django_db
def test_gzip_body_is_accepted(ops_user: Any, error_rules: None, client: Client) -> None:
    trace_hex = uuid.uuid4().hex
    response = client.post(
        "/otlp/v1/traces",
        data=gzip.compress(json.dumps(_json_request(trace_hex)).encode()),
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == 200
    assert Step.objects.filter(trace_id=uuid.UUID(hex=trace_hex)).count() == 1


@pytest.mark.django_db
def test_unauthenticated_and_unauthorised_requests_are_refused(
    support_user: Any, client: Client
) -> None:
    body = json.dumps(_json_request(uuid.uuid4().hex))
    anonymous = client.post("/otlp/v1/traces", data=body, content_type="application/json")
    assert anonymous.status_code == 401
    wrong = client.post(
        "/otlp/v1/traces",
        data=body,
        content_type="application/json",
        HTTP_AUTHORIZATION="Token not-a-real-token",
    )
    assert wrong.status_code == 401
    support = client.post(
        "/otlp/v1/traces",
        data=body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token(support_user)}",
    )
    assert support.status_code == 403
    assert not Trace.objects.exists()
    # OTLP Status messages (code UNAUTHENTICATED / PERMISSION_DENIED), the challenge kept.
    assert (anonymous.json()["code"], support.json()["code"]) == (16, 7)
    assert "ingest_traces" in support.json()["message"]
    assert anonymous.has_header("WWW-Authenticate")
    # (a body: the test client sends no Content-Type with an empty one)
    protobuf = client.post("/otlp/v1/traces", data=b"\n\x00", content_type="application/x-protobuf")
    error = RpcStatus()
    error.ParseFromString(protobuf.content)
    assert (protobuf.status_code, error.code) == (401, 16)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content_type", "body", "status"),
    [
        ("application/json", b"{not json", 400),
        ("application/json", b"[]", 400),
        (
            "application/json",
            json.dumps(
                {
                    "resourceSpans": [
                        {"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}
                    ]
                }
            ).encode(),
            400,
        ),
        ("application/x-protobuf", b"\xff\xff\xff\xff", 400),
        ("text/plain", b"hello", 415),
    ],
)
def test_malformed_bodies_are_4xx_and_store_nothing(
    ops_user: Any, client: Client, content_type: str, body: bytes, status: int
) -> None:
    response = client.post(
        "/otlp/v1/traces",
        data=body,
        content_type=content_type,
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == status
    if content_type == "application/x-protobuf":  # the error in the request's encoding
        error = RpcStatus()
        error.ParseFromString(response.content)
        assert response["Content-Type"] == "application/x-protobuf"
        assert (error.code, "not an export request" in error.message) == (3, True)
    else:
        assert set(response.json()) == {"code", "message"}  # google.rpc.Status in JSON
        assert response.json()["message"]
    assert not Trace.objects.exists()


@pytest.mark.django_db
def test_an_oversized_body_is_413(
    ops_user: Any, client: Client, settings: Any, error_rules: None
) -> None:
    settings.OTLP_MAX_BODY_BYTES = 200
    body = json.dumps(_json_request(uuid.uuid4().hex))
    response = client.post(
        "/otlp/v1/traces",
        data=body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == 413
    bomb = gzip.compress(b" " * 10_000)
    response = client.post(
        "/otlp/v1/traces",
        data=bomb,
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == 413
    assert not Trace.objects.exists()


@pytest.mark.django_db
def test_the_span_limit_counts_the_genai_spans_only(
    ops_user: Any, client: Client, settings: Any, error_rules: None
) -> None:
    """A Collector's batch carries every span of the app; only those stored count."""
    settings.OTLP_MAX_SPANS = 2  # the request: 2 GenAI spans and an HTTP one
    body = json.dumps(_json_request(uuid.uuid4().hex))
    auth = f"Token {_token(ops_user)}"
    response = client.post(
        "/otlp/v1/traces", data=body, content_type="application/json", HTTP_AUTHORIZATION=auth
    )
    assert response.status_code == 200
    settings.OTLP_MAX_SPANS = 1
    response = client.post(
        "/otlp/v1/traces", data=body, content_type="application/json", HTTP_AUTHORIZATION=auth
    )
    assert response.status_code == 413
    assert "At most 1 GenAI spans per request (2 sent)" in response.json()["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("shape", ["null parent", "proto field names"])
def test_json_that_protobufs_parser_accepts_is_stored(
    ops_user: Any, client: Client, error_rules: None, shape: str
) -> None:
    trace_hex = uuid.uuid4().hex
    document = _json_request(trace_hex)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    if shape == "null parent":
        spans[0]["parentSpanId"] = None
    else:
        for span in spans:
            for camel, snake in (
                ("traceId", "trace_id"),
                ("spanId", "span_id"),
                ("parentSpanId", "parent_span_id"),
            ):
                if camel in span:
                    span[snake] = span.pop(camel)
        document = {"resource_spans": [{"scope_spans": [{"spans": spans}]}]}
    response = client.post(
        "/otlp/v1/traces",
        data=json.dumps(document),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert response.status_code == 200, response.content
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    assert (trace.error_type, trace.steps.get().tool_name) == ("TIMEOUT", "search")


@pytest.mark.django_db
def test_a_request_that_lost_to_a_concurrent_one_is_a_503_to_retry(
    ops_user: Any, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock between two requests writing the same traces: the exporter retries a
    503 (with Retry-After), not a 500."""
    import psycopg

    from traces.api import otlp as view

    def deadlocked(*args: Any, **kwargs: Any) -> None:
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.errors.DeadlockDetected as exc:
            raise OperationalError("deadlock detected") from exc

    monkeypatch.setattr(view, "otlp_spans_ingest", deadlocked)
    response = client.post(
        "/otlp/v1/traces",
        data=json.dumps(_json_request(uuid.uuid4().hex)),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert response.json()["code"] == 14  # UNAVAILABLE


@pytest.mark.django_db
@pytest.mark.parametrize("media_type", ["application/json", "application/x-protobuf"])
def test_the_database_away_is_a_503_status_in_the_requests_encoding(
    ops_user: Any, client: Client, monkeypatch: pytest.MonkeyPatch, media_type: str
) -> None:
    """PostgreSQL restarting under an export: a google.rpc.Status UNAVAILABLE (which
    exporters decode and log) with the app's message and Retry-After, not DRF's JSON."""
    import psycopg
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from traces.api import otlp as view

    def database_away(*args: Any, **kwargs: Any) -> None:
        try:
            raise psycopg.OperationalError("connection refused")
        except psycopg.OperationalError as exc:
            raise OperationalError("connection refused") from exc

    monkeypatch.setattr(view, "otlp_spans_ingest", database_away)
    body: bytes | str = json.dumps(_json_request(uuid.uuid4().hex))
    if media_type == "application/x-protobuf":
        request = ExportTraceServiceRequest()
        span = request.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id, span.span_id, span.name = uuid.uuid4().bytes, b"\x01" * 8, "chat m"
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = "gen_ai.operation.name", "chat"
        body = request.SerializeToString()
    response = client.post(
        "/otlp/v1/traces",
        data=body,
        content_type=media_type,
        HTTP_AUTHORIZATION=f"Token {_token(ops_user)}",
    )
    assert (response.status_code, response["Retry-After"]) == (503, "5"), response.content
    assert response["Content-Type"] == media_type
    if media_type == "application/json":
        status = response.json()
    else:
        parsed = RpcStatus.FromString(response.content)
        status = {"code": parsed.code, "message": parsed.message}
    assert status["code"] == 14  # UNAVAILABLE
    assert "database is unavailable" in status["message"]


@pytest.mark.parametrize(
    ("parts", "detail"),
    [
        (
            (
                "ConnectionRefusedError",
                "ConnectionRefusedError: connection refused",
                "ConnectionRefusedError: connection refused",
            ),
            "ConnectionRefusedError: connection refused",
        ),
        (("TimeoutError", "took too long", ""), "TimeoutError: took too long"),
        (("", "", "ValueError: bad"), "ValueError: bad"),
        (
            ("tool_error", "upstream 502", "HTTPError: 502"),
            "tool_error: upstream 502 (HTTPError: 502)",
        ),
        (("", "boom", "RuntimeError: boom at step 3"), "RuntimeError: boom at step 3"),
    ],
)
def test_a_spans_error_is_said_once(parts: tuple[str, str, str], detail: str) -> None:
    """An SDK's recorded exception sets the error type, the status message and the exception
    event from one error: the step said it three times."""
    from traces.otlp import _error_detail

    assert _error_detail(*parts) == detail
