"""GenAI spans written to conventions other than OpenTelemetry's current ones, read as if
they followed those.

Agents reach the OTLP endpoint through whatever instrumentation their framework ships, and
few of those write the GenAI semantic conventions as they stand today:

- **OpenInference** (Arize Phoenix; the instrumentors of LangChain, LlamaIndex, the OpenAI
  Agents SDK, smolagents, CrewAI, DSPy, …): ``openinference.span.kind`` (``AGENT``, ``LLM``,
  ``TOOL``, ``CHAIN``, …), ``llm.model_name``, ``llm.token_count.*``, ``tool.name``,
  ``input.value`` / ``output.value``, ``llm.input_messages.<i>.message.content``.
- **OpenLLMetry** (Traceloop): ``traceloop.span.kind`` (``workflow``, ``agent``, ``tool``,
  ``task``), ``traceloop.entity.name`` / ``input`` / ``output``, and model calls marked by
  ``llm.request.type`` with ``gen_ai.prompt.<i>.*`` / ``gen_ai.completion.<i>.*``.
- **MLflow Tracing** (its own SDK and its autologging of LangChain, LangGraph, OpenAI, …,
  exported over OTLP): ``mlflow.spanType`` (``AGENT``, ``CHAT_MODEL``, ``LLM``, ``TOOL``,
  ``CHAIN``, ``RETRIEVER``, …), ``mlflow.spanInputs`` / ``mlflow.spanOutputs``,
  ``mlflow.chat.tokenUsage``, ``mlflow.llm.model``; every value written as JSON (a string
  arrives quoted).
- **Langfuse** (its OpenTelemetry-based SDKs, v3 and later, when their spans also go to
  this endpoint): ``langfuse.observation.type`` (``agent``, ``generation``, ``tool``,
  ``chain``, ``span``, ``retriever``, ``embedding``, …), ``langfuse.observation.input`` /
  ``output``, ``langfuse.observation.model.name``, ``langfuse.observation.usage_details``,
  ``langfuse.trace.input`` / ``output``.
- **Earlier GenAI conventions** (1.26 and before): model calls without
  ``gen_ai.operation.name``, ``gen_ai.system`` for the provider and
  ``gen_ai.usage.prompt_tokens`` / ``completion_tokens`` for the tokens.

``genai_read`` fills in the current attributes from those (never overwriting one the span
carries), so the rest of the ingest maps one shape. The values are copied as they are: they
are as untrusted as the rest of the span, and are redacted and capped where they are stored.
The JSON that frameworks write inside attributes is read with ``untrusted_json``: what it
escapes and no column takes (a lone surrogate, a NUL) comes out storable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from traces.redaction import untrusted_json

OPERATION = "gen_ai.operation.name"

# Convention names, as recorded in a Step's details ("read as …").
OPENINFERENCE = "openinference"
OPENLLMETRY = "openllmetry"
MLFLOW = "mlflow"
LANGFUSE = "langfuse"
GENAI_EARLY = "gen_ai<1.27"

# openinference.span.kind -> the operation. A CHAIN is a run only at the root of its trace
# (LangChain's AgentExecutor, LlamaIndex's query): deeper down it is plumbing, not a step.
_OPENINFERENCE_OPERATIONS = {
    "AGENT": "invoke_agent",
    "LLM": "chat",
    "TOOL": "execute_tool",
    "EMBEDDING": "embeddings",
    "RETRIEVER": "retrieval",
}
# traceloop.span.kind -> the operation; a task, like a chain, only at the root.
_OPENLLMETRY_OPERATIONS = {
    "workflow": "invoke_agent",
    "agent": "invoke_agent",
    "tool": "execute_tool",
}
# mlflow.spanType -> the operation; a CHAIN (or an untyped span) only at the root.
_MLFLOW_OPERATIONS = {
    "AGENT": "invoke_agent",
    "CHAT_MODEL": "chat",
    "LLM": "chat",
    "TOOL": "execute_tool",
    "RETRIEVER": "retrieval",
    "RERANKER": "retrieval",
    "EMBEDDING": "embeddings",
}
# langfuse.observation.type -> the operation; a chain (or a plain span) only at the root.
_LANGFUSE_OPERATIONS = {
    "agent": "invoke_agent",
    "generation": "chat",
    "tool": "execute_tool",
    "retriever": "retrieval",
    "embedding": "embeddings",
}
# llm.request.type (OpenLLMetry's model calls) -> the operation.
_REQUEST_TYPE_OPERATIONS = {
    "chat": "chat",
    "completion": "text_completion",
    "embedding": "embeddings",
    "rerank": "retrieval",
}
# Earlier GenAI conventions named a model call's span "<operation> <model>".
_EARLY_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings"}
# The first of these string fields of a JSON object is the user's text (or the answer);
# the objects under the wrapper keys are searched too.
_TEXT_FIELDS = (
    "input",
    "query",
    "question",
    "message",
    "content",
    "text",
    "prompt",
    "output",
    "answer",
    "result",
)
_WRAPPERS = ("inputs", "outputs", "kwargs", "input", "output")
_INDEXED = re.compile(r"(\d+)\.(.+)")
_MESSAGE_CONTENT_TEXT = re.compile(r"message\.contents\.\d+\.message_content\.text")
# Indexed fields that hold a message's whole text, and the role it has when none is given.
_TEXT_ONLY_FIELDS = {"prompt.text": "user", "completion.text": "assistant"}


# Provider names as instrumentations write them -> the conventions' gen_ai.provider.name
# (lower case first): OpenInference's llm.provider / llm.system, OpenLLMetry's gen_ai.system
# ("OpenAI", "Bedrock", …), LangChain's class-derived vendors. One provider, one name, so
# that a chart or filter by backend does not split it.
_PROVIDERS = {
    "azure": "azure.ai.openai",
    "azure_openai": "azure.ai.openai",
    "azureopenai": "azure.ai.openai",
    "google": "gcp.vertex_ai",
    "vertexai": "gcp.vertex_ai",
    "vertex_ai": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "google_genai": "gcp.gemini",
    "googlegenerativeai": "gcp.gemini",
    "aws": "aws.bedrock",
    "bedrock": "aws.bedrock",
    "aws_bedrock": "aws.bedrock",
    "mistralai": "mistral_ai",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
}
PROVIDER = "gen_ai.provider.name"


def genai_read(attributes: dict[str, Any], *, name: str, is_root: bool) -> str:
    """Fill the current GenAI attributes of a span into ``attributes`` (in place) from the
    convention it was written to; returns that convention's name, or "" when the span
    already follows the current conventions (or none that is known)."""
    convention = _read(attributes, name=name, is_root=is_root)
    provider = attributes.get(PROVIDER)
    if isinstance(provider, str):
        key = provider.strip().lower()
        attributes[PROVIDER] = _PROVIDERS.get(key.replace(" ", "_"), key)
    return convention


def _read(attributes: dict[str, Any], *, name: str, is_root: bool) -> str:
    if "mlflow.spanType" in attributes:
        _json_strings_unquote(attributes)
        if OPERATION not in attributes:
            span_type = str(attributes["mlflow.spanType"]).upper()
            return _observation_read(_MLFLOW, attributes, span_type, name=name, is_root=is_root)
    if OPERATION in attributes:
        _aliases(attributes)
        # Instrumentations that write today's operations may still carry the run's text or
        # a tool call's only in their own attributes: OpenLLMetry's LangChain one, Pydantic
        # AI (the answer in final_result; a tool's in tool_arguments / tool_response in its
        # instrumentation version 2).
        _gaps_fill(attributes, str(attributes[OPERATION]))
        return ""
    kind = attributes.get("openinference.span.kind")
    if isinstance(kind, str):
        return _openinference(attributes, kind.upper(), name=name, is_root=is_root)
    kind = attributes.get("traceloop.span.kind")
    if isinstance(kind, str):
        return _openllmetry_entity(attributes, kind.lower(), name=name, is_root=is_root)
    kind = attributes.get("langfuse.observation.type")
    if isinstance(kind, str):
        return _observation_read(_LANGFUSE, attributes, kind.lower(), name=name, is_root=is_root)
    request_type = attributes.get("llm.request.type")
    if isinstance(request_type, str) and request_type.lower() in _REQUEST_TYPE_OPERATIONS:
        attributes[OPERATION] = _REQUEST_TYPE_OPERATIONS[request_type.lower()]
        _openllmetry_model_call(attributes)
        return OPENLLMETRY
    if "gen_ai.system" in attributes or "gen_ai.request.model" in attributes:
        first = name.split(" ", 1)[0]
        attributes[OPERATION] = first if first in _EARLY_OPERATIONS else "chat"
        _aliases(attributes)
        return GENAI_EARLY
    return ""


def _gaps_fill(attributes: dict[str, Any], operation: str) -> None:
    if operation in ("invoke_agent", "create_agent"):
        _run_text_fill(attributes)
    elif operation == "execute_tool":
        _tool_call_fill(attributes)


def _run_text_fill(attributes: dict[str, Any]) -> None:
    """A run's request and answer, from OpenInference's or OpenLLMetry's record of them."""
    for whole in ("input.value", "traceloop.entity.input"):
        _messages_fill(attributes, "gen_ai.input.messages", "", whole)
    for whole in ("output.value", "traceloop.entity.output", "final_result"):
        _messages_fill(attributes, "gen_ai.output.messages", "", whole)


def _tool_call_fill(attributes: dict[str, Any]) -> None:
    """A tool call's arguments and result, from OpenInference's or OpenLLMetry's record."""
    _fill(attributes, "gen_ai.tool.call.arguments", "input.value", "tool_arguments")
    if "gen_ai.tool.call.arguments" not in attributes:
        arguments = _call_arguments(attributes.get("traceloop.entity.input"))
        if arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = arguments
    _fill(
        attributes,
        "gen_ai.tool.call.result",
        "output.value",
        "traceloop.entity.output",
        "tool_response",
    )


def _fill(attributes: dict[str, Any], key: str, *candidates: str) -> None:
    """Set ``key`` from the first candidate attribute present, unless it is set already."""
    if key in attributes:
        return
    for candidate in candidates:
        value = attributes.get(candidate)
        if value is not None and value != "":
            attributes[key] = value
            return


def _aliases(attributes: dict[str, Any]) -> None:
    """Attribute names the GenAI conventions have since renamed."""
    if "gen_ai.usage.prompt_tokens" in attributes or "gen_ai.usage.completion_tokens" in (
        attributes
    ):
        _fill(attributes, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
        _fill(attributes, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
    if "gen_ai.system" in attributes:
        _fill(attributes, "gen_ai.provider.name", "gen_ai.system")


# --- OpenInference -------------------------------------------------------------------------
def _openinference(attributes: dict[str, Any], kind: str, *, name: str, is_root: bool) -> str:
    operation = _OPENINFERENCE_OPERATIONS.get(kind)
    if operation is None and kind == "CHAIN" and is_root:
        operation = "invoke_agent"
    if operation is None:
        return ""  # a guardrail, a reranker, a chain inside a run: not a step of its own
    attributes[OPERATION] = operation
    _fill(attributes, "gen_ai.provider.name", "llm.provider", "llm.system")
    _fill(attributes, "gen_ai.conversation.id", "session.id")
    if operation == "invoke_agent":
        _fill(attributes, "gen_ai.agent.name", "agent.name")
        if kind == "AGENT" and name:
            attributes.setdefault("gen_ai.agent.name", name)
        _messages_fill(attributes, "gen_ai.input.messages", "llm.input_messages.", "")
        _messages_fill(attributes, "gen_ai.output.messages", "llm.output_messages.", "")
        _run_text_fill(attributes)
    elif operation == "execute_tool":
        _fill(attributes, "gen_ai.tool.name", "tool.name")
        if name:
            attributes.setdefault("gen_ai.tool.name", name)
        _fill(attributes, "gen_ai.tool.call.id", "tool_call.id", "tool.id")
        _tool_call_fill(attributes)
    else:
        _fill(attributes, "gen_ai.request.model", "llm.model_name", "embedding.model_name")
        _fill(attributes, "gen_ai.usage.input_tokens", "llm.token_count.prompt")
        _fill(attributes, "gen_ai.usage.output_tokens", "llm.token_count.completion")
        _messages_fill(attributes, "gen_ai.input.messages", "llm.input_messages.", "")
        # A completions API's: llm.prompts (a list, or indexed .prompt.text) and choices.
        _prompts_fill(attributes)
        _messages_fill(attributes, "gen_ai.input.messages", "llm.prompts.", "")
        _messages_fill(attributes, "gen_ai.output.messages", "llm.output_messages.", "")
        _messages_fill(attributes, "gen_ai.output.messages", "llm.choices.", "output.value")
    return OPENINFERENCE


def _prompts_fill(attributes: dict[str, Any]) -> None:
    prompts = attributes.get("llm.prompts")
    if "gen_ai.input.messages" in attributes or not isinstance(prompts, list):
        return
    texts = [prompt for prompt in prompts if isinstance(prompt, str) and prompt]
    if texts:
        attributes["gen_ai.input.messages"] = [{"role": "user", "content": t} for t in texts]


# --- MLflow ------------------------------------------------------------------------------
def _json_strings_unquote(attributes: dict[str, Any]) -> None:
    """MLflow writes each attribute value as JSON: ``"CHAT_MODEL"`` arrives with its quotes,
    a number as its digits. The quoted strings are read as the strings they encode."""
    for key, value in attributes.items():
        if isinstance(value, str) and len(value) >= 2 and value[0] == '"' == value[-1]:
            try:
                decoded = untrusted_json(value)
            except ValueError:
                continue
            if isinstance(decoded, str):
                attributes[key] = decoded


def _json_object(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = untrusted_json(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


# --- MLflow and Langfuse: one typed span per observation ---------------------------------
@dataclass(frozen=True)
class _ObservationSDK:
    """An SDK that types each span with one attribute (MLflow's ``mlflow.spanType``,
    Langfuse's ``langfuse.observation.type``) and records each observation's input and
    output as whole JSON values: how its attributes map to today's conventions."""

    convention: str
    operations: dict[str, str]
    root_kinds: tuple[str, ...]  # a run only at the root of its trace
    session: tuple[str, ...]
    inputs: str
    outputs: str
    run_inputs: tuple[str, ...] = ()  # the run's own input and output, when it has them
    run_outputs: tuple[str, ...] = ()
    agent_named_by: tuple[str, ...] | None = None  # the kinds whose span name is the agent's
    model: tuple[str, ...] = ()
    provider: tuple[str, ...] = ()
    usage: str = ""
    input_tokens: tuple[str, ...] = ("input_tokens",)
    output_tokens: tuple[str, ...] = ("output_tokens",)


_MLFLOW = _ObservationSDK(
    convention=MLFLOW,
    operations=_MLFLOW_OPERATIONS,
    root_kinds=("CHAIN", "UNKNOWN"),
    session=("mlflow.trace.session", "session.id"),
    inputs="mlflow.spanInputs",
    outputs="mlflow.spanOutputs",
    agent_named_by=("AGENT",),
    model=("mlflow.llm.model",),
    provider=("mlflow.llm.provider",),
    usage="mlflow.chat.tokenUsage",
)
_LANGFUSE = _ObservationSDK(
    convention=LANGFUSE,
    operations=_LANGFUSE_OPERATIONS,
    root_kinds=("chain", "span"),
    session=("langfuse.session.id", "session.id"),
    inputs="langfuse.observation.input",
    outputs="langfuse.observation.output",
    run_inputs=("langfuse.trace.input",),
    run_outputs=("langfuse.trace.output",),
    model=("langfuse.observation.model.name",),
    usage="langfuse.observation.usage_details",
    input_tokens=("input", "input_tokens", "prompt_tokens"),
    output_tokens=("output", "output_tokens", "completion_tokens"),
)


def _observation_read(
    sdk: _ObservationSDK, attributes: dict[str, Any], kind: str, *, name: str, is_root: bool
) -> str:
    operation = sdk.operations.get(kind)
    if operation is None and kind in sdk.root_kinds and is_root:
        operation = "invoke_agent"
    if operation is None:
        return ""  # a parser, an evaluator, a guardrail, a chain inside a run: not a step
    attributes[OPERATION] = operation
    _fill(attributes, "gen_ai.conversation.id", *sdk.session)
    if operation == "invoke_agent":
        if name and (sdk.agent_named_by is None or kind in sdk.agent_named_by):
            attributes.setdefault("gen_ai.agent.name", name)
        for whole in (sdk.inputs, *sdk.run_inputs):
            _messages_fill(attributes, "gen_ai.input.messages", "", whole)
        for whole in (sdk.outputs, *sdk.run_outputs):
            _messages_fill(attributes, "gen_ai.output.messages", "", whole)
    elif operation == "execute_tool":
        if name:  # both SDKs name a tool's span after the tool
            attributes.setdefault("gen_ai.tool.name", name)
        _fill(attributes, "gen_ai.tool.call.arguments", sdk.inputs)
        _fill(attributes, "gen_ai.tool.call.result", sdk.outputs)
    else:
        if sdk.model:
            _fill(attributes, "gen_ai.request.model", *sdk.model)
        if sdk.provider:
            _fill(attributes, "gen_ai.provider.name", *sdk.provider)
        usage = _json_object(attributes.get(sdk.usage)) if sdk.usage else {}
        for ours, theirs in (
            ("input_tokens", sdk.input_tokens),
            ("output_tokens", sdk.output_tokens),
        ):
            count = next((usage[key] for key in theirs if key in usage), None)
            if count is not None:
                attributes.setdefault(f"gen_ai.usage.{ours}", count)
        _messages_fill(attributes, "gen_ai.input.messages", "", sdk.inputs)
        _messages_fill(attributes, "gen_ai.output.messages", "", sdk.outputs)
    return sdk.convention


# --- OpenLLMetry ---------------------------------------------------------------------------
def _openllmetry_entity(attributes: dict[str, Any], kind: str, *, name: str, is_root: bool) -> str:
    operation = _OPENLLMETRY_OPERATIONS.get(kind)
    if operation is None and kind == "task" and is_root:
        operation = "invoke_agent"
    if operation is None:
        return ""
    attributes[OPERATION] = operation
    entity = attributes.get("traceloop.entity.name")
    entity_name = entity if isinstance(entity, str) and entity else name.rsplit(".", 1)[0]
    if operation == "invoke_agent":
        attributes.setdefault("gen_ai.agent.name", entity_name)
        _run_text_fill(attributes)
    else:
        attributes.setdefault("gen_ai.tool.name", entity_name)
        _tool_call_fill(attributes)
    return OPENLLMETRY


def _call_arguments(value: Any) -> Any:
    """A decorated tool's arguments from OpenLLMetry's ``{"args": [...], "kwargs": {...}}``
    (the keyword arguments when there are no positional ones), else the input as it is."""
    if not isinstance(value, str):
        return value
    try:
        document = untrusted_json(value)
    except ValueError:
        return value
    if (
        isinstance(document, dict)
        and isinstance(document.get("kwargs"), dict)
        and not document.get("args")
    ):
        return json.dumps(document["kwargs"], ensure_ascii=False)
    return value


def _openllmetry_model_call(attributes: dict[str, Any]) -> None:
    # The llm.* names are OpenLLMetry's before April 2024; later releases write gen_ai.*.
    _fill(attributes, "gen_ai.request.model", "llm.request.model")
    _fill(attributes, "gen_ai.response.model", "llm.response.model")
    _fill(
        attributes,
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.usage.prompt_tokens",
    )
    _fill(
        attributes,
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.usage.completion_tokens",
    )
    _fill(attributes, "gen_ai.provider.name", "gen_ai.system", "llm.vendor")
    _messages_fill(attributes, "gen_ai.input.messages", "gen_ai.prompt.", "")
    _messages_fill(attributes, "gen_ai.output.messages", "gen_ai.completion.", "")


# --- messages --------------------------------------------------------------------------
def _messages_fill(attributes: dict[str, Any], key: str, indexed_prefix: str, whole: str) -> None:
    """Set ``key`` (a GenAI messages attribute) from flattened, indexed messages
    (``<prefix><i>.[message.]role`` / ``content``), else from one input or output value."""
    if key in attributes:
        return
    messages = _indexed_messages(attributes, indexed_prefix) if indexed_prefix else []
    if messages:
        attributes[key] = messages
        return
    value = attributes.get(whole) if whole else None
    if value is None or value == "":
        return
    text = _value_text(value)
    if text:
        role = "assistant" if key == "gen_ai.output.messages" else "user"
        attributes[key] = [{"role": role, "content": text}]


def _indexed_messages(attributes: dict[str, Any], prefix: str) -> list[dict[str, str]]:
    by_index: dict[int, dict[str, str]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix) or not isinstance(value, str):
            continue
        match = _INDEXED.fullmatch(key[len(prefix) :])
        if match is None or len(match.group(1)) > 4:
            continue
        field = match.group(2).removeprefix("message.")
        message = by_index.setdefault(int(match.group(1)), {"role": "", "content": ""})
        if field == "role":
            message["role"] = value
        elif field in _TEXT_ONLY_FIELDS:
            message["role"] = message["role"] or _TEXT_ONLY_FIELDS[field]
            message["content"] = value
        elif field == "content" or _MESSAGE_CONTENT_TEXT.fullmatch(match.group(2)):
            message["content"] = f"{message['content']}\n{value}" if message["content"] else value
    return [by_index[i] for i in sorted(by_index) if by_index[i]["content"]]


def _value_text(value: Any) -> str:
    """The text in an input or output value: the value itself, or, when it is JSON, the
    text it wraps (``_text_in``); the JSON as it is when it wraps none."""
    if not isinstance(value, str):
        return ""
    try:
        document = untrusted_json(value)
    except ValueError:
        return value
    return _text_in(document, depth=0) or value


def _text_in(document: Any, *, depth: int) -> str:
    """The user's (or the answer's) text in a framework's record of a call:
    ``{"input": "…"}``, LangChain's ``{"inputs": {"question": "…"}}`` or
    ``{"outputs": {"messages": [...]}}`` (the last message), OpenLLMetry's
    ``{"args": [...], "kwargs": {...}}`` (a text keyword argument, else the longest text
    argument: a method's first one is its object)."""
    if isinstance(document, str):
        return document
    if isinstance(document, list) and depth <= 2:  # a bare list of messages
        return _text_in({"messages": document}, depth=depth + 1)
    if not isinstance(document, dict) or depth > 2:
        return ""
    for field in _TEXT_FIELDS:
        if isinstance(document.get(field), str) and document[field]:
            return str(document[field])
    messages = document.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            content = _message_content(message)
            if content:
                return content
    generations = document.get("generations")  # LangChain's LLMResult: [[{"text": …}]]
    while isinstance(generations, list) and generations:
        generations = generations[0]
    generated = generations.get("text") if isinstance(generations, dict) else None
    if isinstance(generated, str) and generated:
        return generated
    choices = document.get("choices")  # a chat completion as the OpenAI API returns it
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice, text = choices[0], choices[0].get("text")
        answer = _message_content(choice.get("message")) or (text if isinstance(text, str) else "")
        if answer:
            return answer
    for wrapper in _WRAPPERS:
        text = _text_in(document.get(wrapper), depth=depth + 1)
        if text:
            return text
    args = document.get("args")
    if isinstance(args, list):
        texts = [arg for arg in args if isinstance(arg, str) and arg]
        if texts:
            return max(texts, key=len)
    return ""


def _message_content(message: Any) -> str:
    """A message's text: ``{"content": "…"}``, LangChain's serialised message
    (``{"kwargs": {"content": "…"}}``) or a ``[role, text]`` pair."""
    if isinstance(message, dict):
        content = message.get("content")
        if not isinstance(content, str) and isinstance(message.get("kwargs"), dict):
            content = message["kwargs"].get("content")
        return content if isinstance(content, str) else ""
    if isinstance(message, list) and len(message) == 2 and isinstance(message[1], str):
        return message[1]
    if isinstance(message, list) and message and isinstance(message[-1], (dict, list)):
        return _message_content(message[-1])  # LangChain's batch: a list of message lists
    return ""
