"""The reasoning guards' detectors on their own: the think validator (seeds/000 §4.1) and
the fake-reflection detector (seeds/001 §5.4, §6.2), with the thoughts and reflections
they must accept as well as those they must reject."""

from __future__ import annotations

import pytest

from agents.grounding import thought_evidence, thought_unsupported_fact
from agents.llm.schemas import Reflection
from agents.prompts import RoundRecord
from agents.reasoning_guards import reflection_correction, reflection_problems

QUERY = "Where is my order #W1234567? I ordered it on March 3 and paid $25.50."
ORDER = (
    '{"order_id": "#W1234567", "status": "shipped", "carrier": "UPS", '
    '"tracking_number": "1Z999AA10123456784", "estimated_delivery": "2026-12-05T10:00:00Z", '
    '"total": 25.5, "currency": "USD"}'
)
NOT_FOUND = '{"error": "not_found", "detail": "no order W7654321"}'


def unsupported(thought: str, *shown: str) -> str:
    evidence = thought_evidence([QUERY, "U12345678", *shown])
    return thought_unsupported_fact(thought=thought, evidence=evidence)


# --- the think validator -------------------------------------------------------------


@pytest.mark.parametrize(
    "thought",
    [
        "The customer asks about order #W1234567; I need its status and carrier.",
        "The customer (U12345678) ordered on March 3 and paid $25.50; I check the order.",
        "The customer says it was ordered 03/03 and I still need its status.",
        "Order #W1234567 has shipped with UPS; it should arrive 2026-12-05.",
        "The total is 25.50 USD and the tracking number is 1Z999AA10123456784.",
        'The status is "shipped" per the observation.',
        "This is my 2nd attempt and I have 3 rounds left; I am 100% sure of the next step.",
        "I need to check whether the order has shipped and when it will arrive.",
        "Has it shipped? I call get_order to find out.",
        'I will ask the customer "which order do you mean".',
        "get_order answered 404 for W7654321, so that id is wrong; I ask the customer.",
        "I should try again in 10 minutes.",
        "The tool wants dates in ISO-8601 and answers errors as RFC7807 in UTF-8.",
        "",
    ],
)
def test_the_think_validator_accepts_facts_it_was_shown_and_numbers_that_state_nothing(
    thought: str,
) -> None:
    assert unsupported(thought, ORDER, NOT_FOUND) == ""


@pytest.mark.parametrize(
    ("thought", "named"),
    [
        ("Order W7654321 is the one to check.", "W7654321"),
        ("Phone orders usually ship within 24 hours.", "24 hours"),
        ("Order #W1234567 has already shipped.", "shipped"),
        ("The total is $30, so the customer overpaid.", "$30"),
        ('The status is "delivered".', "delivered"),
        ("It was delivered on 2026-11-30.", "2026-11-30"),
        ("A 20% discount applies to this order.", "20%"),
        ("The order arrives tomorrow.", "arrives"),
        ("The SKU is ELC-4821-BK.", "ELC-4821-BK"),
    ],
)
def test_the_think_validator_names_the_first_fact_nothing_shown_holds(
    thought: str, named: str
) -> None:
    reason = unsupported(thought)
    assert reason and named in reason


def test_an_observation_makes_a_fact_supported_and_the_rejection_names_no_source() -> None:
    thought = "Order #W1234567 has shipped with UPS for 25.50 USD."
    assert "shipped" in unsupported(thought)
    assert unsupported(thought, ORDER) == ""


def test_the_time_of_a_timestamp_counts_in_the_customers_zone_and_as_written() -> None:
    evidence = thought_evidence([ORDER, "Call me after 2:30 PM"], time_zone="Europe/Berlin")
    for thought in ("It should arrive at 11:00 local time.", "They asked for a call at 14:30."):
        assert thought_unsupported_fact(thought=thought, evidence=evidence) == ""
    assert "9:45" in thought_unsupported_fact(thought="It left at 9:45.", evidence=evidence)


# --- the fake-reflection detector ----------------------------------------------------


def failed_round(**overrides: object) -> RoundRecord:
    values: dict = {
        "number": 2,
        "thought": "I look the order up.",
        "action": "get_order",
        "action_input": {"order_id": "W7654321"},
        "expectation": "the order's status",
        "observation": NOT_FOUND,
        "ok": False,
        "status_code": 404,
        "error_type": "RESOURCE_NOT_FOUND",
    }
    values.update(overrides)
    return RoundRecord(**values)  # type: ignore[arg-type]


def reflection(met: bool, cause: str, nxt: str = "switch") -> Reflection:
    return Reflection(expectation_met=met, likely_cause=cause, next=nxt)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "rnd"),
    [
        (reflection(False, "404: no order W7654321 exists", "switch"), failed_round()),
        (reflection(False, "RESOURCE_NOT_FOUND: the order id is wrong", "stop"), failed_round()),
        (
            reflection(False, "the order id was not found; I ask the customer for it", "continue"),
            failed_round(),
        ),
        (
            reflection(False, "the API throttled us (429)", "continue"),
            failed_round(status_code=429, error_type="RATE_LIMITED", observation="slow down"),
        ),
        (reflection(True, "", "continue"), failed_round(ok=True, status_code=200)),
        (
            reflection(False, "the list was empty, not what I expected", "switch"),
            failed_round(ok=True, status_code=200, observation='{"orders": []}'),
        ),
    ],
)
def test_a_reflection_that_owns_the_failure_and_cites_the_observation_passes(
    reply: Reflection, rnd: RoundRecord
) -> None:
    assert reflection_problems(reply, rnd) == []


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (reflection(True, "", "continue"), "says the expectation was met"),
        (reflection(False, "", "switch"), "names no cause"),
        (
            reflection(False, "the model was careless; be more careful", "switch"),
            "cites nothing the observation shows",
        ),
        (
            reflection(False, "get_order gave a result that is overall reasonable", "switch"),
            "does not admit",
        ),
        (
            reflection(False, "404 RESOURCE_NOT_FOUND for W7654321", "continue"),
            "without saying what to do differently",
        ),
    ],
)
def test_a_reflection_that_glosses_over_a_failure_is_fake(reply: Reflection, problem: str) -> None:
    problems = reflection_problems(reply, failed_round())
    assert any(problem in p for p in problems), problems


def test_an_unmet_expectation_after_a_good_call_needs_a_cause() -> None:
    rnd = failed_round(ok=True, status_code=200, observation='{"orders": []}')
    assert reflection_problems(reflection(False, "", "switch"), rnd) == [
        "it says the expectation was not met but names no cause"
    ]


def test_the_correction_says_what_was_wrong_and_what_a_usable_reflection_holds() -> None:
    rnd = failed_round()
    problems = reflection_problems(reflection(True, "", "continue"), rnd)
    message = reflection_correction(problems, rnd)
    assert message.startswith("Reflection rejected: it says the expectation was met")
    assert "[error 404 RESOURCE_NOT_FOUND]" in message
    assert "expectation_met false" in message
