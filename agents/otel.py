"""OpenTelemetry export of finished runs, following the GenAI semantic conventions.

Opt-in: nothing is exported unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; ``OTEL_SDK_DISABLED=true`` turns it off
again. The OTLP/HTTP exporter reads the other standard variables itself
(``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``), and
``OTEL_SERVICE_NAME`` names the service (default ``agent-ops``).

Each run is one ``invoke_agent {agent}`` span. Under it there is a ``chat {model}`` span
per model call (reasoning, reflection, Self-RAG) and an ``execute_tool {tool}`` span per
tool call. Their times are the recorded Step times. The spans are exported when the run
has ended, from the stored Trace and Steps, so an export never slows a run down.
Attributes: ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.agent.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and, on a failure, ``error.type`` (the
classified error type) with an error status. No prompt, answer or tool body leaves the
app: those can carry customer data.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta
from typing import Any

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_provider: Any = None


def otel_export_enabled() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracer_provider() -> Any:
    """This app's own TracerProvider with a batching OTLP/HTTP exporter (built once)."""
    global _provider
    with _lock:
        if _provider is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            resource = Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME", "agent-ops")}
            )
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _provider = provider
        return _provider


def tracer_provider_reset() -> None:
    """Flush and drop the provider (tests; a changed endpoint)."""
    global _provider
    with _lock:
        provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def _ns(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1_000_000_000) if moment is not None else None


def _provider_name(backend: str) -> str:
    return "openai" if backend == "openai" else backend or "unknown"


def trace_export(trace_id: str) -> bool:
    """Export one ended run as GenAI spans; False when export is off or the run is unknown."""
    if not otel_export_enabled():
        return False
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from traces.models import Step, Trace

    trace = Trace.objects.select_related("agent").filter(pk=trace_id).first()
    if trace is None:
        return False
    steps = list(trace.steps.order_by("step_number"))
    tracer = tracer_provider().get_tracer("agent-ops")
    provider_name = _provider_name(trace.llm_backend)
    model = trace.llm_model or trace.llm_backend
    started = trace.started_at or trace.created_at
    ended = trace.finished_at or (
        max((s.started_at + timedelta(milliseconds=s.latency_ms) for s in steps), default=started)
    )
    input_tokens = sum(s.prompt_tokens for s in steps)
    output_tokens = sum(s.completion_tokens for s in steps)
    agent_name = trace.agent.slug
    root = tracer.start_span(
        f"invoke_agent {agent_name}",
        kind=SpanKind.INTERNAL,
        start_time=_ns(started),
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_name,
            "gen_ai.agent.name": agent_name,
            "gen_ai.agent.id": str(trace.agent_id),
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "agent_ops.trace_id": str(trace.pk),
            "agent_ops.status": trace.status,
        },
    )
    if trace.error_type and trace.status != Trace.Status.FINISHED:
        root.set_attribute("error.type", trace.error_type)
        root.set_status(Status(StatusCode.ERROR, trace.error_type))
    context = otel_trace.set_span_in_context(root)
    for step in steps:
        begin = step.started_at
        end = begin + timedelta(milliseconds=step.latency_ms)
        common = {"agent_ops.step_number": step.step_number, "agent_ops.phase": step.phase}
        if step.llm_backend:
            span = tracer.start_span(
                f"chat {model}",
                context=context,
                kind=SpanKind.CLIENT,
                start_time=_ns(begin),
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": _provider_name(step.llm_backend),
                    "gen_ai.request.model": model,
                    "gen_ai.usage.input_tokens": step.prompt_tokens,
                    "gen_ai.usage.output_tokens": step.completion_tokens,
                    **common,
                },
            )
        elif step.phase == Step.Phase.ACTION and step.action_type == "tool" and step.tool_name:
            span = tracer.start_span(
                f"execute_tool {step.tool_name}",
                context=context,
                kind=SpanKind.INTERNAL,
                start_time=_ns(begin),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": step.tool_name,
                    "gen_ai.tool.call.id": f"{trace.pk}:{step.step_number}",
                    "gen_ai.tool.type": "extension",
                    **common,
                },
            )
            if step.status_code is not None:
                span.set_attribute("http.response.status_code", step.status_code)
        else:
            continue
        if not step.ok and step.error_type:
            span.set_attribute("error.type", step.error_type)
            span.set_status(Status(StatusCode.ERROR, step.error_type))
        span.end(end_time=_ns(end))
    root.end(end_time=_ns(max(ended, started)))
    logger.info("otel.exported", extra={"trace_id": str(trace.pk), "steps": len(steps)})
    return True
