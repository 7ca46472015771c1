"""Customer-facing text never shows internal codes or exception text."""

from __future__ import annotations

import pytest

from agents.customer_text import INTERNAL_CODES, customer_text_clean, shows_internal_codes


@pytest.mark.parametrize(
    ("text", "expected", "removed"),
    [
        (
            "Sorry, I could not look up order #W1001549 right now: the service failed twice "
            "(CONNECTION_ERROR). Please try again in a few minutes.",
            "Sorry, I could not look up order #W1001549 right now: the service failed twice. "
            "Please try again in a few minutes.",
            ("CONNECTION_ERROR",),
        ),
        (
            "I could not find order #W1: it was not found (404 RESOURCE_NOT_FOUND). Please check.",
            "I could not find order #W1: it was not found. Please check.",
            ("404 RESOURCE_NOT_FOUND",),
        ),
        (
            "The lookup failed with TIMEOUT, sorry.",
            "The lookup failed with a timeout, sorry.",
            ("TIMEOUT",),
        ),
        ("The tool said SSRF_BLOCKED.", "The tool said a technical problem.", ("SSRF_BLOCKED",)),
        ("The price service failed (503).", "The price service failed.", ("503",)),
        (
            "It failed: httpx.ConnectError: [Errno 111] Connection refused. Please try later.",
            "Please try later.",
            ("It failed: httpx.ConnectError: [Errno 111] Connection refused.",),
        ),
        (
            # A tool's name, as the model named the one it lacked (a disabled tool)
            "Sorry, I can't look that up right now: the tool I would need (check_inventory) "
            "is not available to me.",
            "Sorry, I can't look that up right now: the tool I would need is not available to me.",
            ("check_inventory",),
        ),
        (
            "I could not reach `get_order` just now.",
            "I could not reach that service just now.",
            ("get_order",),
        ),
        (
            "Traceback (most recent call last): boom.\nYour order is on its way.",
            "Your order is on its way.",
            ("Traceback (most recent call last): boom.",),
        ),
    ],
)
def test_codes_and_exception_text_are_taken_out(
    text: str, expected: str, removed: tuple[str, ...]
) -> None:
    cleaned = customer_text_clean(text)
    assert cleaned.text == expected
    assert cleaned.removed == removed
    assert shows_internal_codes(text)
    assert not shows_internal_codes(cleaned.text)


def test_a_snake_case_value_an_observation_showed_is_kept() -> None:
    text = "Use the code (summer_sale) or `summer_sale` at checkout."
    cleaned = customer_text_clean(text, observations=['{"promo_code":"summer_sale"}'])
    assert (cleaned.text, cleaned.removed) == (text, ())


def test_values_an_observation_showed_are_data_not_codes() -> None:
    text = "Use the code SAVE_10 at checkout; it is listed in USD (USD)."
    cleaned = customer_text_clean(text, observations=['{"promo_code":"SAVE_10"}'])
    assert cleaned.text == text
    assert cleaned.removed == ()


def test_a_taxonomy_code_is_removed_even_when_an_observation_contains_it() -> None:
    cleaned = customer_text_clean(
        "It failed: RATE_LIMITED.", observations=['{"error":"RATE_LIMITED"}']
    )
    assert "RATE_LIMITED" not in cleaned.text


def test_every_error_type_is_an_internal_code() -> None:
    from traces.models import ErrorType

    assert set(ErrorType.values) <= INTERNAL_CODES
