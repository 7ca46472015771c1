"""OpenTelemetry export of runs, following the GenAI semantic conventions.

Opt-in through the standard variables: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, each run is an ``invoke_agent {agent}`` span
with a ``chat`` span per model call and an ``execute_tool {tool}`` span per tool call; the
OTLP HTTP exporter reads the rest (headers, protocol, timeout) from ``OTEL_EXPORTER_OTLP_*``
itself. Unset, nothing here imports the SDK and every hook is a ``None`` check.

Spans carry ids, names, models, token counts and error types, never prompts, answers or
tool payloads (they may hold customer data).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traces.records import StepRecord

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_lock = threading.Lock()
_tracer: Any = None
_configured = False


def export_enabled() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in _ENDPOINT_VARIABLES)


def _tracer_get() -> Any:
    global _tracer, _configured
    if _configured:
        return _tracer
    with _lock:
        if not _configured:
            if export_enabled():
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

                # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
                provider = TracerProvider(resource=Resource.create({"service.name": "agent-ops"}))
                provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
                _tracer = provider.get_tracer("agent-ops")
            _configured = True
    return _tracer


def telemetry_use_tracer_provider(provider: Any) -> None:
    """Export through this SDK provider instead (tests, embedding apps); None: back to the
    environment."""
    global _tracer, _configured
    with _lock:
        _tracer = provider.get_tracer("agent-ops") if provider is not None else None
        _configured = provider is not None


class RunTelemetry:
    """The spans of one run: opened when it starts, a child per step, closed at its end."""

    def __init__(
        self, tracer: Any, *, trace_id: str, agent: str, provider: str, model: str
    ) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        self.tracer = tracer
        self.provider = provider
        self.model = model
        self.run = tracer.start_span(
            f"invoke_agent {agent}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": provider,
                "gen_ai.agent.name": agent,
                "gen_ai.agent.id": trace_id,
                "gen_ai.conversation.id": trace_id,
                **({"gen_ai.request.model": model} if model else {}),
            },
        )
        self.context = set_span_in_context(self.run)

    def step(self, record: StepRecord) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        end = time.time_ns()
        start = end - record.latency_ms * 1_000_000
        attributes: dict[str, Any]
        if record.phase == "action" and record.tool_name:
            name = f"execute_tool {record.tool_name}"
            kind = SpanKind.INTERNAL
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": record.tool_name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": record.idempotency_key
                or f"{self.run.get_span_context().trace_id:032x}:{record.step_number}",
            }
            if record.status_code is not None:
                attributes["http.response.status_code"] = record.status_code
        elif record.prompt_tokens or record.completion_tokens or record.phase == "reasoning":
            model = self.model
            name = f"chat {model}" if model else "chat"
            kind = SpanKind.CLIENT
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": record.llm_backend or self.provider,
                "gen_ai.usage.input_tokens": record.prompt_tokens,
                "gen_ai.usage.output_tokens": record.completion_tokens,
                **({"gen_ai.request.model": model} if model else {}),
            }
        else:
            return
        span = self.tracer.start_span(
            name, context=self.context, kind=kind, start_time=start, attributes=attributes
        )
        if not record.ok:
            span.set_attribute("error.type", record.error_type or "UNKNOWN")
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=end)

    def end(self, *, error_type: str = "") -> None:
        from opentelemetry.trace import Status, StatusCode

        if error_type:
            self.run.set_attribute("error.type", error_type)
            self.run.set_status(Status(StatusCode.ERROR))
        self.run.end()


def run_telemetry_start(
    *, trace_id: str, agent: str, provider: str, model: str
) -> RunTelemetry | None:
    """The run's spans, or None when export is off."""
    tracer = _tracer_get()
    if tracer is None:
        return None
    return RunTelemetry(tracer, trace_id=trace_id, agent=agent, provider=provider, model=model)
