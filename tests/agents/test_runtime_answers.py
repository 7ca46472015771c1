"""Final answers reach the customer readable, and each rewritten fact points at its step.

The model is scripted over the real OpenAI wire protocol; the tool is a real in-process
tool; steps go to the real database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.answer_format import Evidence
from agents.models import Tool
from agents.runtime import RunMemory
from agents.services import run_execute
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    reason,
    reflect,
    tools_registered,
    use_fake_llm,
)
from traces.models import Trace
from traces.records import StepRecord
from traces.services import trace_create

LAMP = {
    "sku": "HDL-1188-OAT",
    "product_name": "Hearthly Desk Lamp",
    "price": 1249.5,
    "currency": "EUR",
    "restock_date": "2026-12-15T09:00:00Z",
    "warehouse_count": 3,
}


@declared_tool(
    name="lamp_details",
    description="Test tool: price and restock date of one SKU.",
    params_schema={
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
        "additionalProperties": False,
    },
)
def lamp_details(*, sku: str) -> dict[str, Any]:
    return {**LAMP, "sku": sku}


@pytest.fixture
def module_tools() -> Iterator[None]:
    """This module's tools, registered for one test at a time (never at import)."""
    with tools_registered(lamp_details):
        yield


@pytest.fixture
def agent(
    module_tools: None, db: None, error_rules: None, settings: Any, openai_server: Any
) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    # Key fields that name neither the currency nor the product: the pipeline keeps them.
    Tool.objects.filter(name="lamp_details").update(key_fields=["sku", "price", "restock_date"])
    return agent


def run(agent: Any, *, locale: str = "", time_zone: str = "") -> Trace:
    trace = trace_create(
        agent_id=agent.pk,
        query="How much is HDL-1188-OAT and when is it back?",
        llm_backend="openai",
        locale=locale,
        time_zone=time_zone,
    )
    async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    return trace


@pytest.mark.parametrize(
    ("locale", "time_zone", "expected"),
    [
        (
            "",
            "",
            "Hearthly Desk Lamp (HDL-1188-OAT) costs €1,249.50 and is back on "
            "December 15, 2026, 9:00\u202fAM UTC.",
        ),
        (
            "de-DE",
            "Europe/Berlin",
            "Hearthly Desk Lamp (HDL-1188-OAT) costs 1.249,50\xa0€ and is back on "
            "15. Dezember 2026, 10:00 MEZ.",
        ),
    ],
)
def test_the_answer_is_rewritten_in_the_customers_style_with_facts_on_the_final_step(
    agent: Any, openai_server: Any, locale: str, time_zone: str, expected: str
) -> None:
    # given a model that copies the raw values of the observation into its answer
    openai_server.enqueue(
        reason("lamp_details", {"sku": "HDL-1188-OAT"}),
        reflect(True),
        answer("HDL-1188-OAT costs 1249.5 and is back on 2026-12-15T09:00:00Z."),
    )
    # when the run ends for a customer with this style
    trace = run(agent, locale=locale, time_zone=time_zone)
    # then the customer reads names, a local date and a price with its currency
    assert trace.status == Trace.Status.FINISHED
    assert trace.final_answer == expected
    final = trace.steps.get(phase="final")
    assert final.response_summary == expected
    observation = trace.steps.get(phase="action", tool_name="lamp_details")
    # and every rewritten fact names the step whose observation holds it
    facts = final.details["facts"]
    assert [(f["kind"], f["value"], f["field"]) for f in facts] == [
        ("product", "HDL-1188-OAT", "product_name"),
        ("amount", "1249.5 EUR", "price"),
        ("date", "2026-12-15T09:00:00Z", "restock_date"),
    ]
    assert {f["step"] for f in facts} == {observation.step_number}
    assert all(f["text"] in expected for f in facts)


def test_the_prompt_tells_the_model_the_customers_style(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(answer("Hello! How can I help?"))

    run(agent, locale="fr-FR", time_zone="Europe/Paris")

    prompt = openai_server.requests[0].json["messages"][-1]["content"]
    assert "- locale: fr-FR" in prompt
    assert "- time zone: Europe/Paris" in prompt
    assert "never raw ISO timestamps" in prompt


def test_an_invented_price_in_readable_form_is_still_rejected(
    agent: Any, openai_server: Any
) -> None:
    # given a model that writes a nicely formatted price the tool never returned
    openai_server.enqueue(
        reason("lamp_details", {"sku": "HDL-1188-OAT"}),
        reflect(True),
        answer("The Hearthly Desk Lamp costs €1,149.50."),
        answer("The Hearthly Desk Lamp costs 1249.5."),
    )
    # when
    trace = run(agent)
    # then the invented price is rejected and the true one reaches the customer readable
    rejected = trace.steps.get(phase="action", action_type="final_answer", ok=False)
    assert "€1,149.50" in rejected.error_detail
    # a rejected answer names no tool, and keeps the text that was refused
    assert rejected.tool_name == ""
    assert rejected.details["rejected"] is True
    assert rejected.details["rejected_answer"] == "The Hearthly Desk Lamp costs €1,149.50."
    assert trace.final_answer == "The Hearthly Desk Lamp costs €1,249.50."


def test_memory_rebuilt_from_recorded_steps_keeps_the_step_of_each_observation() -> None:
    # given the records of a run as a redelivered task reads them back
    memory = RunMemory()
    records = [
        StepRecord(phase="reasoning", round_number=1, tool_name="lamp_details", step_number=1),
        StepRecord(
            phase="action",
            round_number=1,
            action_type="tool",
            tool_name="lamp_details",
            response_summary='{"sku":"HDL-1188-OAT","price":1249.5,"currency":"EUR"}',
            step_number=2,
        ),
        StepRecord(phase="reflection", round_number=1, step_number=3),
    ]
    # when they are applied
    for record in records:
        memory.apply(record)
    # then the observation the final answer may cite still names its step
    assert memory.evidence == [Evidence(2, records[1].response_summary)]
