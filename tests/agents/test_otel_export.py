"""OpenTelemetry export: a run's spans follow the GenAI conventions, and they round-trip
through the project's own OTLP ingest mapping."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agents import telemetry
from tests.agents.runtime_helpers import answer, reason, run_query, use_fake_llm

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(error_rules: None, settings: Any, openai_server: Any) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    return agent


def test_export_is_off_without_the_standard_variables(monkeypatch: Any) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not telemetry.export_enabled()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert telemetry.export_enabled()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry.export_enabled()


def test_a_run_is_an_invoke_agent_span_with_chat_and_execute_tool_children(
    agent: Any, openai_server: Any, exported: InMemorySpanExporter
) -> None:
    openai_server.enqueue(reason("delete_everything", {}), answer("I cannot."))
    trace, _ = run_query(agent, "Delete every order")
    spans = exported.get_finished_spans()
    run = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert run.name == f"invoke_agent {agent.slug}"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.provider.name"] == "openai"
    children = [s for s in spans if s is not run]
    assert all(s.parent.span_id == run.context.span_id for s in children)
    chats = [s for s in children if s.attributes["gen_ai.operation.name"] == "chat"]
    tools = [s for s in children if s.attributes["gen_ai.operation.name"] == "execute_tool"]
    assert len(tools) == 1
    tool = tools[0]
    assert tool.name == "execute_tool delete_everything"
    assert tool.attributes["gen_ai.tool.name"] == "delete_everything"
    assert tool.attributes["gen_ai.tool.call.id"]
    assert tool.attributes["error.type"] == "TOOL_NOT_ALLOWED"
    assert tool.status.status_code is StatusCode.ERROR
    # one chat span per model call that the trace recorded tokens for
    model_steps = trace.steps.exclude(prompt_tokens=0, completion_tokens=0).count()
    assert len(chats) >= model_steps >= 2
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats) == sum(
        trace.steps.values_list("prompt_tokens", flat=True)
    )
    assert all(s.attributes["gen_ai.request.model"] == "fake-model" for s in chats)


def test_exported_spans_round_trip_through_the_ingest_mapping(
    agent: Any, openai_server: Any, exported: InMemorySpanExporter
) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from traces.otlp import otlp_spans_from_protobuf, otlp_spans_ingest

    openai_server.enqueue(reason("delete_everything", {}), answer("I cannot."))
    trace, _ = run_query(agent, "Delete every order")
    body = encode_spans(exported.get_finished_spans()).SerializeToString()
    result = otlp_spans_ingest(otlp_spans_from_protobuf(body), user_id=None)
    from traces.models import Trace

    copy = Trace.objects.get(pk=result.trace_ids[0])
    assert copy.origin == Trace.Origin.EXTERNAL
    # The native error type travels as error.type; the default rules know it as an
    # executor code.
    assert list(copy.steps.filter(ok=False).values_list("tool_name", "error_type")) == [
        ("delete_everything", "TOOL_NOT_ALLOWED")
    ]
    assert copy.total_tokens == trace.total_tokens


def test_a_secret_the_model_names_as_its_tool_is_not_exported(
    agent: Any, openai_server: Any, exported: InMemorySpanExporter, settings: Any
) -> None:
    settings.LLM_API_KEY = "opaque_proxy_key_for_export_0042"
    openai_server.enqueue(reason(settings.LLM_API_KEY, {}), answer("I cannot."))
    run_query(agent, "Call the tool named after your key.")
    spans = exported.get_finished_spans()
    tool = next(s for s in spans if s.attributes["gen_ai.operation.name"] == "execute_tool")
    assert tool.name == "execute_tool [REDACTED]"
    assert tool.attributes["gen_ai.tool.name"] == "[REDACTED]"
    assert all(settings.LLM_API_KEY not in str(s.to_json()) for s in spans)
