"""Intent detection and the grounding check behind HALLUCINATED_ANSWER."""

from __future__ import annotations

import pytest

from agents.intents import Intent, answer_unsupported_reason, intent_detect


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("Where is my order #W1234567?", Intent.ORDER_STATUS),
        ("Has my package shipped yet?", Intent.ORDER_STATUS),
        ("How much does the Aurora Wireless Headphones cost?", Intent.PRICE),
        ("Is the Nimbus Trail Jacket in stock?", Intent.STOCK),
        ("I want to return order #W1234567", Intent.RETURNS),
        ("What is your return policy?", Intent.POLICY),
        ("How long does international shipping take? Can I pay with PayPal?", Intent.POLICY),
        ("How many days do I have to return an item?", Intent.POLICY),
        ("How long does international delivery take?", Intent.POLICY),
        ("How long until order #W1234567 arrives?", Intent.ORDER_STATUS),
        ("hello", Intent.UNKNOWN),
    ],
)
def test_intent_detect(query: str, intent: Intent) -> None:
    assert intent_detect(query) == intent


def test_data_answer_without_any_tool_result_is_unsupported() -> None:
    reason = answer_unsupported_reason(
        query="Where is my order #W1234567?",
        answer="It shipped yesterday.",
        observations=[],
        successful_tool_results=0,
    )
    assert "no tool call succeeded" in reason


def test_honest_could_not_find_answer_is_supported() -> None:
    assert not answer_unsupported_reason(
        query="Where is my order #W1234567?",
        answer="I could not retrieve order #W1234567 right now.",
        observations=[],
        successful_tool_results=0,
    )


def test_answer_citing_an_id_absent_from_observations_is_unsupported() -> None:
    reason = answer_unsupported_reason(
        query="Where is my order #W1234567?",
        answer="Order #W1234567 shipped with tracking 1Z999AA10123456784.",
        observations=['{"order_id":"#W1234567","status":"shipped"}'],
        successful_tool_results=1,
    )
    assert "1Z999AA10123456784" in reason


def test_answer_citing_only_observed_facts_is_supported() -> None:
    assert not answer_unsupported_reason(
        query="How much is AWH-2041-BLK?",
        answer="AWH-2041-BLK costs $129.99, now $116.99 with a promotion.",
        observations=['{"sku":"AWH-2041-BLK","price":"129.99","final_price":"116.99"}'],
        successful_tool_results=1,
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Sorry for the wait! Order #W7654321 was delivered yesterday.",
        "Yes, it's available now, sorry for the delay.",
        "I could not check it, but order #W1234567 was delivered.",
    ],
)
def test_apologetic_wording_does_not_excuse_an_invented_fact(answer: str) -> None:
    assert answer_unsupported_reason(
        query="Where is my order #W1234567?",
        answer=answer,
        observations=[],
        successful_tool_results=0,
    )


def test_an_amount_must_match_a_whole_number_in_the_evidence() -> None:
    reason = answer_unsupported_reason(
        query="How much is AWH-2041-BLK?",
        answer="AWH-2041-BLK costs $1.",
        observations=['{"sku":"AWH-2041-BLK","price":129.99}'],
        successful_tool_results=1,
    )
    assert "$1" in reason
