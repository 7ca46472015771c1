"""Budgets that fit a slow local model: system checks, `ask`'s wait, the price table, and the
probe command."""

from __future__ import annotations

from concurrent.futures import Future
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agents.checks import llm_budgets_check
from agents.llm import structured
from agents.llm.factory import llm_client_build
from agents.llm.pricing import model_price
from tests.agents.runtime_helpers import use_fake_llm
from tests.fakes.openai_server import FakeOpenAIServer


def check_ids() -> set[str]:
    return {message.id or "" for message in llm_budgets_check()}


def test_the_default_budgets_are_consistent() -> None:
    assert check_ids() == set()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"LLM_CALL_BUDGET_SECONDS": 10, "LLM_TIMEOUT_SECONDS": 30}, "agents.E101"),
        ({"LLM_CALL_BUDGET_SECONDS": 200}, "agents.E102"),
        ({"LLM_CALL_BUDGET_SECONDS": 100, "REFLEXION_SOFT_TIME_LIMIT": 90}, "agents.E103"),
        ({"ASK_REFLEXION_WAIT_SECONDS": 60}, "agents.E104"),
        ({"AGENT_RUN_HARD_TIME_LIMIT": 120}, "agents.E105"),
        ({"LLM_STRUCTURED_OUTPUT": "grammar"}, "agents.E106"),
        ({"LLM_MAX_TOKENS": {"reasoning": 0}}, "agents.E107"),
    ],
)
def test_inconsistent_budgets_are_named(
    settings: Any, overrides: dict[str, Any], expected: str
) -> None:
    for name, value in overrides.items():
        setattr(settings, name, value)
    assert expected in check_ids()


@pytest.mark.parametrize(
    ("model", "base_url", "expected"),
    [
        ("gpt-4o-mini", None, (0.15, 0.60, "table:gpt-4o-mini")),
        ("gpt-4o-2024-08-06", "https://api.openai.com/v1", (2.5, 10.0, "table:gpt-4o")),
        ("gpt-4o-mini", "http://127.0.0.1:8080/v1", (0.0, 0.0, "local")),
        ("SmolLM2-135M-Instruct", "http://localhost:8081/v1", (0.0, 0.0, "local")),
        ("qwen", "http://10.1.2.3:8000/v1", (0.0, 0.0, "local")),
        ("some-hosted-model", "https://llm.example.com/v1", (0.0, 0.0, "unknown")),
    ],
)
def test_price_table(model: str, base_url: str | None, expected: tuple) -> None:
    price = model_price(model, base_url=base_url)
    assert (price.input_per_mtok, price.output_per_mtok, price.source) == expected


def test_price_settings_override_the_table(settings: Any) -> None:
    settings.LLM_BACKEND = "openai"
    settings.LLM_MODEL = "SmolLM2"
    settings.LLM_BASE_URL = "http://127.0.0.1:1/v1"
    settings.LLM_PRICE_INPUT_PER_MTOK = 1.0
    client = llm_client_build()
    assert client.price_input_per_mtok == 1.0  # type: ignore[attr-defined]
    settings.LLM_PRICE_INPUT_PER_MTOK = None
    assert llm_client_build().price_input_per_mtok == 0.0  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_ask_names_the_refusal_and_does_not_wait_forever_for_reflexion(
    support_agent: Any, settings: Any, tmp_path: Path
) -> None:
    from policies import tasks

    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(tmp_path / "probe.json")
    structured._memory.clear()  # no dialect remembered from an earlier test's server
    settings.ASK_REFLEXION_WAIT_SECONDS = 0.2
    slow_reflexion: Future[None] = Future()
    tasks._pending.append(slow_reflexion)
    out = StringIO()
    try:
        with FakeOpenAIServer(flavour="llama_cpp") as server:
            use_fake_llm(settings, server)
            settings.LLM_STRUCTURED_OUTPUT = "json_schema"
            call_command("ask", "Where is my order #W1234567?", stdout=out)
    finally:
        slow_reflexion.set_result(None)
        tasks._pending.clear()
    text = out.getvalue()
    assert "LLM_ERROR: reasoning: the LLM server rejected the structured-output request" in text
    assert "status: failed (LLM_ERROR)" in text
    assert "reflexion: still running after 0.2 s" in text


def test_llm_probe_prints_and_caches_the_dialect(settings: Any, tmp_path: Path) -> None:
    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(tmp_path / "probe.json")
    structured._memory.clear()
    with FakeOpenAIServer(flavour="llama_cpp") as server:
        use_fake_llm(settings, server)
        settings.LLM_STRUCTURED_OUTPUT = "auto"
        first, second = StringIO(), StringIO()
        call_command("llm_probe", stdout=first)
        requests = len(server.requests)
        call_command("llm_probe", stdout=second)
    assert "dialect: json_object (probed now)" in first.getvalue()
    assert "json_schema  HTTP 500" in first.getvalue()
    assert "dialect: json_object (cached in" in second.getvalue()
    assert len(server.requests) == requests


def test_llm_probe_needs_the_openai_backend() -> None:
    with pytest.raises(CommandError, match="LLM_BACKEND=openai"):
        call_command("llm_probe")
