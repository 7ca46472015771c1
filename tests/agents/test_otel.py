"""OpenTelemetry GenAI export: a real run, the real OTLP/HTTP exporter, a loopback collector
that decodes the protobuf it receives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agents.otel import otel_export_enabled, tracer_provider_reset
from agents.services import run_execute
from sandbox.models import Order
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


class Collector:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.spans: list[Any] = []
        self.resources: list[Any] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                collector.paths.append(self.path)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    collector.resources.append(resource_spans.resource)
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    found = Collector()
    server = ThreadingHTTPServer(("127.0.0.1", 0), found.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    tracer_provider_reset()
    yield found
    tracer_provider_reset()
    server.shutdown()
    server.server_close()


def attrs(span: Any) -> dict[str, Any]:
    values = {}
    for kv in span.attributes:
        value = kv.value
        values[kv.key] = getattr(value, value.WhichOneof("value"))
    return values


def test_export_is_off_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert otel_export_enabled() is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert otel_export_enabled() is False


def test_a_run_is_exported_as_genai_spans(
    collector: Collector,
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    settings: Any,
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    order = Order.objects.first()
    assert order is not None
    trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Where is my order {order.order_id}?",
        llm_backend="simulated",
    )
    async_to_sync(run_execute)(trace_id=str(trace.pk))
    tracer_provider_reset()  # flushes the batch

    trace = Trace.objects.get(pk=trace.pk)
    assert collector.paths and set(collector.paths) == {"/v1/traces"}
    by_op: dict[str, list[Any]] = {}
    for span in collector.spans:
        by_op.setdefault(attrs(span)["gen_ai.operation.name"], []).append(span)
    [root] = by_op["invoke_agent"]
    assert root.name == f"invoke_agent {support_agent.slug}"
    root_attrs = attrs(root)
    assert root_attrs["agent_ops.trace_id"] == str(trace.pk)
    assert root_attrs["gen_ai.provider.name"] == "simulated"
    assert root_attrs["gen_ai.usage.input_tokens"] == sum(
        s.prompt_tokens for s in trace.steps.all()
    )
    model_calls = trace.steps.exclude(llm_backend="").count()
    assert len(by_op["chat"]) == model_calls > 0
    tool_calls = trace.steps.filter(phase="action", action_type="tool").exclude(tool_name="")
    assert [attrs(s)["gen_ai.tool.name"] for s in by_op["execute_tool"]] == [
        s.tool_name for s in tool_calls.order_by("step_number")
    ]
    for span in by_op["chat"] + by_op["execute_tool"]:
        assert span.trace_id == root.trace_id and span.parent_span_id == root.span_id
        assert span.end_time_unix_nano >= span.start_time_unix_nano
    call = attrs(by_op["execute_tool"][0])
    assert call["gen_ai.tool.call.id"].startswith(str(trace.pk))
    assert "get_order" in {attrs(s)["gen_ai.tool.name"] for s in by_op["execute_tool"]}
    resource = {kv.key: kv.value.string_value for kv in collector.resources[0].attributes}
    assert resource["service.name"] == "agent-ops"


def test_a_failed_step_carries_its_error_type(
    collector: Collector, support_agent: Any, error_rules: Any
) -> None:
    from agents.otel import trace_export
    from traces.models import Step

    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="openai")
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.FAILED, error_type="RESOURCE_NOT_FOUND", llm_model="m1"
    )
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        tool_name="get_order",
        ok=False,
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        latency_ms=12,
        started_at=trace.created_at,
    )
    assert trace_export(str(trace.pk)) is True
    tracer_provider_reset()
    spans = {attrs(s)["gen_ai.operation.name"]: s for s in collector.spans}
    tool = spans["execute_tool"]
    assert attrs(tool)["error.type"] == "RESOURCE_NOT_FOUND"
    assert attrs(tool)["http.response.status_code"] == 404
    assert tool.status.code == 2  # STATUS_CODE_ERROR
    assert attrs(spans["invoke_agent"])["error.type"] == "RESOURCE_NOT_FOUND"
    assert attrs(spans["invoke_agent"])["gen_ai.request.model"] == "m1"
