"""Paths of ``agents.services`` the runtime and tools-page tests do not take: how a run
picks Self-RAG or ReAct, an agent without its own iteration cap, a crash while spans are
exported, ``tools_sync(overwrite=True)``, the audit of a partial tool edit, and the
customer-memory cap and its preference/refusal clean-up.

Runs go through ``run_execute`` with the model scripted over the OpenAI wire protocol (the
fake server in tests/fakes); rows are read back from the real database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.memory import MAX_FACTS_PER_CUSTOMER
from agents.models import Agent, CustomerFact, KnowledgeArticle, Tool
from agents.runtime import RuntimeConfig
from agents.services import (
    customer_facts_for,
    customer_facts_learn,
    run_execute,
    runtime_config,
    tool_update,
    tools_sync,
)
from agents.tools.tool_catalog import SANDBOX_TOOLS
from reviews.models import AuditLog
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    phases,
    reason,
    reflect,
    run_query,
    tools_registered,
    use_fake_llm,
)
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db

QUESTION = "How many days do I have to return an item?"
RETURN_ANSWER = "You can return most items within 30 days of delivery."
ARTICLE = {
    "slug": "return-window",
    "title": "How long do I have to return an item?",
    "category": "policy",
    "body": "You can return most items within 30 days of delivery for a full refund.",
}

CALLS: list[int] = []


@declared_tool(
    name="paths_echo",
    description="Test tool: echoes its number.",
    params_schema={
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
)
def paths_echo(*, n: int) -> dict[str, int]:
    CALLS.append(n)
    return {"n": n}


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any) -> Iterator[Agent]:
    from agents.services import agent_ensure_default

    use_fake_llm(settings, openai_server)
    CALLS.clear()
    with tools_registered(paths_echo):
        agent = agent_ensure_default()
        tools_sync(agents=[agent])
        yield agent


# --- which loop answers a run ------------------------------------------------------------


def test_a_policy_question_is_answered_by_self_rag_from_the_published_articles(
    agent: Agent, openai_server: Any
) -> None:
    KnowledgeArticle.objects.create(**ARTICLE, is_published=True)
    openai_server.enqueue(
        ("ok", json.dumps({"answer": RETURN_ANSWER, "cited_slugs": ["return-window"]})),
        (
            "ok",
            json.dumps(
                {
                    "is_grounded": True,
                    "is_helpful": True,
                    "critique": "",
                    "improved_search_query": None,
                }
            ),
        ),
    )

    trace, outcome = run_query(agent, QUESTION)

    assert outcome is not None and outcome.status == "finished"
    assert trace.status == Trace.Status.FINISHED
    assert phases(trace) == ["retrieval", "draft", "grade", "final"]
    assert "30 days" in trace.final_answer
    assert openai_server.remaining == 0


def test_with_nothing_published_the_same_question_goes_through_react(
    agent: Agent, openai_server: Any
) -> None:
    KnowledgeArticle.objects.create(**ARTICLE, is_published=False)
    openai_server.enqueue(answer("Our support team will tell you about returns."))

    trace, _ = run_query(agent, QUESTION)

    assert trace.status == Trace.Status.FINISHED
    assert "retrieval" not in phases(trace) and phases(trace)[0] == "reasoning"
    assert trace.final_answer == "Our support team will tell you about returns."


# --- the iteration cap ---------------------------------------------------------------------


@pytest.mark.parametrize(("agent_cap", "echoed"), [(0, [1]), (2, [1, 2])])
def test_an_agent_without_a_cap_of_its_own_runs_to_the_configured_cap(
    agent: Agent, openai_server: Any, agent_cap: int, echoed: list[int]
) -> None:
    agent.max_iterations = agent_cap
    agent.save()
    openai_server.enqueue(
        reason("paths_echo", {"n": 1}), reflect(), reason("paths_echo", {"n": 2}), reflect()
    )
    config = RuntimeConfig(**{**runtime_config().__dict__, "max_iterations": 1})

    trace, _ = run_query(agent, "Keep echoing", config=config)

    assert trace.status == Trace.Status.FAILED and trace.error_type == "MAX_STEPS"
    assert phases(trace).count("reasoning") == len(echoed)
    assert echoed == CALLS
    assert openai_server.remaining == 4 - 2 * len(echoed)


# --- a crash while spans are exported ------------------------------------------------------


def test_a_crash_ends_the_run_and_its_span_with_unknown(
    agent: Agent, openai_server: Any, exported: InMemorySpanExporter
) -> None:
    openai_server.enqueue(answer("never delivered"))
    trace = trace_create(agent_id=agent.pk, query="Hello", llm_backend="openai")

    def broken_sink(step: Any) -> None:
        raise RuntimeError("live output went away")

    with pytest.raises(RuntimeError, match="live output went away"):
        async_to_sync(run_execute)(trace_id=str(trace.pk), on_step=broken_sink)

    trace.refresh_from_db()
    assert trace.status == Trace.Status.FAILED and trace.error_type == "UNKNOWN"
    assert phases(trace)[-1] == "stopped"
    stopped = trace.steps.order_by("-step_number").first()
    assert stopped is not None
    assert stopped.error_detail == "RuntimeError: live output went away"
    [run] = [s for s in exported.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert run.attributes["error.type"] == "UNKNOWN"


# --- tools ---------------------------------------------------------------------------------


def test_tools_sync_keeps_admin_edits_unless_told_to_overwrite(support_agent: Agent) -> None:
    declared = next(d for d in SANDBOX_TOOLS if d.name == "get_order")
    Tool.objects.filter(name="get_order").update(description="edited by an admin", method="POST")

    tools_sync()
    tool = Tool.objects.get(name="get_order")
    assert (tool.description, tool.method) == ("edited by an admin", "POST")

    tools_sync(overwrite=True)
    tool.refresh_from_db()
    assert tool.description == declared.description
    assert tool.method == declared.method
    assert tool.endpoint_template == declared.endpoint
    # Overwriting restores the code's definition; it does not change who may call the tool.
    assert list(tool.allowed_agents.values_list("slug", flat=True)) == [support_agent.slug]


def _edit(tool: Tool, **changes: Any) -> dict[str, Any]:
    values = {
        "description": tool.description,
        "endpoint_template": tool.endpoint_template,
        "method": tool.method,
        "timeout_seconds": tool.timeout_seconds,
        "params_schema": tool.params_schema,
        "allowed_agents": list(tool.allowed_agents.all()),
    }
    values.update(changes)
    return values


def test_a_tool_edit_audits_only_what_changed(support_agent: Agent, admin_role_user: Any) -> None:
    tool = Tool.objects.get(name="get_order")
    other = Agent.objects.create(slug="returns-bot", name="Returns bot")

    tool_update(tool_id=tool.pk, actor=admin_role_user, **_edit(tool))
    assert not AuditLog.objects.filter(action="tool.update").exists()

    tool_update(
        tool_id=tool.pk,
        actor=admin_role_user,
        **_edit(tool, allowed_agents=[support_agent, other]),
    )
    tool_update(
        tool_id=tool.pk, actor=admin_role_user, **_edit(tool, description="One order by id.")
    )

    tool.refresh_from_db()
    assert tool.description == "One order by id."
    assert sorted(tool.allowed_agents.values_list("slug", flat=True)) == ["returns-bot", "support"]
    assert list(
        AuditLog.objects.filter(action="tool.update")
        .order_by("pk")
        .values_list("details", flat=True)
    ) == [
        {"fields": [], "agents_added": ["returns-bot"], "agents_removed": []},
        {"fields": ["description"]},
    ]


# --- customer memory -----------------------------------------------------------------------


def test_at_the_cap_a_new_fact_is_dropped_but_a_known_one_is_updated(db: None) -> None:
    CustomerFact.objects.create(
        customer_id="U1", key="contact.preferred", fact="Prefers to be contacted by email."
    )
    CustomerFact.objects.bulk_create(
        CustomerFact(customer_id="U1", key=f"test.{n}", fact=f"fact {n}")
        for n in range(MAX_FACTS_PER_CUSTOMER - 1)
    )

    rows = customer_facts_learn(
        customer_id="U1", text="I prefer SMS. Please reply in German.", trace_id=None
    )

    assert [(r.key, r.fact) for r in rows] == [
        ("contact.preferred", "Prefers to be contacted by SMS.")
    ]
    assert CustomerFact.objects.filter(customer_id="U1").count() == MAX_FACTS_PER_CUSTOMER
    assert not CustomerFact.objects.filter(customer_id="U1", key="language").exists()


def test_refusing_the_preferred_channel_forgets_the_preference(db: None) -> None:
    customer_facts_learn(customer_id="U2", text="I prefer SMS", trace_id=None)
    customer_facts_learn(customer_id="U2", text="Please reply in French", trace_id=None)

    customer_facts_learn(customer_id="U2", text="Stop sending me texts.", trace_id=None)

    assert customer_facts_for(customer_id="U2") == [
        "Wants answers in French.",
        "Does not want contact by SMS.",
    ]
    # A refusal of another channel leaves the preference alone.
    customer_facts_learn(customer_id="U2", text="I prefer email", trace_id=None)
    customer_facts_learn(customer_id="U2", text="Never call me.", trace_id=None)
    assert "Prefers to be contacted by email." in customer_facts_for(customer_id="U2")
    assert customer_facts_learn(customer_id="U2", text="Hello there", trace_id=None) == []
