"""The runtime's HTTP clients share one TLS context: a new context loads the CA bundle (55-75
ms of CPU), which once set the pace of every run on a busy worker."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from agents.http_clients import tls_context, tool_http_client
from agents.llm.schemas import ReasoningStep
from tests.agents.llm.test_openai_backend import MESSAGES, build_llm
from tests.fakes.openai_server import FakeOpenAIServer, openai_server_fixture  # noqa: F401

VALID_STEP = '{"thought": "add", "action": "final_answer", "final_answer": "4"}'


@pytest.fixture
def ca_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every CA bundle loaded into an SSL context from now on."""
    tls_context()  # the process's context exists before the test counts
    loads: list[Any] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    return loads


def test_model_calls_load_no_certificate_bundle(
    ca_loads: list[Any], openai_server: FakeOpenAIServer
) -> None:
    # given a model server, and the process's TLS context already built
    openai_server.enqueue(*[("ok", VALID_STEP)] * 3)
    llm = build_llm(openai_server.base_url)
    # when three model calls are made, each with its own client
    for _ in range(3):
        asyncio.run(llm.complete(messages=MESSAGES, schema=ReasoningStep, purpose="reasoning"))
    # then no call built a TLS context of its own
    assert len(openai_server.requests) == 3
    assert ca_loads == []


def test_tool_clients_share_the_process_context(ca_loads: list[Any]) -> None:
    async def two() -> None:
        async with tool_http_client() as first, tool_http_client() as second:
            assert first is not second

    asyncio.run(two())
    assert ca_loads == []
    assert tls_context() is tls_context()
