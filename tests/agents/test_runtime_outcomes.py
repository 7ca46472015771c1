"""How a run ends: the outcome recorded on the trace, the status it implies, and the text the
customer gets. Scripted model output over the real OpenAI wire protocol, real in-process
tools, the real database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents.customer_text import shows_internal_codes
from agents.services import runtime_config
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

ORDERS = {"#W1001549": {"order_id": "#W1001549", "status": "shipped", "carrier": "UPS"}}
OUTAGE = {"failures_left": 0}
# An honest reflection on the outage's failed call (one without a cause is sent back).
REFUSED = "INTERNAL_SERVER_ERROR: the lookup's connection was refused"
JUNK_QUERY = "x" * 4000
INVENTED_REFUND = (
    "Your order is eligible for a return; you will get a refund within 3 business days."
)
Outcome = Trace.Outcome


@declared_tool(
    name="outcome_order_lookup",
    description="Test tool: an order by id; raises like a dropped connection during an outage.",
    params_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
)
def outcome_order_lookup(*, order_id: str) -> dict[str, Any]:
    if OUTAGE["failures_left"]:
        OUTAGE["failures_left"] -= 1
        raise ConnectionError("[Errno 111] Connection refused")
    return ORDERS[order_id]


@pytest.fixture
def module_tools() -> Iterator[None]:
    """This module's tools, registered for one test at a time (never at import)."""
    with tools_registered(outcome_order_lookup):
        yield


@pytest.fixture
def agent(
    module_tools: None, db: None, error_rules: None, settings: Any, openai_server: Any
) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    OUTAGE["failures_left"] = 0
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    yield agent
    OUTAGE["failures_left"] = 0


def lookup(order_id: str = "#W1001549") -> tuple:
    return reason("outcome_order_lookup", {"order_id": order_id})


def test_an_answer_from_an_observation_is_answered_from_data(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        lookup(), reflect(), answer('Order #W1001549 has status "shipped" with UPS.')
    )
    trace, outcome = run_query(agent, "Where is my order #W1001549?")
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FINISHED,
        Outcome.ANSWERED_FROM_DATA,
        "",
    )
    assert outcome is not None and outcome.outcome == Outcome.ANSWERED_FROM_DATA


def test_a_greeting_is_answered_without_data(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(answer("Hello! I can look up orders, prices and returns for you."))
    trace, _ = run_query(agent, "hello there")
    assert phases(trace) == ["reasoning", "final"]
    assert (trace.status, trace.outcome) == (Trace.Status.FINISHED, Outcome.ANSWERED_WITHOUT_DATA)


@pytest.mark.parametrize(
    "question",
    [
        "What is your order id?",
        "I can help with your order. Could you tell me your order number? It looks like #W1234567.",
    ],
)
def test_a_clarifying_question_for_a_data_request_is_accepted(
    agent: Any, openai_server: Any, question: str
) -> None:
    # given the request that twice got the canned fallback: an order number without "#W"
    openai_server.enqueue(answer(question))
    # when
    trace, _ = run_query(agent, "where is order 1001549")
    # then the question reaches the customer, as a success of its own kind
    assert phases(trace) == ["reasoning", "final"]
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FINISHED,
        Outcome.ASKED_CUSTOMER,
        "",
    )
    assert trace.final_answer == question
    assert not trace.steps.filter(error_type="HALLUCINATED_ANSWER").exists()


def test_an_invented_refund_for_a_long_junk_query_is_rejected_and_never_delivered(
    agent: Any, openai_server: Any
) -> None:
    # given a model that answers a 4,000-character "xxx..." request with a refund decision
    openai_server.enqueue(answer(INVENTED_REFUND), answer(INVENTED_REFUND))
    # when
    trace, _ = run_query(agent, JUNK_QUERY)
    # then both answers are rejected as hallucinated and the customer gets the fallback
    rejected = list(trace.steps.filter(phase="action").values_list("error_type", flat=True))
    assert rejected == ["HALLUCINATED_ANSWER", "HALLUCINATED_ANSWER"]
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FALLBACK,
        Outcome.HANDED_OVER,
        "HALLUCINATED_ANSWER",
    )
    assert trace.final_answer == runtime_config().fallback_reply
    assert "refund" not in trace.final_answer


def test_the_model_can_recover_from_a_rejection_by_asking(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(
        answer(INVENTED_REFUND), answer("Could you tell me which order you mean?")
    )
    trace, _ = run_query(agent, JUNK_QUERY)
    assert (trace.status, trace.outcome) == (Trace.Status.FINISHED, Outcome.ASKED_CUSTOMER)
    prompt = openai_server.requests[1].json["messages"][1]["content"]
    assert "ask the customer for what is missing" in prompt


def test_could_not_look_up_after_failed_calls_is_a_failure_without_internal_codes(
    agent: Any, openai_server: Any
) -> None:
    # given a lookup that fails twice, and a model that tells the customer so, codes and all
    OUTAGE["failures_left"] = 2
    reply = (
        "Sorry, I could not look up order #W1001549 right now: the service failed twice "
        "(CONNECTION_ERROR). Please try again in a few minutes."
    )
    openai_server.enqueue(
        lookup(),
        reflect(False, cause=REFUSED),
        lookup(),
        reflect(False, cause=REFUSED),
        answer(reply),
    )
    # when
    trace, outcome = run_query(agent, "Where is my order #W1001549?")
    # then the run is a failure with the lookup's error type, not a success
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FAILED,
        Outcome.FAILED,
        "INTERNAL_SERVER_ERROR",
    )
    # ... as the runtime itself reports it to its caller (the status its final step recorded)
    assert outcome is not None
    assert (outcome.status, outcome.outcome) == (Trace.Status.FAILED, Outcome.FAILED)
    # and the customer reads the honest answer without the code, which stays on the step
    assert trace.final_answer == (
        "Sorry, I could not look up order #W1001549 right now: the service failed twice. "
        "Please try again in a few minutes."
    )
    final = trace.steps.get(phase="final")
    assert final.details["removed_from_answer"] == ["CONNECTION_ERROR"]
    assert final.details["outcome"] == Outcome.FAILED
    reasoning = trace.steps.filter(phase="reasoning").last()
    assert reasoning is not None and "CONNECTION_ERROR" in reasoning.details["final_answer"]


def test_a_recovered_lookup_answers_from_data(agent: Any, openai_server: Any) -> None:
    # given a first call that fails and a retry that succeeds
    OUTAGE["failures_left"] = 1
    openai_server.enqueue(
        lookup(),
        reflect(False, cause=REFUSED),
        lookup(),
        reflect(),
        answer('Order #W1001549 is "shipped".'),
    )
    # when
    trace, _ = run_query(agent, "Where is my order #W1001549?")
    # then the earlier failure does not make the answer a failure
    oks = list(trace.steps.filter(phase="action").values_list("ok", flat=True))
    assert oks == [False, True]
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FINISHED,
        Outcome.ANSWERED_FROM_DATA,
        "",
    )


def test_an_answer_made_only_of_exception_text_is_rejected(agent: Any, openai_server: Any) -> None:
    leak = "ConnectionError: [Errno 111] Connection refused"
    openai_server.enqueue(answer(leak), answer(leak))
    trace, _ = run_query(agent, "hello there")
    assert (trace.status, trace.outcome) == (Trace.Status.FALLBACK, Outcome.HANDED_OVER)
    assert "internal error text" in trace.steps.filter(phase="action").first().error_detail


@pytest.mark.parametrize(
    ("script", "status", "outcome"),
    [
        ((("ok", "not json"), ("ok", "still not json")), Trace.Status.FALLBACK, "handed_over"),
        ((("status", 400),), Trace.Status.FAILED, "failed"),
    ],
)
def test_fallbacks_are_handed_over_and_stops_are_failures(
    agent: Any, openai_server: Any, script: tuple, status: str, outcome: str
) -> None:
    openai_server.enqueue(*script)
    trace, _ = run_query(agent, "hello there")
    assert (trace.status, trace.outcome) == (status, outcome)
    assert not shows_internal_codes(trace.final_answer)


def test_canned_replies_are_cleaned_too(agent: Any, openai_server: Any, settings: Any) -> None:
    settings.AGENT_FALLBACK_REPLY = "Sorry, that did not work (MODEL_FORMAT_ERROR)."
    openai_server.enqueue(("ok", "not json"), ("ok", "still not json"))
    trace, _ = run_query(agent, "hello there")
    assert trace.final_answer == "Sorry, that did not work."


def test_a_run_redelivered_after_its_final_step_keeps_the_recorded_outcome(
    agent: Any, openai_server: Any
) -> None:
    # given a run that wrote its final step but crashed before the trace was finished
    OUTAGE["failures_left"] = 1
    openai_server.enqueue(
        lookup(),
        reflect(False, cause=REFUSED),
        answer("Sorry, I could not look up order #W1001549 right now."),
    )
    trace, _ = run_query(agent, "Where is my order #W1001549?")
    Trace.objects.filter(pk=trace.pk).update(status="running", outcome="", error_type="")
    # when the task is delivered again
    from asgiref.sync import async_to_sync

    from agents.services import run_execute

    async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    # then nothing is asked of the model again and the outcome is the recorded one
    assert openai_server.remaining == 0
    assert len(openai_server.requests) == 3
    assert (trace.status, trace.outcome, trace.error_type) == (
        Trace.Status.FAILED,
        Outcome.FAILED,
        "INTERNAL_SERVER_ERROR",
    )
