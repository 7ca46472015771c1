"""Intent detection of a customer request."""

from __future__ import annotations

import pytest

from agents.intents import Intent, intent_detect


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
