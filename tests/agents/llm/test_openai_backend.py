"""OpenAILLM against a real HTTP server speaking the chat-completions protocol."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest
from pydantic import BaseModel

from agents.llm.base import ChatMessage, LLMError, LLMResponse
from agents.llm.openai_backend import OpenAILLM
from agents.llm.schemas import ReasoningStep, Reflection
from agents.llm.structured import grammar_schema
from tests.fakes.openai_server import FakeOpenAIServer, openai_server_fixture  # noqa: F401

API_KEY = "sk-test-do-not-log-0123456789"
MESSAGES = [
    ChatMessage(role="system", content="You are a careful agent."),
    ChatMessage(role="user", content="What is 2 + 2?"),
]
VALID_STEP = '{"thought": "add", "action": "final_answer", "final_answer": "4"}'
MALFORMED_STEP = '{"thought": "x", "action":'


class SleepRecorder:
    """Stands in for asyncio.sleep: records each delay, waits for none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def build_llm(
    base_url: str,
    *,
    sleep: SleepRecorder | None = None,
    max_retries: int = 3,
    timeout: float = 5.0,
) -> OpenAILLM:
    return OpenAILLM(
        base_url=base_url,
        api_key=API_KEY,
        model="test-model",
        timeout=timeout,
        max_retries=max_retries,
        temperature=0.2,
        price_input_per_mtok=2.0,
        price_output_per_mtok=8.0,
        sleep=sleep or SleepRecorder(),
    )


def complete(llm: OpenAILLM, schema: type[BaseModel] = ReasoningStep) -> LLMResponse:
    return asyncio.run(llm.complete(messages=MESSAGES, schema=schema, purpose="reasoning"))


def complete_error(llm: OpenAILLM) -> LLMError:
    with pytest.raises(LLMError) as excinfo:
        complete(llm)
    return excinfo.value


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_complete_returns_raw_text_usage_and_cost(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(
        ("ok", VALID_STEP, {"prompt_tokens": 1_000, "completion_tokens": 500}),
    )

    # When
    response = complete(build_llm(openai_server.base_url))

    # Then
    assert response.text == VALID_STEP
    assert response.backend == "openai"
    assert response.model == "fake-model"
    assert response.usage.prompt_tokens == 1_000
    assert response.usage.completion_tokens == 500
    assert response.usage.cost_usd == pytest.approx((1_000 * 2.0 + 500 * 8.0) / 1_000_000)
    assert response.attempts == 1
    assert response.latency_ms > 0


@pytest.mark.parametrize("schema", [ReasoningStep, Reflection])
def test_request_carries_model_messages_and_json_schema(
    openai_server: FakeOpenAIServer, schema: type[BaseModel]
) -> None:
    # Given
    openai_server.enqueue(("ok", "{}"))

    # When
    complete(build_llm(openai_server.base_url), schema=schema)

    # Then
    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json["model"] == "test-model"
    assert request.json["temperature"] == 0.2
    assert request.json["messages"] == [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    assert request.json["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": schema.__name__,
            "schema": grammar_schema(schema.model_json_schema()),
            "strict": False,
        },
    }
    # No repetition bound reaches a grammar engine; a runaway generation is capped.
    assert "maxLength" not in json.dumps(request.json["response_format"])
    assert request.json["max_tokens"] == 512


@pytest.mark.parametrize(
    ("headers", "expected_delay"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"Retry-After": "0.25"}, 0.25),
        ({"Retry-After": "120"}, 8.0),
        ({"retry-after-ms": "1500"}, 1.5),
    ],
)
def test_rate_limit_then_ok_honours_retry_after(
    openai_server: FakeOpenAIServer, headers: dict[str, str], expected_delay: float
) -> None:
    # Given
    openai_server.enqueue(("status", 429, headers), ("ok", VALID_STEP))
    sleep = SleepRecorder()

    # When
    response = complete(build_llm(openai_server.base_url, sleep=sleep))

    # Then
    assert response.text == VALID_STEP
    assert response.attempts == 2
    assert sleep.delays == [expected_delay]


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_then_ok_back_off_exponentially(
    openai_server: FakeOpenAIServer, status: int
) -> None:
    # Given
    openai_server.enqueue(("status", status), ("status", status), ("ok", VALID_STEP))
    sleep = SleepRecorder()

    # When
    response = complete(build_llm(openai_server.base_url, sleep=sleep))

    # Then
    assert response.attempts == 3
    assert len(openai_server.requests) == 3
    first, second = sleep.delays
    assert 0.25 <= first <= 0.5
    assert 0.5 <= second <= 1.0


@pytest.mark.parametrize("max_retries", [0, 2])
def test_persistent_server_error_raises_transient_when_retries_exhausted(
    openai_server: FakeOpenAIServer, max_retries: int
) -> None:
    # Given
    openai_server.enqueue(*[("status", 500)] * (max_retries + 1))
    sleep = SleepRecorder()

    # When
    error = complete_error(build_llm(openai_server.base_url, sleep=sleep, max_retries=max_retries))

    # Then
    assert error.transient is True
    assert error.status_code == 500
    assert len(openai_server.requests) == max_retries + 1
    assert len(sleep.delays) == max_retries


def test_backoff_is_capped(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(*[("status", 503)] * 8)
    sleep = SleepRecorder()

    # When
    complete_error(build_llm(openai_server.base_url, sleep=sleep, max_retries=7))

    # Then
    assert len(sleep.delays) == 7
    assert max(sleep.delays) <= 8.0
    assert sleep.delays[-1] >= 4.0


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_fail_at_once_without_retry(
    openai_server: FakeOpenAIServer, status: int
) -> None:
    # Given
    openai_server.enqueue(("status", status), ("ok", VALID_STEP))
    sleep = SleepRecorder()

    # When
    error = complete_error(build_llm(openai_server.base_url, sleep=sleep))

    # Then
    assert error.transient is False
    assert error.status_code == status
    assert len(openai_server.requests) == 1
    assert sleep.delays == []
    assert API_KEY not in str(error)


def test_a_message_role_the_api_does_not_know_is_refused_at_once(
    openai_server: FakeOpenAIServer,
) -> None:
    """The server checks every message's role before it looks at the script, as the API
    does: the request fails once, with the API's reason, and is not retried."""
    # Given
    openai_server.enqueue(("ok", VALID_STEP))
    sleep = SleepRecorder()
    messages = [ChatMessage(role="narrator", content="Once upon a time"), MESSAGES[1]]

    # When
    with pytest.raises(LLMError) as excinfo:
        asyncio.run(
            build_llm(openai_server.base_url, sleep=sleep).complete(
                messages=messages, schema=ReasoningStep, purpose="reasoning"
            )
        )

    # Then
    assert excinfo.value.transient is False
    assert excinfo.value.status_code == 400
    assert "messages[0].role" in str(excinfo.value)
    assert len(openai_server.requests) == 1
    assert openai_server.remaining == 1
    assert sleep.delays == []


def test_timeout_raises_transient(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(("hang", 2.0))

    # When
    error = complete_error(build_llm(openai_server.base_url, timeout=0.2, max_retries=0))

    # Then
    assert error.transient is True
    assert error.status_code is None
    assert len(openai_server.requests) == 1


def test_timeout_is_retried(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(("hang", 2.0), ("ok", VALID_STEP))
    sleep = SleepRecorder()

    # When
    response = complete(build_llm(openai_server.base_url, sleep=sleep, timeout=0.2, max_retries=1))

    # Then
    assert response.text == VALID_STEP
    assert response.attempts == 2
    assert len(sleep.delays) == 1


def test_connection_refused_is_retried_then_raises_transient() -> None:
    # Given
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    sleep = SleepRecorder()

    # When
    error = complete_error(build_llm(base_url, sleep=sleep, max_retries=2))

    # Then
    assert error.transient is True
    assert len(sleep.delays) == 2


def test_malformed_json_content_is_returned_raw(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(("ok", MALFORMED_STEP))

    # When
    response = complete(build_llm(openai_server.base_url))

    # Then
    assert response.text == MALFORMED_STEP
    assert response.attempts == 1


@pytest.mark.parametrize("content_type", ["application/json", "text/html"])
def test_non_json_body_raises(openai_server: FakeOpenAIServer, content_type: str) -> None:
    # Given
    openai_server.enqueue(("raw", 200, b"<html>upstream proxy error</html>", content_type))

    # When
    error = complete_error(build_llm(openai_server.base_url))

    # Then
    assert error.transient is False
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m"},
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [],
        },
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None},
                    "finish_reason": "stop",
                }
            ],
        },
    ],
    ids=["no-choices", "empty-choices", "null-content"],
)
def test_completion_without_content_raises(
    openai_server: FakeOpenAIServer, body: dict[str, object]
) -> None:
    # Given
    openai_server.enqueue(("raw", 200, json.dumps(body).encode()))

    # When
    error = complete_error(build_llm(openai_server.base_url))

    # Then
    assert error.transient is False
    assert len(openai_server.requests) == 1


def test_one_instance_serves_successive_event_loops(openai_server: FakeOpenAIServer) -> None:
    # Given
    openai_server.enqueue(("ok", "{}"), ("ok", VALID_STEP))
    llm = build_llm(openai_server.base_url)

    # When
    first = complete(llm)
    second = complete(llm)

    # Then
    assert (first.text, second.text) == ("{}", VALID_STEP)


def test_calls_on_one_loop_share_a_connection_until_aclose(
    openai_server: FakeOpenAIServer,
) -> None:
    # Given
    openai_server.enqueue(*[("ok", VALID_STEP)] * 3)
    llm = build_llm(openai_server.base_url)

    async def calls() -> int:
        await llm.complete(messages=MESSAGES, schema=ReasoningStep, purpose="reasoning")
        await llm.complete(messages=MESSAGES, schema=Reflection, purpose="reflection")
        await llm.aclose()
        closed_after_two = openai_server.connections_closed()
        await llm.complete(messages=MESSAGES, schema=ReasoningStep, purpose="reasoning")
        await llm.aclose()
        return closed_after_two

    # When
    closed_after_two = asyncio.run(calls())

    # Then: one connection for the first two calls, closed by aclose; a new one after it
    first, second, third = (request.peer for request in openai_server.requests)
    assert first == second != third
    assert closed_after_two
    assert openai_server.connections_closed()


def test_the_schema_sent_is_the_models_each_time(openai_server: FakeOpenAIServer) -> None:
    # Given: the schema is made once per class and shared between calls
    openai_server.enqueue(("ok", VALID_STEP), ("ok", VALID_STEP))
    llm = build_llm(openai_server.base_url)

    # When
    complete(llm)
    complete(llm)

    # Then
    sent = [r.json["response_format"]["json_schema"]["schema"] for r in openai_server.requests]
    assert sent[0] == sent[1] == grammar_schema(ReasoningStep.model_json_schema())


def test_logs_are_structured_and_never_carry_the_api_key(
    openai_server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Given
    openai_server.enqueue(("status", 429), ("ok", VALID_STEP), ("status", 401))
    llm = build_llm(openai_server.base_url)

    # When
    with caplog.at_level(logging.DEBUG, logger="agents.llm.openai_backend"):
        complete(llm)
        complete_error(llm)

    # Then
    records = [r for r in caplog.records if r.name == "agents.llm.openai_backend"]
    assert [r.getMessage() for r in records] == ["llm.retry", "llm.call", "llm.error"]
    assert records[1].__dict__["purpose"] == "reasoning"
    assert records[1].__dict__["attempts"] == 2
    assert all(API_KEY not in repr(r.__dict__) for r in records)


@pytest.mark.parametrize("api_key", [API_KEY, "opaque-proxy-key-0123456789"])
def test_a_401_body_echoing_the_key_never_reaches_the_error_or_the_logs(
    openai_server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture, api_key: str
) -> None:
    # Given a server that quotes the key it was sent back in its 401 body
    openai_server.enqueue(("echo_key", 401))
    llm = OpenAILLM(
        base_url=openai_server.base_url,
        api_key=api_key,
        model="test-model",
        timeout=5.0,
        max_retries=0,
        temperature=0.2,
        price_input_per_mtok=2.0,
        price_output_per_mtok=8.0,
        sleep=SleepRecorder(),
    )

    # When
    with caplog.at_level(logging.DEBUG, logger="agents.llm.openai_backend"):
        error = complete_error(llm)

    # Then the server did echo it, and the error keeps the reason but not the key
    assert api_key in openai_server.requests[0].headers["authorization"]
    assert error.status_code == 401
    assert "Incorrect API key provided: [REDACTED]" in str(error)
    assert api_key not in str(error)
    assert all(api_key not in repr(r.__dict__) for r in caplog.records)


def test_the_fake_server_answers_many_calls_at_once_on_their_first_attempt() -> None:
    """Benchmarks put hundreds of runs on this server at once: every connection must be
    accepted, not dropped from a short listen backlog (socketserver's default is 5, which
    failed or delayed by a SYN retransmission calls that a real server answers)."""

    def responder(request: object) -> tuple[str, str]:
        return ("ok", VALID_STEP)

    calls = 64
    with FakeOpenAIServer(responder=responder) as server:
        llm = build_llm(server.base_url, max_retries=0)

        async def all_at_once() -> list[LLMResponse]:
            return await asyncio.gather(
                *(
                    llm.complete(messages=MESSAGES, schema=ReasoningStep, purpose="reasoning")
                    for _ in range(calls)
                )
            )

        responses = asyncio.run(all_at_once())
    assert [r.attempts for r in responses] == [1] * calls
    assert len(server.requests) == calls
