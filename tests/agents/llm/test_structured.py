"""Each structured-output dialect over HTTP, against a fake server of the matching family,
the start-up probe and its cache, and the non-retry of refused requests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agents.llm import structured
from agents.llm.base import ChatMessage, LLMError, LLMResponse
from agents.llm.openai_backend import OpenAILLM, worst_case_call_seconds
from agents.llm.schemas import ReasoningStep, reasoning_json_schema
from agents.parsing import parse_reasoning
from tests.fakes.openai_server import FakeOpenAIServer

MESSAGES = [
    ChatMessage(role="system", content="You are a careful agent."),
    ChatMessage(role="user", content="Where is order W1?"),
]
STEP = '{"thought": "look it up", "action": "get_order", "action_input": {"order_id": "W1"}}'


class NoSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(autouse=True)
def probe_cache(tmp_path: Path, settings: Any) -> Path:
    path = tmp_path / "llm-structured-output.json"
    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(path)
    structured._memory.clear()
    return path


def build(server: FakeOpenAIServer, dialect: str, **kwargs: Any) -> OpenAILLM:
    options: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "m",
        "timeout": 5.0,
        "max_retries": 3,
        "temperature": 0.0,
        "price_input_per_mtok": 0.0,
        "price_output_per_mtok": 0.0,
        "structured_output": dialect,
        "max_tokens": {"reasoning": 77, "probe": 16},
        "sleep": NoSleep(),
    }
    options.update(kwargs)
    return OpenAILLM(**options)


def complete(llm: OpenAILLM, json_schema: dict[str, Any] | None = None) -> LLMResponse:
    return asyncio.run(
        llm.complete(
            messages=MESSAGES, schema=ReasoningStep, purpose="reasoning", json_schema=json_schema
        )
    )


TOOL_SCHEMA = reasoning_json_schema(
    {"get_order": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
)


def test_json_schema_dialect_sends_response_format_json_schema() -> None:
    with FakeOpenAIServer(flavour="openai") as server:
        server.enqueue(("ok", STEP))
        response = complete(build(server, "json_schema"), TOOL_SCHEMA)
    [request] = server.requests
    assert request.json["response_format"]["type"] == "json_schema"
    assert request.json["response_format"]["json_schema"]["schema"] == TOOL_SCHEMA
    assert request.json["max_tokens"] == 77
    assert parse_reasoning(response.text)[0].action == "get_order"


def test_json_object_dialect_is_what_llama_cpp_takes() -> None:
    with FakeOpenAIServer(flavour="llama_cpp") as server:
        server.enqueue(("ok", STEP))
        response = complete(build(server, "json_object"), TOOL_SCHEMA)
    [request] = server.requests
    assert request.json["response_format"] == {"type": "json_object", "schema": TOOL_SCHEMA}
    assert parse_reasoning(response.text)[0].action_input == {"order_id": "W1"}


def test_the_model_schema_sent_to_llama_cpp_has_no_repetition_bound() -> None:
    # ReasoningStep declares maxLength 4000 / 8000, which llama.cpp's grammar refuses.
    assert "maxLength" in json.dumps(ReasoningStep.model_json_schema())
    with FakeOpenAIServer(flavour="llama_cpp") as server:
        server.enqueue(("ok", STEP))
        response = complete(build(server, "json_object"))
    assert "maxLength" not in json.dumps(server.requests[0].json)
    assert response.text == STEP


def test_guided_json_dialect_is_what_vllm_takes() -> None:
    with FakeOpenAIServer(flavour="vllm") as server:
        server.enqueue(("ok", STEP))
        response = complete(build(server, "guided_json"), TOOL_SCHEMA)
    [request] = server.requests
    assert request.json["guided_json"] == TOOL_SCHEMA
    assert "response_format" not in request.json
    assert response.text == STEP


def test_tools_dialect_reads_the_forced_call_arguments() -> None:
    with FakeOpenAIServer(flavour="openai") as server:
        server.enqueue(("ok", STEP))
        response = complete(build(server, "tools"), TOOL_SCHEMA)
    [request] = server.requests
    assert request.json["tools"][0]["function"]["parameters"] == TOOL_SCHEMA
    assert request.json["tool_choice"] == {
        "type": "function",
        "function": {"name": "ReasoningStep"},
    }
    assert response.text == STEP


def test_prompt_dialect_puts_the_schema_in_the_prompt_only() -> None:
    with FakeOpenAIServer(flavour="plain") as server:
        server.enqueue(("ok", "Thought: look it up\nAction: get_order(order_id='W1')"))
        response = complete(build(server, "prompt"), TOOL_SCHEMA)
    [request] = server.requests
    assert "response_format" not in request.json and "tools" not in request.json
    assert '"get_order"' in request.json["messages"][-1]["content"]
    step, _mode = parse_reasoning(response.text)
    assert step.action == "get_order"


@pytest.mark.parametrize(
    ("flavour", "expected"),
    [
        ("openai", "json_schema"),
        ("llama_cpp", "json_object"),
        ("vllm", "guided_json"),
        ("plain", "prompt"),
    ],
)
def test_auto_probes_once_and_caches_per_server_and_model(
    flavour: str, expected: str, probe_cache: Path
) -> None:
    with FakeOpenAIServer(flavour=flavour) as server:
        server.enqueue(("ok", STEP), ("ok", STEP))
        llm = build(server, "auto")
        complete(llm)
        probes = len(server.requests) - 1
        structured._memory.clear()  # a new process: the file answers
        complete(build(server, "auto"))
        key = structured.cache_key(server.base_url, "m")
    assert probes >= 1
    assert len(server.requests) == probes + 2  # no second probe
    assert json.loads(probe_cache.read_text())[key]["dialect"] == expected
    last = server.requests[-1].json
    if expected == "prompt":
        assert "response_format" not in last
    assert server.remaining == 0


def test_a_tools_only_server_is_probed_to_tools() -> None:
    class ToolsOnly(FakeOpenAIServer):
        def structured_verdict(self, request: Any) -> tuple[str, Any]:
            verdict, detail = super().structured_verdict(request)
            return ("tool", detail) if verdict == "tool" else ("ignore", None)

    with ToolsOnly(flavour="openai") as server:
        assert asyncio.run(build(server, "auto").probe()) == "tools"


def test_json_schema_on_llama_cpp_fails_at_once_with_a_clear_message() -> None:
    with FakeOpenAIServer(flavour="llama_cpp") as server:
        llm = build(server, "json_schema")
        with pytest.raises(LLMError) as excinfo:
            complete(llm)
    assert len(server.requests) == 1  # a 500 that says "unsupported" is not retried
    assert llm._sleep.delays == []  # type: ignore[attr-defined]
    assert excinfo.value.transient is False
    assert str(excinfo.value).startswith(
        "the LLM server rejected the structured-output request: HTTP 500"
    )
    assert "json_schema" in str(excinfo.value)


def test_a_plain_500_is_still_retried() -> None:
    with FakeOpenAIServer() as server:
        server.enqueue(("status", 500), ("ok", STEP))
        response = complete(build(server, "json_schema"))
    assert response.attempts == 2


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        (400, "bad", True),
        (422, "", True),
        (408, "", False),
        (429, "", False),
        (500, "Internal error", False),
        (500, "Unsupported response_format type: 'json_schema'", True),
        (500, "failed to parse grammar", True),
        (500, "Requested tokens (9000) exceed context window of 8192", True),
        (502, "response_format", False),
        (503, "", False),
    ],
)
def test_request_errors(status: int, body: str, refused: bool) -> None:
    assert structured.status_is_request_error(status, body) is refused


def test_grammar_schema_drops_bounds_keeps_enums() -> None:
    schema = {
        "type": "object",
        "title": "X",
        "properties": {
            "a": {"type": "string", "maxLength": 4000, "pattern": "^x"},
            "b": {"enum": ["p", "q"]},
            "c": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        },
    }
    assert structured.grammar_schema(schema) == {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"enum": ["p", "q"]},
            "c": {"type": "array", "items": {"type": "string"}},
        },
    }


def test_the_call_budget_stops_retries_early() -> None:
    with FakeOpenAIServer() as server:
        server.enqueue(("hang", 3.0), ("hang", 3.0), ("ok", STEP))
        llm = build(server, "json_schema", timeout=0.3, max_retries=5, call_budget_seconds=0.5)
        with pytest.raises(LLMError) as excinfo:
            complete(llm)
    assert "call budget" in str(excinfo.value)
    assert len(server.requests) <= 2


def test_worst_case_call_seconds() -> None:
    # 4 attempts of 30 s and backoffs capped at 0.5, 1 and 2 s.
    assert worst_case_call_seconds(30, 3) == 123.5
    assert worst_case_call_seconds(10, 0) == 10


def test_a_raw_newline_inside_a_string_is_grammar_valid_and_parses() -> None:
    # A grammar allows control characters in strings; strict json.loads refused them.
    text = '{"thought": "two\nlines", "action": "final_answer", "final_answer": "ok"}'
    step, mode = parse_reasoning(text)
    assert (step.thought, step.final_answer, mode) == ("two\nlines", "ok", "strict")


def test_the_probe_cache_keeps_no_password_of_the_server_url() -> None:
    key = structured.cache_key("https://me:s3cret-password@llm.example/v1", "m")
    assert "s3cret-password" not in key and "llm.example/v1" in key
    assert key != structured.cache_key("https://me:s3cret-password@other.example/v1", "m")
