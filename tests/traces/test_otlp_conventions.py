"""Agents instrumented with OpenInference, OpenLLMetry or the earlier GenAI conventions send
their spans to the OTLP endpoint as they are: the spans are made with the OpenTelemetry SDK,
encoded as the OTLP exporter encodes them, and posted over the test client; their runs
become external traces with classified steps, like spans written to today's conventions."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from traces.models import Step, Trace
from traces.otlp_conventions import genai_read


@pytest.fixture
def tracing() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "conventions-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider.get_tracer("test"), memory
    provider.shutdown()


def _post(user: Any, memory: InMemorySpanExporter) -> dict[str, Any]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0]}")
    response = client.post(
        "/otlp/v1/traces",
        data=encode_spans(memory.get_finished_spans()).SerializeToString(),
        content_type="application/x-protobuf",
    )
    assert response.status_code == 200, response.content
    return {"rejected": _rejected(response.content)}


def _rejected(body: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    answer = ExportTraceServiceResponse()
    answer.ParseFromString(body)
    return int(answer.partial_success.rejected_spans)


def _raised(tracer: Any, name: str, attributes: dict[str, Any], error: Exception) -> Any:
    """A span whose code raised ``error``: the exception event and status ERROR, as an
    instrumentation records them (no error.type)."""
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error)))
    return span


def _trace_id(span: Any) -> uuid.UUID:
    return uuid.UUID(int=span.get_span_context().trace_id)


def _steps(trace_id: uuid.UUID) -> list[Step]:
    return list(Step.objects.filter(trace_id=trace_id).order_by("step_number"))


@pytest.mark.django_db
def test_an_openinference_agent_run_is_an_external_trace_with_classified_steps(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """The shape of the OpenAI Agents SDK's OpenInference instrumentor: an AGENT span, an
    LLM span, a TOOL span that raised (recorded as an exception event, no error.type), and
    a guardrail, which is no step."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "Support agent",
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": "Where is order 42?",
            "output.value": "Sorry, the order service timed out.",
            "session.id": "conv-1",
        },
    ) as run:
        with tracer.start_as_current_span(
            "response",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.provider": "openai",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 120,
                "llm.token_count.completion": 30,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "Let me look the order up.",
            },
        ):
            pass
        _raised(
            tracer,
            "get_order",
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "get_order",
                "input.value": json.dumps({"order_id": "42"}),
            },
            TimeoutError("the order service timed out"),
        )
        with tracer.start_as_current_span(
            "input_guardrail", attributes={"openinference.span.kind": "GUARDRAIL"}
        ):
            pass
    trace_id = _trace_id(run)

    assert _post(ops_user, memory) == {"rejected": 1}  # the guardrail

    trace = Trace.objects.get(pk=trace_id)
    assert trace.origin == Trace.Origin.EXTERNAL
    assert trace.agent.name == "Support agent"
    assert trace.query == "Where is order 42?"
    assert trace.final_answer == "Sorry, the order service timed out."
    assert trace.session_id == "conv-1"
    assert (trace.llm_backend, trace.llm_model) == ("openai", "gpt-4o-mini")
    assert trace.status == Trace.Status.FAILED and trace.error_type == "TIMEOUT"
    assert trace.total_tokens == 150
    chat, call = _steps(trace_id)
    assert (chat.phase, chat.prompt_tokens, chat.completion_tokens) == ("reasoning", 120, 30)
    assert chat.thought == "Let me look the order up."
    assert chat.details["otel"]["convention"] == "openinference"
    assert (call.phase, call.tool_name, call.ok, call.error_type) == (
        "action",
        "get_order",
        False,
        "TIMEOUT",
    )
    assert call.action_input == {"order_id": "42"}
    assert "TimeoutError" in call.error_detail


@pytest.mark.django_db
@pytest.mark.parametrize("served", [False, True])
def test_an_openinference_chain_is_the_run_only_at_the_root(
    tracing: Any, ops_user: Any, error_rules: None, served: bool
) -> None:
    """LangChain's shape: the AgentExecutor chain is the run, a chain inside it is no step;
    its JSON input names the user's text. ``served``: the agent runs inside an
    instrumented web app, its chain under the HTTP server's span; the chain is still the
    run (before, it was dropped, and the run never ended)."""
    tracer, memory = tracing
    with (
        (
            tracer.start_as_current_span(
                "POST /chat", kind=SpanKind.SERVER, attributes={"http.request.method": "POST"}
            )
            if served
            else contextlib.nullcontext()
        ),
        tracer.start_as_current_span(
            "AgentExecutor",
            attributes={
                "openinference.span.kind": "CHAIN",
                "input.value": json.dumps({"input": "refund order 7"}),
                "input.mime_type": "application/json",
            },
        ) as run,
    ):
        with (
            tracer.start_as_current_span(
                "RunnableSequence", attributes={"openinference.span.kind": "CHAIN"}
            ),
            tracer.start_as_current_span(
                "ChatOpenAI",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "gpt-4o",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": "refund order 7",
                },
            ),
        ):
            pass
        with tracer.start_as_current_span(
            "refund",
            attributes={"openinference.span.kind": "TOOL", "output.value": "refunded"},
        ):
            pass
    trace_id = _trace_id(run)

    # The inner chain (and the HTTP server's span) are no GenAI spans.
    assert _post(ops_user, memory) == {"rejected": 2 if served else 1}

    trace = Trace.objects.get(pk=trace_id)
    assert trace.query == "refund order 7"
    assert trace.agent.name == "conventions-app"  # no agent name: the service's
    assert trace.status == Trace.Status.FINISHED
    assert trace.finished_at is not None  # the run span arrived: the run has ended
    assert [(s.phase, s.tool_name, s.response_summary) for s in _steps(trace_id)] == [
        ("reasoning", "", ""),
        ("action", "refund", "refunded"),
    ]


@pytest.mark.django_db
def test_an_openllmetry_workflow_with_a_failing_tool(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """Traceloop's shape: a workflow, a model call marked by llm.request.type with the
    earlier token names and indexed completions, and a decorated tool that raised."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "support.workflow",
        attributes={
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "support",
            "traceloop.entity.input": json.dumps({"args": ["where is order 9?"], "kwargs": {}}),
        },
    ) as run:
        with tracer.start_as_current_span(
            "openai.chat",
            attributes={
                "llm.request.type": "chat",
                "gen_ai.system": "OpenAI",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.prompt_tokens": 50,
                "gen_ai.usage.completion_tokens": 5,
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "where is order 9?",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "Checking order 9.",
            },
        ):
            pass
        _raised(
            tracer,
            "get_order.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "get_order",
                "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order_id": "9"}}),
            },
            ValueError("no such order"),
        )
        with tracer.start_as_current_span(
            "format.task", attributes={"traceloop.span.kind": "task"}
        ):
            pass
    trace_id = _trace_id(run)

    assert _post(ops_user, memory) == {"rejected": 1}  # the task inside the workflow

    trace = Trace.objects.get(pk=trace_id)
    assert trace.agent.name == "support"
    assert trace.query == "where is order 9?"
    assert (trace.llm_backend, trace.total_tokens) == ("openai", 55)  # as the conventions name it
    chat, call = _steps(trace_id)
    assert (chat.prompt_tokens, chat.completion_tokens, chat.llm_backend) == (50, 5, "openai")
    assert chat.thought == "Checking order 9."
    assert chat.details["otel"]["convention"] == "openllmetry"
    assert (call.tool_name, call.action_input, call.ok, call.error_type) == (
        "get_order",
        {"order_id": "9"},
        False,
        "INTERNAL_SERVER_ERROR",  # the default rules' "in-process tool raised"
    )
    assert "no such order" in call.error_detail


@pytest.mark.django_db
def test_a_model_call_written_to_the_earlier_genai_conventions(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """Before 1.27 a model call had no gen_ai.operation.name, its provider was gen_ai.system
    and its tokens prompt_tokens / completion_tokens."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "chat gpt-4",
        attributes={
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4",
            "gen_ai.usage.prompt_tokens": 10,
            "gen_ai.usage.completion_tokens": 2,
        },
    ) as chat:
        pass

    assert _post(ops_user, memory) == {"rejected": 0}

    (step,) = _steps(_trace_id(chat))
    assert (step.phase, step.llm_backend, step.prompt_tokens, step.completion_tokens) == (
        "reasoning",
        "openai",
        10,
        2,
    )
    assert step.details["otel"]["convention"] == "gen_ai<1.27"


@pytest.mark.django_db
def test_an_exception_event_names_the_error_when_error_type_is_missing(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    tracer, memory = tracing
    tool = _raised(
        tracer,
        "execute_tool fetch",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch"},
        ConnectionRefusedError("refused"),
    )
    with tracer.start_as_current_span(
        "execute_tool retry",
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "retry"},
        record_exception=False,
        set_status_on_exception=False,
    ) as handled:
        # Recorded, then handled: the span did not fail, so no error is made up for it.
        handled.record_exception(ConnectionRefusedError("refused once"))

    _post(ops_user, memory)

    (failed,) = _steps(_trace_id(tool))
    assert (failed.ok, failed.error_type) == (False, "CONNECTION_ERROR")
    (ok,) = _steps(_trace_id(handled))
    assert (ok.ok, ok.error_type) == (True, "")


@pytest.mark.django_db
def test_a_nested_agent_exported_first_does_not_stand_for_the_run(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """An agent that hands over to another: the inner invoke_agent ends, so is exported,
    first; the run is still the outer one (its name, its duration)."""
    tracer, memory = tracing
    with (
        tracer.start_as_current_span(
            "invoke_agent triage",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Triage"},
        ) as outer,
        tracer.start_as_current_span(
            "invoke_agent billing",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Billing"},
        ),
    ):
        pass
    finished = memory.get_finished_spans()
    assert [s.name for s in finished] == ["invoke_agent billing", "invoke_agent triage"]

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(outer))
    assert trace.agent.name == "Triage"
    outer_span = finished[1]
    assert trace.total_latency_ms == (outer_span.end_time - outer_span.start_time) // 1_000_000
    assert trace.finished_at is not None


def test_reading_never_overwrites_what_a_span_says_in_the_current_conventions() -> None:
    current = {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.prompt_tokens": 99,
        "gen_ai.system": "old",
        "gen_ai.provider.name": "new",
    }
    assert genai_read(current, name="chat x", is_root=True) == ""
    assert current["gen_ai.usage.input_tokens"] == 7
    assert current["gen_ai.provider.name"] == "new"

    early = {"gen_ai.operation.name": "chat", "gen_ai.usage.prompt_tokens": 3}
    genai_read(early, name="chat x", is_root=True)
    assert early["gen_ai.usage.input_tokens"] == 3  # renamed since, read as the new name

    mixed = {
        "openinference.span.kind": "TOOL",
        "tool.name": "from_openinference",
        "gen_ai.tool.name": "said_outright",
    }
    assert genai_read(mixed, name="span", is_root=False) == "openinference"
    assert mixed["gen_ai.tool.name"] == "said_outright"


@pytest.mark.parametrize(
    "attributes",
    [
        {"openinference.span.kind": 7},
        {"openinference.span.kind": "GUARDRAIL"},
        {"traceloop.span.kind": "task"},
        {"llm.request.type": "unknown"},
        {"http.method": "GET"},
    ],
)
def test_spans_of_no_known_genai_kind_stay_unmapped(attributes: dict[str, Any]) -> None:
    assert genai_read(attributes, name="x", is_root=False) == ""
    assert "gen_ai.operation.name" not in attributes


@pytest.mark.parametrize(
    "hostile",
    [
        {"llm.input_messages.99999999999999999999.message.content": "x"},
        {"llm.input_messages.0.message.content": ["not", "text"]},
        {"input.value": "[" * 100_000},
        {"input.value": json.dumps({"input": 5, "args": [None]})},
        {"traceloop.entity.input": "{" * 100_000},
        {"mlflow.chat.tokenUsage": "[" * 100_000, "mlflow.spanInputs": '"' + "[" * 9 + '"'},
        {"mlflow.spanOutputs": json.dumps({"generations": [[[[[]]]]], "choices": [7]})},
        {"mlflow.llm.model": '"\\ud800"', "mlflow.chat.tokenUsage": "[1, 2]"},
    ],
)
def test_hostile_values_are_read_without_error(hostile: dict[str, Any]) -> None:
    for kind in ("AGENT", "LLM", "TOOL"):
        attributes = {"openinference.span.kind": kind, **hostile}
        genai_read(attributes, name="x", is_root=True)
    for kind in ("AGENT", "CHAT_MODEL", "TOOL", "CHAIN", 7):
        attributes = {"mlflow.spanType": json.dumps(kind), **hostile}
        genai_read(attributes, name="x", is_root=True)
    for kind in ("agent", "generation", "tool", "chain"):
        attributes = {
            "langfuse.observation.type": kind,
            "langfuse.observation.usage_details": hostile.get("mlflow.chat.tokenUsage", "{"),
            **{
                k.replace("mlflow.spanInputs", "langfuse.observation.input"): v
                for k, v in hostile.items()
            },
        }
        genai_read(attributes, name="x", is_root=True)
    attributes = {"traceloop.span.kind": "tool", **hostile}
    genai_read(attributes, name="x", is_root=True)


@pytest.mark.django_db
def test_a_run_span_without_input_takes_the_request_from_its_first_model_call(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """The OpenAI Agents SDK's OpenInference root: an AGENT span named after the workflow,
    carrying no input; the user's words are in the first model call's messages."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "Agent workflow", attributes={"openinference.span.kind": "AGENT"}
    ) as run:
        for turn, user_text in enumerate(["Where is order 42?", "And order 43?"]):
            with tracer.start_as_current_span(
                "response",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "gpt-4o-mini",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "You are a shop assistant.",
                    f"llm.input_messages.{turn + 1}.message.role": "user",
                    f"llm.input_messages.{turn + 1}.message.content": user_text,
                },
            ):
                pass

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    assert trace.query == "Where is order 42?"
    assert trace.agent.name == "Agent workflow"


@pytest.mark.django_db
def test_an_openllmetry_langchain_run_in_todays_operation_keeps_its_text(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """OpenLLMetry's LangChain instrumentation writes gen_ai.operation.name, but the run's
    words only in its entity input and output (LangChain's serialised messages)."""
    tracer, memory = tracing

    def human(text: str, kind: str) -> dict[str, Any]:
        return {"lc": 1, "type": "constructor", "id": ["x", kind], "kwargs": {"content": text}}

    with tracer.start_as_current_span(
        "AgentExecutor.workflow",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "AgentExecutor",
            "traceloop.entity.input": json.dumps(
                {
                    "inputs": {"messages": [human("refund order 7 please", "HumanMessage")]},
                    "tags": [],
                    "metadata": {},
                    "kwargs": {},
                }
            ),
            "traceloop.entity.output": json.dumps(
                {"outputs": {"messages": [human("Order 7 is refunded.", "AIMessage")]}}
            ),
        },
    ) as run:
        pass

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    assert trace.query == "refund order 7 please"
    assert trace.final_answer == "Order 7 is refunded."


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain words", "plain words"),
        (json.dumps({"question": "q1"}), "q1"),
        (json.dumps({"inputs": {"input": "q2"}, "tags": []}), "q2"),
        (json.dumps({"args": ["Bot", "where is order 9?"], "kwargs": {}}), "where is order 9?"),
        (json.dumps({"args": [], "kwargs": {"query": "q3"}}), "q3"),
        (json.dumps({"messages": [["user", "q4"]]}), "q4"),
        (json.dumps({"nothing": [1, 2]}), json.dumps({"nothing": [1, 2]})),
    ],
)
def test_the_text_of_a_frameworks_input_record(value: str, text: str) -> None:
    attributes = {"openinference.span.kind": "AGENT", "input.value": value}
    genai_read(attributes, name="a", is_root=True)
    assert attributes["gen_ai.input.messages"] == [{"role": "user", "content": text}]


def _node(tracer: Any, name: str) -> Any:
    """OpenLLMetry's span for a LangChain chain or a LangGraph node (its own operation)."""
    return tracer.start_as_current_span(
        f"execute_task {name}",
        attributes={
            "gen_ai.operation.name": "execute_task",
            "traceloop.span.kind": "task",
            "gen_ai.task.name": name,
        },
        record_exception=True,
        set_status_on_exception=True,
    )


def _workflow(tracer: Any) -> Any:
    return tracer.start_as_current_span(
        "LangGraph.workflow",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "traceloop.span.kind": "workflow",
            "gen_ai.agent.name": "graph-agent",
            "traceloop.entity.input": json.dumps({"inputs": {"input": "where is order 5?"}}),
        },
        record_exception=True,
        set_status_on_exception=True,
    )


@pytest.mark.django_db
def test_a_tool_failure_is_one_failed_step_not_one_per_node_it_went_up_through(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """OpenLLMetry's LangGraph shape: a workflow, nodes (execute_task) inside nodes, a
    retriever, a handoff, a model call, and a tool that timed out. The exception went up
    through both nodes and the workflow, each marked failed: the tool's is the one failure,
    and the spans that only wrap steps are no steps (before, each was a step classified
    LLM_ERROR, and its time was counted twice)."""
    tracer, memory = tracing
    with pytest.raises(TimeoutError), _workflow(tracer) as run:
        with (
            _node(tracer, "retrieve"),
            tracer.start_as_current_span(
                "vector_db_retrieve docs",
                attributes={"gen_ai.operation.name": "vector_db_retrieve"},
            ),
        ):
            pass
        with tracer.start_as_current_span(
            "handoff", attributes={"gen_ai.operation.name": "handoff"}
        ):
            pass
        with _node(tracer, "agent"), _node(tracer, "tools"):
            with tracer.start_as_current_span(
                "ChatOpenAI.chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "OpenAI",
                    "gen_ai.usage.input_tokens": 10,
                    "gen_ai.usage.output_tokens": 2,
                },
            ):
                pass
            _raised(
                tracer,
                "execute_tool get_order",
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order"},
                TimeoutError("the order service timed out"),
            )
            raise TimeoutError("the order service timed out")

    assert _post(ops_user, memory) == {"rejected": 0}

    trace = Trace.objects.get(pk=_trace_id(run))
    assert (trace.status, trace.error_type, trace.failed_steps) == ("failed", "TIMEOUT", 1)
    steps = _steps(trace.pk)
    assert [(s.phase, s.ok) for s in steps] == [
        ("retrieval", True),
        ("reasoning", True),
        ("action", False),
    ]
    assert steps[1].llm_backend == "openai"
    assert trace.total_steps == 3


@pytest.mark.django_db
def test_a_sub_agent_that_raised_inside_a_node_is_the_one_failed_step(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """A graph node that runs an agent of its own, which raised: the exception went up
    through the sub-agent, the node and the run. The innermost is the one failure (before,
    every span was skipped for another's failure, and the failed run had no error type)."""
    tracer, memory = tracing
    with (
        pytest.raises(ValueError),
        _workflow(tracer) as run,
        _node(tracer, "research"),
        tracer.start_as_current_span(
            "invoke_agent researcher",
            attributes={"gen_ai.operation.name": "invoke_agent"},
            record_exception=True,
            set_status_on_exception=True,
        ),
    ):
        raise ValueError("no sources")

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    (step,) = _steps(trace.pk)
    assert step.details["otel"]["name"] == "invoke_agent researcher"
    assert trace.status == "failed" and trace.error_type == step.error_type != ""


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (ValueError("bad state"), "INTERNAL_SERVER_ERROR"),  # the agent's own code raised
        (ConnectionRefusedError("store down"), "CONNECTION_ERROR"),
        (type("OutputParserException", (ValueError,), {})("no JSON"), "MODEL_FORMAT_ERROR"),
    ],
)
def test_a_node_that_raised_itself_is_the_one_failed_step(
    tracing: Any, ops_user: Any, error_rules: None, error: Exception, error_type: str
) -> None:
    """No model or tool call failed: the innermost node that raised carries the failure,
    classified by what it raised, not as the model being unavailable (LLM_ERROR)."""
    tracer, memory = tracing
    with (
        pytest.raises(type(error)),
        _workflow(tracer) as run,
        _node(tracer, "outer"),
        _node(tracer, "parse"),
    ):
        raise error

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    (step,) = _steps(trace.pk)
    assert (step.ok, step.error_type, trace.error_type) == (False, error_type, error_type)
    assert step.details["otel"]["name"] == "execute_task parse"


def test_a_cycle_of_parent_ids_is_read_without_looping() -> None:
    from traces.otlp import SpanIn, _failed_ancestors

    def span(span_id: str, parent: str, status: int) -> SpanIn:
        return SpanIn(
            trace_id="ab" * 16,
            span_id=span_id,
            parent_span_id=parent,
            name="execute_task x",
            start_ns=0,
            end_ns=1,
            status_code=status,
            status_message="",
            attributes={"gen_ai.operation.name": "execute_task"},
        )

    spans = [span("a" * 16, "b" * 16, 2), span("b" * 16, "c" * 16, 2), span("c" * 16, "a" * 16, 0)]
    assert _failed_ancestors(spans) == {"a" * 16, "b" * 16, "c" * 16}


@pytest.mark.parametrize(
    ("attributes", "provider"),
    [
        ({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "OpenAI"}, "openai"),
        ({"gen_ai.system": "Bedrock", "gen_ai.request.model": "m"}, "aws.bedrock"),
        ({"openinference.span.kind": "LLM", "llm.provider": "azure"}, "azure.ai.openai"),
        ({"openinference.span.kind": "LLM", "llm.system": "vertexai"}, "gcp.vertex_ai"),
        ({"openinference.span.kind": "LLM", "llm.provider": "mistralai"}, "mistral_ai"),
        ({"llm.request.type": "chat", "llm.vendor": "Anthropic"}, "anthropic"),
        ({"gen_ai.operation.name": "chat", "gen_ai.provider.name": "ollama"}, "ollama"),
    ],
)
def test_a_provider_has_one_name_whoever_wrote_it(
    attributes: dict[str, Any], provider: str
) -> None:
    genai_read(attributes, name="chat m", is_root=False)
    assert attributes["gen_ai.provider.name"] == provider


@pytest.mark.django_db
def test_an_openinference_completions_call_gives_its_prompt_and_choice(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """A completions API's call: llm.prompts as a list (LangChain's, LlamaIndex's
    instrumentors) or indexed prompt.text, and the choices' completion.text."""
    tracer, memory = tracing
    with (
        tracer.start_as_current_span(
            "query", attributes={"openinference.span.kind": "CHAIN"}
        ) as run,
        tracer.start_as_current_span(
            "OpenAI",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.prompts": ["What is the refund window?"],
                "llm.choices.0.completion.text": "Thirty days.",
            },
        ),
    ):
        pass
    listed = {"openinference.span.kind": "LLM", "llm.prompts.0.prompt.text": "indexed"}
    genai_read(listed, name="x", is_root=False)
    assert listed["gen_ai.input.messages"] == [{"role": "user", "content": "indexed"}]

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    assert trace.query == "What is the refund window?"  # from the first model call
    (call,) = _steps(trace.pk)
    assert call.thought == "Thirty days."


@pytest.mark.django_db
def test_a_pydantic_ai_run_gives_its_answer_and_its_tool_calls(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """Pydantic AI writes today's operations, but the run's answer in ``final_result`` and,
    in its instrumentation version 2 ("running tool"), a tool's arguments and result in
    ``tool_arguments`` / ``tool_response``; the request is only in its model calls."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "agent run",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "shop-agent",
            "agent_name": "shop-agent",
            "final_result": "Order 3 ships on Monday.",
        },
    ) as run:
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "When does 3 ship?"}]}]
                ),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "running tool",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_order",
                "gen_ai.tool.call.id": "call_1",
                "tool_arguments": json.dumps({"order_id": 3}),
                "tool_response": "shipping Monday",
            },
        ):
            pass

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    assert (trace.query, trace.final_answer) == ("When does 3 ship?", "Order 3 ships on Monday.")
    _, call = _steps(trace.pk)
    assert (call.tool_name, call.action_input, call.response_summary) == (
        "get_order",
        {"order_id": 3},
        "shipping Monday",
    )


def test_a_chain_whose_parent_is_not_in_the_request_is_not_taken_for_the_run() -> None:
    """Its parent may be a framework's span exported later; and a cycle of parent ids (a
    hostile exporter's) ends the walk."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from traces.otlp import otlp_spans_from_protobuf

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    chain = KeyValue(key="openinference.span.kind", value=AnyValue(string_value="CHAIN"))
    trace_id = bytes(range(16))
    for span_id, parent, kind in [
        (b"chain--1", b"elsewher", [chain]),  # its parent not sent
        (b"chain--2", b"loop---a", [chain]),  # above it: a, b, a, …
        (b"loop---a", b"loop---b", []),
        (b"loop---b", b"loop---a", []),
    ]:
        spans.add(trace_id=trace_id, span_id=span_id, parent_span_id=parent).attributes.extend(kind)

    read = otlp_spans_from_protobuf(request.SerializeToString())

    assert [span.operation for span in read] == ["", "", "", ""]


def _mlflow(value: Any) -> str:
    """An attribute value as MLflow writes every one: JSON (a string arrives quoted)."""
    return json.dumps(value)


@pytest.mark.django_db
def test_an_mlflow_traced_langchain_run_is_read_from_its_json_attributes(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """MLflow Tracing's autolog of a LangChain agent, exported over OTLP: the root chain is
    the run, the chat model a model call (its inputs a batch of LangChain messages, its
    output an LLMResult, its tokens in mlflow.chat.tokenUsage), the tool a tool call that
    raised; the output parser is no step."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "AgentExecutor",
        attributes={
            "mlflow.spanType": _mlflow("CHAIN"),
            "mlflow.spanInputs": _mlflow({"input": "Where is order 77?"}),
            "mlflow.spanOutputs": _mlflow({"output": "The order service timed out."}),
            "mlflow.trace.session": _mlflow("session-9"),
        },
    ) as run:
        with tracer.start_as_current_span(
            "ChatOpenAI",
            attributes={
                "mlflow.spanType": _mlflow("CHAT_MODEL"),
                "mlflow.llm.model": _mlflow("gpt-4o-mini"),
                "mlflow.chat.tokenUsage": _mlflow(
                    {"input_tokens": 90, "output_tokens": 12, "total_tokens": 102}
                ),
                "mlflow.spanInputs": _mlflow(
                    [[{"type": "human", "content": "Where is order 77?"}]]
                ),
                "mlflow.spanOutputs": _mlflow(
                    {"generations": [[{"text": "Let me check order 77."}]], "llm_output": {}}
                ),
            },
        ):
            pass
        _raised(
            tracer,
            "get_order",
            {
                "mlflow.spanType": _mlflow("TOOL"),
                "mlflow.spanInputs": _mlflow({"order_id": "77"}),
            },
            TimeoutError("the order service timed out"),
        )
        with tracer.start_as_current_span(
            "JsonOutputParser", attributes={"mlflow.spanType": _mlflow("PARSER")}
        ):
            pass

    assert _post(ops_user, memory) == {"rejected": 1}  # the parser

    trace = Trace.objects.get(pk=_trace_id(run))
    assert (trace.query, trace.final_answer) == (
        "Where is order 77?",
        "The order service timed out.",
    )
    assert (trace.session_id, trace.llm_model, trace.total_tokens) == (
        "session-9",
        "gpt-4o-mini",
        102,
    )
    chat, call = _steps(trace.pk)
    assert (chat.phase, chat.thought, chat.details["otel"]["convention"]) == (
        "reasoning",
        "Let me check order 77.",
        "mlflow",
    )
    assert (call.tool_name, call.action_input, call.error_type) == (
        "get_order",
        {"order_id": "77"},
        "TIMEOUT",
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (json.dumps({"choices": [{"message": {"role": "assistant", "content": "c1"}}]}), "c1"),
        (json.dumps({"choices": [{"text": "c2"}]}), "c2"),
        (json.dumps({"generations": [[{"text": "c3"}]]}), "c3"),
        (json.dumps([{"role": "user", "content": "c4"}]), "c4"),
        (json.dumps([[{"type": "human", "content": "c5"}]]), "c5"),
    ],
)
def test_the_text_of_a_model_calls_record(value: str, text: str) -> None:
    """An OpenAI response, a LangChain LLMResult, a bare or batched message list."""
    attributes = {"openinference.span.kind": "AGENT", "output.value": value}
    genai_read(attributes, name="a", is_root=True)
    assert attributes["gen_ai.output.messages"] == [{"role": "assistant", "content": text}]


@pytest.mark.django_db
def test_json_escapes_of_lone_surrogates_and_nul_in_framework_attributes_are_stored(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """Protobuf strings are UTF-8, but the JSON that frameworks write inside them may
    escape what no column takes (``\\ud800``, ``\\u0000``): read, it is made storable, not a
    500 for the whole request."""
    tracer, memory = tracing
    bad = "x\\ud800y\\u0000z"
    with tracer.start_as_current_span(
        "agent",
        attributes={
            "mlflow.spanType": _mlflow("AGENT"),
            "mlflow.spanInputs": '{"input": "' + bad + '"}',
            "mlflow.trace.session": '"' + bad + '"',
        },
    ) as run:
        with tracer.start_as_current_span(
            "llm",
            attributes={
                "mlflow.spanType": _mlflow("CHAT_MODEL"),
                "mlflow.llm.model": '"' + bad + '"',
                "mlflow.spanOutputs": '{"choices": [{"text": "' + bad + '"}]}',
            },
        ):
            pass
        with tracer.start_as_current_span(
            "lookup",
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "lookup",
                "input.value": '{"q": "' + bad + '"}',
                "output.value": '"' + bad + '"',
            },
        ):
            pass

    _post(ops_user, memory)

    trace = Trace.objects.get(pk=_trace_id(run))
    assert trace.query == "x\ufffdyz"
    assert "\x00" not in trace.session_id and "\ufffd" in trace.session_id
    chat, call = _steps(trace.pk)
    assert chat.details["otel"]["model"] == "x\ufffdyz" and chat.thought == "x\ufffdyz"
    assert call.action_input == {"q": "x\ufffdyz"}


def test_finding_the_runs_root_walks_each_span_once_however_deep_the_request() -> None:
    """A chain of plain spans with framework spans hanging off its bottom: before, each of
    them walked the whole chain again (quadratic, a request body's worth of CPU to hold a
    worker); each span is now walked over once."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    from traces.otlp import _Roots

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    trace_id, depth = bytes(range(16)), 500
    ids = [i.to_bytes(8, "big") for i in range(1, 2 * depth + 1)]
    for i in range(depth):  # the chain: span i under span i - 1
        spans.add(trace_id=trace_id, span_id=ids[i], parent_span_id=ids[i - 1] if i else b"")
    guard = KeyValue(key="openinference.span.kind", value=AnyValue(string_value="GUARDRAIL"))
    for i in range(depth, 2 * depth):  # each under the chain's bottom
        spans.add(trace_id=trace_id, span_id=ids[i], parent_span_id=ids[depth - 1])
        spans[-1].attributes.append(guard)

    class Counted(dict):  # type: ignore[type-arg]
        reads = 0

        def __getitem__(self, key: Any) -> Any:
            Counted.reads += 1
            return super().__getitem__(key)

        def get(self, key: Any, default: Any = None) -> Any:
            Counted.reads += 1
            return super().get(key, default)

    roots = _Roots(request)
    roots._above = Counted(roots._map())
    answers = {roots(span, {"openinference.span.kind": "GUARDRAIL"}) for span in spans[depth:]}

    assert answers == {True}  # under plain spans only: each would be a root
    assert Counted.reads <= depth


@pytest.mark.django_db
def test_a_langfuse_sdk_run_is_read_from_its_observation_attributes(
    tracing: Any, ops_user: Any, error_rules: None
) -> None:
    """Langfuse's OpenTelemetry-based SDK, its spans also sent here: an agent observation,
    a generation (model, usage details), a tool that raised, and an evaluator (no step)."""
    tracer, memory = tracing
    with tracer.start_as_current_span(
        "support-agent",
        attributes={
            "langfuse.observation.type": "agent",
            "langfuse.observation.input": json.dumps({"question": "Is order 8 paid?"}),
            "langfuse.trace.output": json.dumps("I could not reach the payments service."),
            "session.id": "lf-session",
        },
    ) as run:
        with tracer.start_as_current_span(
            "llm-call",
            attributes={
                "langfuse.observation.type": "generation",
                "langfuse.observation.model.name": "claude-sonnet",
                "langfuse.observation.usage_details": json.dumps(
                    {"input": 70, "output": 9, "total": 79}
                ),
                "langfuse.observation.output": json.dumps(
                    {"role": "assistant", "content": "Checking payments."}
                ),
            },
        ):
            pass
        _raised(
            tracer,
            "get_payment",
            {
                "langfuse.observation.type": "tool",
                "langfuse.observation.input": json.dumps({"order_id": 8}),
            },
            ConnectionRefusedError("payments down"),
        )
        with tracer.start_as_current_span(
            "faithfulness", attributes={"langfuse.observation.type": "evaluator"}
        ):
            pass

    assert _post(ops_user, memory) == {"rejected": 1}  # the evaluator

    trace = Trace.objects.get(pk=_trace_id(run))
    assert (trace.query, trace.final_answer, trace.session_id) == (
        "Is order 8 paid?",
        "I could not reach the payments service.",
        "lf-session",
    )
    assert (trace.agent.name, trace.llm_model, trace.total_tokens) == (
        "support-agent",
        "claude-sonnet",
        79,
    )
    chat, call = _steps(trace.pk)
    assert (chat.thought, chat.details["otel"]["convention"]) == ("Checking payments.", "langfuse")
    assert (call.tool_name, call.action_input, call.error_type) == (
        "get_payment",
        {"order_id": 8},
        "CONNECTION_ERROR",
    )
