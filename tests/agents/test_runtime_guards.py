"""The reasoning guards in the running loop: a thought stating a fact nothing shown to the
model holds (UNGROUNDED_THOUGHT) and a fake reflection (FAKE_REFLECTION) are recorded as
failed steps with their own error types and sent back once, and the learning loop turns
them into a prompt hint that its replay verifies.

Scripted model output over the real OpenAI wire protocol, real in-process tools, the real
database, the real classifier rules and the real Reflexion engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.runtime import RuntimeConfig
from agents.services import runtime_config
from policies.models import Strategy
from policies.reflexion import failures_of_trace, reflexion_run, trace_needs_reflexion
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    phases,
    reason,
    reflect,
    tools_registered,
    use_fake_llm,
)
from traces.models import Step, Trace
from traces.services import trace_create

CALLS: list[str] = []
BROKEN = {"on": False}
QUERY = "Where is my order W1234567?"


@declared_tool(
    name="order_lookup",
    description="Test tool: an order's status and carrier by its code.",
    params_schema={
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
        "additionalProperties": False,
    },
)
def order_lookup(*, code: str) -> dict[str, Any]:
    CALLS.append(code)
    if BROKEN["on"]:
        raise ConnectionError("[Errno 111] Connection refused")
    return {"code": code, "status": "shipped", "carrier": "UPS"}


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any) -> Iterator[Any]:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    CALLS.clear()
    BROKEN["on"] = False
    with tools_registered(order_lookup):
        agent = agent_ensure_default()
        tools_sync(agents=[agent])
        yield agent
    BROKEN["on"] = False


def run(agent: Any, query: str = QUERY, *, config: RuntimeConfig | None = None) -> Trace:
    from agents.services import run_execute

    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="openai")
    async_to_sync(run_execute)(trace_id=str(trace.pk), config=config, reflect=False)
    trace.refresh_from_db()
    return trace


def prompts(server: Any) -> list[str]:
    """The user message of every request the model was sent, in order."""
    return [request.json["messages"][-1]["content"] for request in server.requests]


def guard_steps(trace: Trace) -> list[Step]:
    return list(
        trace.steps.filter(error_type__in=["UNGROUNDED_THOUGHT", "FAKE_REFLECTION"]).order_by(
            "step_number"
        )
    )


def config(**overrides: Any) -> RuntimeConfig:
    return RuntimeConfig(**{**runtime_config().__dict__, **overrides})


# --- the think validator -------------------------------------------------------------


def test_an_invented_id_in_a_thought_is_recorded_and_the_model_is_asked_again(
    agent: Any, openai_server: Any
) -> None:
    # given a model whose first thought names an order the customer never mentioned
    openai_server.enqueue(
        reason("order_lookup", {"code": "W7654321"}, thought="Order W7654321 is theirs."),
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        reflect(),
        answer("Order W1234567 has shipped with UPS."),
    )
    # when
    trace = run(agent)
    # then the rejected thought is a failed step of its own error type, its action never ran
    assert phases(trace) == ["reasoning", "reasoning", "action", "reflection", "reasoning", "final"]
    [rejected] = guard_steps(trace)
    assert (rejected.phase, rejected.ok, rejected.error_type) == (
        "reasoning",
        False,
        "UNGROUNDED_THOUGHT",
    )
    assert rejected.details["guard"] == "think"
    assert "W7654321" in rejected.details["unsupported"]
    assert rejected.error_detail.startswith("Thought rejected: the thought states 'W7654321'")
    assert CALLS == ["W1234567"]
    # and the second prompt shows the model the rejected thought and the correction
    second = prompts(openai_server)[1]
    assert "Action: (thought rejected)" in second
    assert "Thought: Order W7654321 is theirs." in second
    assert "Thought rejected: the thought states 'W7654321'" in second
    assert (trace.status, trace.outcome) == (Trace.Status.FINISHED, "answered_from_data")


def test_the_think_validator_sends_a_thought_back_only_once_per_run(
    agent: Any, openai_server: Any
) -> None:
    # given a model that invents the id again when asked to correct itself
    invented = reason("order_lookup", {"code": "W7654321"}, thought="Order W7654321 is theirs.")
    openai_server.enqueue(
        invented, invented, reflect(), answer("Order W7654321 has shipped with UPS.")
    )
    # when
    trace = run(agent)
    # then one rejection, and the second thought goes ahead with what the validator found
    assert len(guard_steps(trace)) == 1
    accepted = trace.steps.filter(phase="reasoning", ok=True).order_by("step_number").first()
    assert accepted is not None
    assert accepted.details["think_guard"]["reprompts_exhausted"] is True
    assert "W7654321" in accepted.details["think_guard"]["unsupported"]
    assert CALLS == ["W7654321"]
    assert len(openai_server.requests) == 4
    assert trace.status == Trace.Status.FINISHED


def test_with_no_reprompts_configured_nothing_is_sent_back(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(
        reason("order_lookup", {"code": "W7654321"}, thought="Order W7654321 is theirs."),
        reflect(),
        answer("Order W7654321 has shipped with UPS."),
    )
    trace = run(agent, config=config(think_reprompts_max=0))
    assert guard_steps(trace) == []
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]


def test_thoughts_built_from_the_request_and_the_observations_go_through(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        reason(
            "order_lookup",
            {"code": "W1234567"},
            thought="The customer asks where W1234567 is; 1st lookup, 2 rounds at most.",
        ),
        reflect(),
        reason(
            "final_answer",
            {},
            thought='The lookup says "shipped" with UPS for W1234567, so I answer.',
            final_answer="Order W1234567 has shipped with UPS.",
        ),
    )
    trace = run(agent)
    assert guard_steps(trace) == []
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]
    assert len(openai_server.requests) == 3


def test_a_thought_may_cite_why_a_tool_call_was_refused(agent: Any, openai_server: Any) -> None:
    # given a call the tool's schema refuses, and a thought that quotes the refusal
    openai_server.enqueue(
        reason("order_lookup", {"code": 1234567}, thought="They ask about W1234567."),
        reason(
            "order_lookup",
            {"code": "W1234567"},
            thought='The call was refused: code must be a "string", so I send "W1234567".',
        ),
        reflect(),
        answer("Order W1234567 has shipped with UPS."),
    )
    trace = run(agent)
    rejected = trace.steps.filter(phase="action", ok=False).get()
    assert "string" in rejected.error_detail
    assert guard_steps(trace) == []
    assert CALLS == ["W1234567"]


# --- the fake-reflection detector ----------------------------------------------------

FAKE = ("ok", json.dumps({"expectation_met": True, "likely_cause": "", "next": "continue"}))
REAL = (
    "ok",
    json.dumps(
        {
            "expectation_met": False,
            "likely_cause": "INTERNAL_SERVER_ERROR: the lookup refused the connection",
            "next": "switch",
        }
    ),
)
SORRY = "I could not look that order up right now; please try again later."


def test_a_reflection_claiming_success_after_a_failed_call_is_recorded_and_rewritten(
    agent: Any, openai_server: Any
) -> None:
    # given a lookup that fails and a model that reflects as if it had worked
    BROKEN["on"] = True
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        FAKE,
        REAL,
        answer(SORRY),
    )
    # when
    trace = run(agent)
    # then the fake reflection is a failed step of its own type, and a second one was asked
    assert phases(trace) == [
        "reasoning",
        "action",
        "reflection",
        "reflection",
        "reasoning",
        "final",
    ]
    [fake] = guard_steps(trace)
    assert (fake.phase, fake.ok, fake.error_type) == ("reflection", False, "FAKE_REFLECTION")
    assert any("says the expectation was met" in p for p in fake.details["problems"])
    assert fake.details["rejected"]["expectation_met"] is True
    kept = trace.steps.filter(phase="reflection", ok=True).get()
    assert kept.details["expectation_met"] is False
    # and the rewrite's prompt carried the rejected reply and the correction
    rewrite = prompts(openai_server)[2]
    assert "## Correction" in rewrite
    assert '"expectation_met": true' in rewrite
    assert "Reflection rejected: it says the expectation was met" in rewrite
    # the next reasoning prompt shows the kept reflection, not the fake one
    assert (
        "Reflection: expectation_met=false; cause=INTERNAL_SERVER_ERROR"
        in (prompts(openai_server)[3])
    )
    assert (trace.status, trace.outcome) == (Trace.Status.FAILED, "failed")


def test_a_rejected_reflection_is_quoted_back_in_the_customer_s_own_script(
    agent: Any, openai_server: Any
) -> None:
    # The correction quotes the rejected reply as it was written, not as \u escapes.
    BROKEN["on"] = True
    cause = "Bestellung gefunden — alles gut"
    fake = ("ok", json.dumps({"expectation_met": True, "likely_cause": cause, "next": "continue"}))
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        fake,
        REAL,
        answer(SORRY),
    )

    run(agent)

    rewrite = prompts(openai_server)[2]
    assert "## Correction" in rewrite
    assert f'"likely_cause": "{cause}"' in rewrite


def test_an_unparseable_reply_is_shown_to_the_model_as_such(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(("ok", "Sure! Let me look that up."), answer(SORRY))

    run(agent)

    retry = prompts(openai_server)[1]
    assert "Action: (unparseable output) {}" in retry


def test_a_second_fake_reflection_is_kept_and_the_run_goes_on(
    agent: Any, openai_server: Any
) -> None:
    BROKEN["on"] = True
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        FAKE,
        FAKE,
        answer(SORRY),
    )
    trace = run(agent)
    assert len(guard_steps(trace)) == 1
    kept = trace.steps.filter(phase="reflection", ok=True).get()
    assert kept.details["reflection_guard"]["reprompts_exhausted"] is True
    assert len(openai_server.requests) == 4
    assert trace.outcome == "failed"  # the answer admits the failed lookup


def test_a_run_that_died_after_a_rejected_reflection_asks_again_with_the_correction(
    agent: Any, openai_server: Any
) -> None:
    # given a run whose worker died right after recording the fake reflection
    BROKEN["on"] = True
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        FAKE,
        REAL,
        answer(SORRY),
    )
    trace = run(agent)
    keep = guard_steps(trace)[0].step_number
    trace.steps.filter(step_number__gt=keep).delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="", outcome="")
    openai_server.requests.clear()
    # when it is delivered again
    openai_server.enqueue(FAKE, answer(SORRY))
    from agents.services import run_execute

    async_to_sync(run_execute)(trace_id=str(trace.pk), reflect=False)
    trace.refresh_from_db()
    # then the reflection is asked for again with the recorded correction, the used
    # re-prompt is counted (the second fake one is kept), and the tool is not called again
    assert "Reflection rejected: it says the expectation was met" in prompts(openai_server)[0]
    assert len(guard_steps(trace)) == 1
    kept = trace.steps.filter(phase="reflection", ok=True).get()
    assert kept.details["reflection_guard"]["reprompts_exhausted"] is True
    assert CALLS == ["W1234567"]
    assert trace.is_terminal


def test_an_honest_reflection_on_a_failure_is_not_sent_back(agent: Any, openai_server: Any) -> None:
    BROKEN["on"] = True
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        REAL,
        answer(SORRY),
    )
    trace = run(agent)
    assert guard_steps(trace) == []
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]


# --- feeding the loop ----------------------------------------------------------------


def test_a_rejected_thought_is_learned_as_a_prompt_hint_that_the_replay_verifies(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    # given a run whose thought the validator rejected
    settings.REVIEW_AUTO_MERGE = False
    openai_server.enqueue(
        reason("order_lookup", {"code": "W7654321"}, thought="Order W7654321 is theirs."),
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        reflect(),
        answer("Order W1234567 has shipped with UPS."),
    )
    trace = run(agent)
    # then the failure is learnable
    assert trace_needs_reflexion(trace)
    [facts] = failures_of_trace(trace)
    assert (facts.error_type, facts.tool) == ("UNGROUNDED_THOUGHT", "order_lookup")
    # when Reflexion runs, its replay re-runs the request with the hint (a grounded model)
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        reflect(),
        answer("Order W1234567 has shipped with UPS."),
    )
    before = len(openai_server.requests)
    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=False)
    # then a prompt hint for the guard's error type passed its gates and its replay
    assert record.outcome == "added", record.reason
    assert record.origin == "analyzer:reasoning_guard"
    strategy = Strategy.objects.get(pk=record.strategy_id)
    assert (strategy.kind, strategy.error_type) == ("prompt_hint", "UNGROUNDED_THOUGHT")
    assert strategy.branch["error_type"] == "UNGROUNDED_THOUGHT"
    assert "W7654321" in strategy.root_cause
    assert strategy.replay_status == "passed"
    # and the replayed run's prompt carried the hint
    replay_prompt = prompts(openai_server)[before]
    assert strategy.branch["text"] in replay_prompt


def test_a_replay_that_repeats_the_fake_reflection_is_not_published(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    settings.REVIEW_AUTO_MERGE = False
    BROKEN["on"] = True
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        FAKE,
        REAL,
        answer(SORRY),
    )
    trace = run(agent)
    [facts] = [f for f in failures_of_trace(trace) if f.error_type == "FAKE_REFLECTION"]
    assert facts.step_number == guard_steps(trace)[0].step_number
    # the replayed model ignores the hint and fakes its reflection again
    openai_server.enqueue(
        reason("order_lookup", {"code": "W1234567"}, thought="They ask about W1234567."),
        FAKE,
        REAL,
        answer(SORRY),
    )
    records = reflexion_run(trace_id=str(trace.pk), auto_approve=False)
    fake = next(r for r in records if r.error_type == "FAKE_REFLECTION")
    assert fake.outcome == "rejected"
    assert "FAKE_REFLECTION again" in fake.reason
    assert not Strategy.objects.filter(error_type="FAKE_REFLECTION").exists()
