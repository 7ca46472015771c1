"""A whole run against a llama.cpp-like server: the refusal is named in the trace and the
run's steps, never retried; with the probe the run goes through and the grammar names the
run's own tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.llm import structured
from tests.agents.runtime_helpers import answer, run_query, use_fake_llm
from tests.fakes.openai_server import FakeOpenAIServer
from traces.models import Trace


@pytest.fixture
def llama(settings: Any, tmp_path: Path) -> Any:
    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(tmp_path / "probe.json")
    structured._memory.clear()
    with FakeOpenAIServer(flavour="llama_cpp") as server:
        use_fake_llm(settings, server)
        settings.LLM_MAX_RETRIES = 3
        yield server


@pytest.fixture
def agent(db: None, error_rules: None) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    return agent


def test_json_schema_on_llama_cpp_ends_the_run_with_the_reason(
    llama: FakeOpenAIServer, agent: Any, settings: Any
) -> None:
    settings.LLM_STRUCTURED_OUTPUT = "json_schema"

    trace, _ = run_query(agent, "hello there")

    assert (trace.status, trace.error_type) == (Trace.Status.FAILED, "LLM_ERROR")
    assert len(llama.requests) == 1  # refused, so not retried
    stopped = trace.steps.get(phase="stopped")
    assert "the LLM server rejected the structured-output request: HTTP 500" in (
        stopped.error_detail
    )


def test_auto_probes_llama_cpp_and_constrains_actions_to_the_agents_tools(
    llama: FakeOpenAIServer, agent: Any, settings: Any
) -> None:
    settings.LLM_STRUCTURED_OUTPUT = "auto"
    llama.enqueue(answer("Hello! I can look up orders, prices and returns for you."))

    trace, _ = run_query(agent, "hello there")

    assert trace.status == Trace.Status.FINISHED
    reasoning = llama.requests[-1].json
    schema = reasoning["response_format"]["schema"]
    assert reasoning["response_format"]["type"] == "json_object"
    tools = set(agent.tools.values_list("name", flat=True))
    assert tools and set(schema["properties"]["action"]["enum"]) == tools | {"final_answer"}
    assert "maxLength" not in json.dumps(reasoning["response_format"])
    assert reasoning["max_tokens"] == settings.LLM_MAX_TOKENS["reasoning"]
    assert '"action": "' in reasoning["messages"][-1]["content"]
    assert "<tool name" not in reasoning["messages"][-1]["content"]


def test_a_runs_model_calls_share_one_connection_closed_when_the_run_ends(
    agent: Any, settings: Any
) -> None:
    with FakeOpenAIServer() as server:
        use_fake_llm(settings, server)
        # A reply cut short, then the answer: two model calls in the run.
        server.enqueue(("ok", '{"thought": "x", "action":'), answer("Hello! How can I help?"))

        trace, _ = run_query(agent, "hello there")

        assert trace.status == Trace.Status.FINISHED
        assert len(server.requests) == 2
        assert server.requests[0].peer == server.requests[1].peer
        assert server.connections_closed()
