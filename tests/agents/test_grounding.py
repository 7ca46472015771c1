"""The grounding check behind HALLUCINATED_ANSWER, and the outcome an accepted answer gives."""

from __future__ import annotations

import pytest

from agents.grounding import LookupHistory, answer_judge
from traces.models import Trace

ORDER_QUERY = "Where is my order #W1234567?"
ORDER_OBSERVATION = (
    '{"order_id":"#W1234567","status":"shipped","carrier":"UPS",'
    '"tracking_number":"1Z999AA10123456784","estimated_delivery":"2026-12-04T00:00:00Z"}'
)
JUNK_QUERY = "x" * 4000


def short_id(value: object) -> str | None:
    return value[:40] if isinstance(value, str) else None


def judge(
    answer: str,
    *,
    query: str = ORDER_QUERY,
    observations: tuple[str, ...] = (),
    last_call_error: str = "",
    latest_error: str = "",
) -> tuple[str, str, str]:
    verdict = answer_judge(
        query=query,
        answer=answer,
        history=LookupHistory(
            observations=list(observations),
            successful_calls=len(observations),
            last_call_error=last_call_error,
            latest_error=latest_error or last_call_error,
        ),
    )
    return verdict.reason, verdict.outcome, verdict.error_type


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("where is order 1001549", "What is your order id?"),
        (
            "where is order 1001549",
            "I can help with your order. Could you tell me your order number? "
            "It looks like #W1234567.",
        ),
        (ORDER_QUERY, "Which order do you mean, the one from last week or another one?"),
        (JUNK_QUERY, "Sorry, I did not understand that. Could you rephrase your question?"),
        (
            "Where is my order?",
            "I couldn't find an order number in your message. Please send it, e.g. #W1234567.",
        ),
    ],
    ids=short_id,
)
def test_a_clarifying_question_is_accepted_whatever_the_request(query: str, answer: str) -> None:
    assert judge(answer, query=query) == ("", Trace.Outcome.ASKED_CUSTOMER, "")


@pytest.mark.parametrize(
    ("query", "answer", "fact"),
    [
        # the 4,000-character junk request that got an invented refund decision
        (
            JUNK_QUERY,
            "Your order is eligible for a return; you will get a refund within 3 business days.",
            "3 business days",
        ),
        (JUNK_QUERY, "Good news: your order is eligible for a return.", "eligible"),
        (JUNK_QUERY, "Your refund has been approved.", "refund has"),
        (JUNK_QUERY, "Your order was delivered to your neighbour.", "delivered"),
        (JUNK_QUERY, "Your order shipped yesterday.", "yesterday"),
        ("hello", "Your package is in transit.", "in transit"),
        ("hello", "The jacket costs $49.99.", "$49.99"),
        ("hello", "You can return any item within thirty days.", "thirty days"),
        ("hello", "It will arrive on December 5.", "December 5"),
        ("Is the jacket $20?", "Yes, the jacket is $20.", "$20"),
        (ORDER_QUERY, "Order #W7654321 was delivered.", "W7654321"),
        (ORDER_QUERY, "I could not check it, but order #W1234567 was delivered.", "delivered"),
        (ORDER_QUERY, "Yes, it's available now, sorry for the delay.", "available"),
        (ORDER_QUERY, "Order #W1234567 is on its way. Could you confirm your email?", "on its way"),
    ],
    ids=short_id,
)
def test_a_stated_fact_no_observation_backs_is_rejected_whatever_the_request(
    query: str, answer: str, fact: str
) -> None:
    reason, outcome, _ = judge(answer, query=query)
    assert fact in reason
    assert outcome == ""


@pytest.mark.parametrize(
    ("answer", "fact"),
    [
        ("Order #W1234567 shipped with tracking 1Z999AA10123456785.", "1Z999AA10123456785"),
        ("Order #W1234567 will arrive on 2026-12-05.", "2026-12-05"),
        ("Order #W1234567 will arrive on December 5th.", "December 5th"),
        ("Order #W1234567 was cancelled.", "cancelled"),
        ("Order #W1234567 shipped; you paid $1.", "$1"),
        ("Order #W1234567 holds 3 items.", "3"),
    ],
)
def test_a_fact_that_differs_from_the_observation_is_rejected(answer: str, fact: str) -> None:
    reason, _, _ = judge(answer, observations=(ORDER_OBSERVATION,))
    assert fact in reason


@pytest.mark.parametrize(
    "answer",
    [
        'Order #W1234567 has status "shipped". It ships with UPS, tracking number '
        "1Z999AA10123456784. Estimated delivery: 2026-12-04.",
        "Your order #W1234567 has shipped and should arrive on December 4.",
        "Order W1234567 is in transit with UPS.",
    ],
)
def test_facts_from_the_observation_are_an_answer_from_data(answer: str) -> None:
    assert judge(answer, observations=(ORDER_OBSERVATION,)) == (
        "",
        Trace.Outcome.ANSWERED_FROM_DATA,
        "",
    )


def test_amounts_must_match_a_whole_number_of_the_observation() -> None:
    observation = '{"sku":"AWH-2041-BLK","price":"129.99","final_price":"116.99"}'
    query = "How much is AWH-2041-BLK?"
    ok = judge(
        "AWH-2041-BLK costs $129.99, now $116.99 with a promotion.",
        query=query,
        observations=(observation,),
    )
    wrong = judge("AWH-2041-BLK costs $1.", query=query, observations=(observation,))
    assert ok[1] == Trace.Outcome.ANSWERED_FROM_DATA
    assert "$1" in wrong[0]


@pytest.mark.parametrize(
    "answer",
    [
        "Sorry, I could not look up order #W1234567 right now: the service failed twice. "
        "Please try again in a few minutes.",
        "I couldn't retrieve order #W1234567, our system is temporarily unavailable.",
        "Order #W1234567 was not found. Could you check the number?",
        "Something went wrong on our side; please try again in 10 minutes.",
        # A knowledge-base search that failed: "search" is a lookup too (it was "answered
        # without needing data")
        "Sorry, I could not search our help articles: the request was rejected.",
        "I wasn't able to query the returns policy just now.",
    ],
)
def test_an_answer_admitting_the_failed_latest_lookup_is_a_failure_with_its_error_type(
    answer: str,
) -> None:
    assert judge(answer, last_call_error="CONNECTION_ERROR") == (
        "",
        Trace.Outcome.FAILED,
        "CONNECTION_ERROR",
    )


def test_giving_up_without_any_lookup_is_a_failure() -> None:
    reason, outcome, error_type = judge(
        "Sorry, I can't look that up right now: the tool I would need is not available to me."
    )
    assert (reason, outcome, error_type) == ("", Trace.Outcome.FAILED, "UNKNOWN")


def test_an_empty_search_after_successful_calls_is_still_an_answer_from_data() -> None:
    reason, outcome, _ = judge(
        'I could not find a product matching "Zephyr Kettle".',
        query="How much is the Zephyr Kettle?",
        observations=('{"results":[]}',),
    )
    assert (reason, outcome) == ("", Trace.Outcome.ANSWERED_FROM_DATA)


def test_a_data_request_is_not_answered_without_a_successful_call() -> None:
    reason, _, _ = judge("Thanks for reaching out, I am happy to help!")
    assert "needs shop data" in reason


@pytest.mark.parametrize(
    "answer",
    [
        "Hello! I can look up orders, prices and returns for you.",
        "Our support team is available around the clock.",
    ],
)
def test_an_answer_stating_nothing_to_a_request_needing_no_data_is_accepted(answer: str) -> None:
    assert judge(answer, query="hi") == ("", Trace.Outcome.ANSWERED_WITHOUT_DATA, "")


def test_a_relative_date_dates_a_shop_event_only() -> None:
    dated = judge("Order #W1234567 shipped yesterday.", observations=('{"status":"shipped"}',))
    conversation = judge(
        "Sorry, I cannot look up order #W1234567 today.", last_call_error="TIMEOUT"
    )
    assert "yesterday" in dated[0]
    assert conversation == ("", Trace.Outcome.FAILED, "TIMEOUT")


def test_numbered_list_markers_and_advice_are_not_facts() -> None:
    answer = "To pay:\n1. Open the order.\n2. Pay 116.99. Or try again in 5 minutes."
    reason, outcome, _ = judge(
        answer, query="how do I pay", observations=('{"final_price":"116.99"}',)
    )
    assert (reason, outcome) == ("", Trace.Outcome.ANSWERED_FROM_DATA)


PRICED_ORDER = (
    '{"order_id":"#W1234567","status":"delivered","total":1249.5,"currency":"USD",'
    '"shipping":{"estimated_delivery":"2026-11-27","delivered_at":"2026-11-28T23:30:00Z"}}'
)


def judge_styled(answer: str, *, locale: str, time_zone: str = "UTC") -> str:
    return answer_judge(
        query=ORDER_QUERY,
        answer=answer,
        history=LookupHistory(observations=[PRICED_ORDER], successful_calls=1),
        locale=locale,
        time_zone=time_zone,
    ).reason


@pytest.mark.parametrize(
    ("answer", "locale", "time_zone"),
    [
        ("Order #W1234567 was delivered on November 28, 2026.", "en_US", "UTC"),
        ("Order #W1234567 was delivered on 28 November 2026, 23:30 UTC.", "en_GB", "UTC"),
        ("Order #W1234567 was delivered on 11/28/2026 at 11:30 PM.", "en_US", "UTC"),
        ("Order #W1234567 was delivered on 28.11.2026.", "de_DE", "UTC"),
        # the instant is the 29th in Berlin: the customer's zone decides the day
        (
            "Order #W1234567 was delivered on 29. November 2026, 00:30 MEZ.",
            "de_DE",
            "Europe/Berlin",
        ),
        ("La commande #W1234567 a été livrée le 29 novembre 2026.", "fr_FR", "Europe/Paris"),
        ("Order #W1234567 was delivered on 2026年11月28日.", "ja_JP", "UTC"),
        ("Order #W1234567 cost $1,249.50.", "en_US", "UTC"),
        ("Order #W1234567 cost US$1,249.50.", "en_GB", "UTC"),
        ("Order #W1234567 cost 1.249,50\xa0$.", "de_DE", "UTC"),
        ("Order #W1234567 cost 1\u202f249,50\xa0$US.", "fr_FR", "UTC"),
        ("Order #W1234567 cost USD 1249.50.", "en_US", "UTC"),
    ],
)
def test_true_facts_written_in_the_customers_style_are_accepted(
    answer: str, locale: str, time_zone: str
) -> None:
    assert judge_styled(answer, locale=locale, time_zone=time_zone) == ""


@pytest.mark.parametrize(
    ("answer", "locale", "fact"),
    [
        ("Order #W1234567 was delivered on November 29, 2026.", "en_US", "November 29, 2026"),
        ("Order #W1234567 was delivered on 28 November 2025.", "en_GB", "28 November 2025"),
        ("Order #W1234567 was delivered on 12/11/2026.", "en_US", "12/11/2026"),
        ("Order #W1234567 was delivered on 30. November 2026.", "de_DE", "30. November 2026"),
        ("Order #W1234567 was delivered at 9:15 PM.", "en_US", "9:15 PM"),
        ("Order #W1234567 was delivered on 2026年11月29日.", "ja_JP", "2026年11月29日"),
        ("Order #W1234567 cost $1,294.50.", "en_US", "$1,294.50"),
        ("Order #W1234567 cost 1.294,50\xa0$.", "de_DE", "1.294,50"),
        # the right number in another currency is another price
        ("Order #W1234567 cost €1,249.50.", "en_US", "USD"),
        ("Order #W1234567 cost 1249.50 GBP.", "en_US", "USD"),
    ],
)
def test_invented_facts_written_in_the_customers_style_are_rejected(
    answer: str, locale: str, fact: str
) -> None:
    assert fact in judge_styled(answer, locale=locale)
