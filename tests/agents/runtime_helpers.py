"""Helpers for runtime tests: script the fake OpenAI server and run one trace."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from asgiref.sync import async_to_sync

from agents.runtime import RunOutcome, RuntimeConfig
from agents.services import run_execute
from agents.tools.registry import (
    PythonToolFunc,
    ToolDefinition,
    register_tool,
    registered_python_tool,
    unregister_tool,
)
from traces.models import Trace
from traces.services import trace_create


def reason(action: str, action_input: dict[str, Any] | None = None, **extra: Any) -> tuple:
    body = {
        "thought": extra.pop("thought", "checking"),
        "action": action,
        "action_input": action_input or {},
        "expectation": "a result",
        **extra,
    }
    return ("ok", json.dumps(body))


def answer(text: str) -> tuple:
    return reason("final_answer", {}, final_answer=text)


def reflect(met: bool = True, nxt: str = "continue", cause: str = "") -> tuple:
    """A reflection reply. After a failed call give the ``cause`` the observation shows:
    one with none is a fake reflection, which the runtime sends back once."""
    return ("ok", json.dumps({"expectation_met": met, "likely_cause": cause, "next": nxt}))


def use_fake_llm(settings: Any, server: Any) -> None:
    settings.LLM_BACKEND = "openai"
    settings.LLM_BASE_URL = server.base_url
    settings.LLM_MODEL = "fake-model"
    settings.LLM_API_KEY = "test-key"
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_TIMEOUT_SECONDS = 5


def run_query(
    agent: Any, query: str, *, config: RuntimeConfig | None = None, backend: str = "openai"
) -> tuple[Trace, RunOutcome | None]:
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend=backend)
    outcome = async_to_sync(run_execute)(trace_id=str(trace.pk), config=config)
    trace.refresh_from_db()
    return trace, outcome


def phases(trace: Trace) -> list[str]:
    return list(trace.steps.order_by("step_number").values_list("phase", flat=True))


def declared_tool(
    *, name: str, description: str, params_schema: dict[str, Any], timeout_seconds: float = 3.0
) -> Callable[[PythonToolFunc], ToolDefinition]:
    """Declare an in-process test tool without registering it: ``tools_registered`` does,
    for one test at a time."""

    def decorator(func: PythonToolFunc) -> ToolDefinition:
        return ToolDefinition(
            name=name,
            description=description,
            params_schema=params_schema,
            timeout_seconds=timeout_seconds,
            func=func,
        )

    return decorator


def _register(definition: ToolDefinition) -> None:
    assert definition.func is not None
    register_tool(
        name=definition.name,
        description=definition.description,
        params_schema=definition.params_schema,
        timeout_seconds=definition.timeout_seconds or 3.0,
    )(definition.func)


@contextmanager
def tools_registered(*definitions: ToolDefinition) -> Iterator[None]:
    """Register test tools for the block, then restore the registry as it was: a test
    tool must not reach the prompt of a test that did not ask for it."""
    previous = {d.name: registered_python_tool(d.name) for d in definitions}
    for definition in definitions:
        _register(definition)
    try:
        yield
    finally:
        for name, before in previous.items():
            unregister_tool(name)
            if before is not None:
                _register(before)
