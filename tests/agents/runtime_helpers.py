"""Helpers for runtime tests: script the fake OpenAI server and run one trace."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync

from agents.runtime import RunOutcome, RuntimeConfig
from agents.services import run_execute
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


def reflect(met: bool = True, nxt: str = "continue") -> tuple:
    return ("ok", json.dumps({"expectation_met": met, "likely_cause": "", "next": nxt}))


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
