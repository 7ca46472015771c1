"""The answer-formatting step: readable dates, prices and product names, each traced."""

from __future__ import annotations

import json

import pytest

from agents.answer_format import (
    AnswerStyle,
    Evidence,
    Fact,
    answer_format,
    answer_style,
    style_problem,
)

ORDER = Evidence(
    4,
    json.dumps(
        {
            "order_id": "#W1234567",
            "status": "delivered",
            "placed_at": "2026-11-20T09:15:00+00:00",
            "items": [
                {
                    "sku": "SWH-2041-BLK",
                    "product_name": "Sonora Wireless Headphones",
                    "quantity": 2,
                    "unit_price": 129.99,
                }
            ],
            "total": 259.98,
            "shipping": {
                "estimated_delivery": "2026-11-27",
                "delivered_at": "2026-11-28T23:30:00Z",
            },
            "currency": "USD",
        },
        separators=(",", ":"),
    ),
)
PRICE = Evidence(
    7,
    '{"sku":"CNC-3310-SGE","price":1249.5,"final_price":1124.55,"currency":"EUR",'
    '"product_name":"Casa Nord Coffee Grinder"}',
)
US = AnswerStyle()


def formatted(answer: str, *evidence: Evidence, style: AnswerStyle = US) -> str:
    return answer_format(answer=answer, evidence=evidence, style=style).text


@pytest.mark.parametrize(
    ("answer", "style", "expected"),
    [
        ("Estimated delivery: 2026-11-27.", US, "Estimated delivery: November 27, 2026."),
        (
            "Estimated delivery: 2026-11-27.",
            AnswerStyle("en_GB", "Europe/London"),
            "Estimated delivery: 27 November 2026.",
        ),
        (
            "Estimated delivery: 2026-11-27.",
            AnswerStyle("de_DE", "Europe/Berlin"),
            "Estimated delivery: 27. November 2026.",
        ),
        # "Z", an offset, and the customer's zone moving the instant to the next day
        (
            "Delivered 2026-11-28T23:30:00Z.",
            US,
            "Delivered November 28, 2026, 11:30\u202fPM UTC.",
        ),
        (
            "Delivered 2026-11-28T23:30:00Z.",
            AnswerStyle("de_DE", "Europe/Berlin"),
            "Delivered 29. November 2026, 00:30 MEZ.",
        ),
        (
            "Placed 2026-11-20T09:15:00+00:00.",
            AnswerStyle("en_US", "America/New_York"),
            "Placed November 20, 2026, 4:15\u202fAM EST.",
        ),
        # a date the model cut from an observed timestamp still traces to it
        ("Placed on 2026-11-20.", US, "Placed on November 20, 2026."),
    ],
)
def test_iso_dates_and_timestamps_are_written_in_the_customers_style(
    answer: str, style: AnswerStyle, expected: str
) -> None:
    assert formatted(answer, ORDER, style=style) == expected


def test_an_iso_value_no_observation_holds_is_left_alone() -> None:
    answer = "It was delivered on 2026-11-29T08:00:00Z."
    assert formatted(answer, ORDER) == answer


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        (US, "The grinder costs €1,249.50, now €1,124.55."),
        (AnswerStyle("de_DE"), "The grinder costs 1.249,50\xa0€, now 1.124,55\xa0€."),
        (AnswerStyle("fr_FR"), "The grinder costs 1\u202f249,50\xa0€, now 1\u202f124,55\xa0€."),
    ],
)
def test_bare_amounts_get_the_observed_currency_in_the_locales_format(
    style: AnswerStyle, expected: str
) -> None:
    answer = "The grinder costs 1249.5, now 1124.55."
    assert formatted(answer, PRICE, style=style) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "Order #W1234567 holds 2 items.",  # a quantity, not money
        "It costs 99.99.",  # no observation gives this amount
        "It costs €259.98.",  # already written with its currency
        "It costs 259.98 USD.",
        "Take 10% off.",
    ],
)
def test_numbers_that_are_not_observed_bare_amounts_are_left_alone(answer: str) -> None:
    assert formatted(answer, ORDER) == answer


def test_an_amount_without_a_currency_in_its_observation_stays_a_number() -> None:
    evidence = Evidence(3, '{"order_id":"#W1234567","refund_amount":42.5}')
    assert formatted("You will get 42.5 back.", evidence) == "You will get 42.5 back."


def test_a_sku_an_observation_maps_to_a_product_gets_its_name() -> None:
    answer = "SWH-2041-BLK is in stock: 12 available."
    assert formatted(answer, ORDER) == (
        "Sonora Wireless Headphones (SWH-2041-BLK) is in stock: 12 available."
    )


def test_a_product_name_comes_from_the_product_above_its_variants() -> None:
    search = Evidence(
        3,
        '{"results":[{"product_id":"P0004","name":"Hearthly Desk Lamp",'
        '"skus":[{"sku":"HDL-1188-OAT","color":"Oat"}]}]}',
    )
    assert formatted("HDL-1188-OAT is out of stock.", search) == (
        "Hearthly Desk Lamp (HDL-1188-OAT) is out of stock."
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Sonora Wireless Headphones (SWH-2041-BLK) is in stock.",  # already named
        "The Sonora Wireless Headphones, SKU SWH-2041-BLK, are in stock.",
        "Sonora Wireless Headphones cost $129.99 and SWH-2041-BLK is in stock.",
        "ABC-1234-XYZ is in stock.",  # no observation maps it
    ],
)
def test_a_sku_is_renamed_only_when_mapped_and_not_named_already(answer: str) -> None:
    assert formatted(answer, ORDER) == answer


def test_a_name_that_belongs_to_a_person_is_not_taken_for_a_product() -> None:
    evidence = Evidence(
        2, '{"user_id":"U00000001","name":"Ada Lovelace","orders":[{"sku":"SWH-2041-BLK"}]}'
    )
    assert formatted("SWH-2041-BLK shipped.", evidence) == "SWH-2041-BLK shipped."


def test_each_rewritten_fact_names_its_step_and_field() -> None:
    answer = "SWH-2041-BLK cost 129.99 each, 259.98 in total; delivered 2026-11-28T23:30:00Z."

    result = answer_format(answer=answer, evidence=[PRICE, ORDER], style=US)

    assert result.text == (
        "Sonora Wireless Headphones (SWH-2041-BLK) cost $129.99 each, $259.98 in total; "
        "delivered November 28, 2026, 11:30\u202fPM UTC."
    )
    assert result.facts == (
        Fact("Sonora Wireless Headphones", "SWH-2041-BLK", "product", 4, "items.product_name"),
        Fact("$129.99", "129.99 USD", "amount", 4, "items.unit_price"),
        Fact("$259.98", "259.98 USD", "amount", 4, "total"),
        Fact(
            "November 28, 2026, 11:30\u202fPM UTC",
            "2026-11-28T23:30:00Z",
            "date",
            4,
            "shipping.delivered_at",
        ),
    )


def test_a_cut_observation_still_traces_its_dates() -> None:
    cut = Evidence(5, '{"order_id":"#W1234567","estimated_delivery":"2026-12-03","…[truncated')

    result = answer_format(answer="Expected 2026-12-03.", evidence=[cut], style=US)

    assert result.text == "Expected December 3, 2026."
    assert result.facts == (
        Fact("December 3, 2026", "2026-12-03", "date", 5, "estimated_delivery"),
    )


@pytest.mark.parametrize(
    ("locale", "time_zone", "problem"),
    [
        ("de-DE", "Europe/Berlin", ""),
        ("", "", ""),
        ("xx-nowhere", "", "unknown locale"),
        ("", "Mars/Olympus", "unknown time zone"),
    ],
)
def test_style_settings_are_checked(locale: str, time_zone: str, problem: str) -> None:
    found = style_problem(locale=locale, time_zone=time_zone)
    assert (problem in found) if problem else found == ""


def test_an_unusable_style_falls_back_to_the_defaults() -> None:
    assert answer_style(locale="xx-nowhere", time_zone="Mars/Olympus") == AnswerStyle()
    assert answer_style(locale="de-DE", time_zone="Europe/Berlin") == AnswerStyle(
        "de_DE", "Europe/Berlin"
    )


def test_facts_the_model_already_wrote_for_the_customer_are_traced_as_written() -> None:
    answer = (
        "Your Sonora Wireless Headphones cost $259.98 in total and arrived on "
        "November 28, 2026 (expected 11/27/2026)."
    )

    result = answer_format(answer=answer, evidence=[ORDER], style=US)

    assert result.text == answer
    assert result.facts == (
        Fact(
            "Sonora Wireless Headphones",
            "SWH-2041-BLK",
            "product",
            4,
            "items.product_name",
            rewritten=False,
        ),
        Fact("$259.98", "259.98 USD", "amount", 4, "total", rewritten=False),
        Fact(
            "November 28, 2026",
            "2026-11-28T23:30:00Z",
            "date",
            4,
            "shipping.delivered_at",
            rewritten=False,
        ),
        Fact("11/27/2026", "2026-11-27", "date", 4, "shipping.estimated_delivery", rewritten=False),
    )


@pytest.mark.parametrize(
    "answer",
    [
        "It cost €259.98.",  # the right number in another currency
        "It arrived on November 30, 2026.",  # a day no observation holds
    ],
)
def test_written_values_no_observation_holds_are_not_traced(answer: str) -> None:
    assert answer_format(answer=answer, evidence=[ORDER], style=US).facts == ()


def test_a_product_named_without_any_number_is_traced() -> None:
    result = answer_format(
        answer="The sonora wireless headphones are in stock.", evidence=[ORDER], style=US
    )

    assert [(f.text, f.value, f.step) for f in result.facts] == [
        ("sonora wireless headphones", "SWH-2041-BLK", 4)
    ]
