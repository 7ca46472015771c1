"""Keyword intent detection of a customer request.

Used by the grounding check (``agents.grounding``: a data request is never answered without
a tool result) and to choose the mode (ReAct or Self-RAG) that serves the request.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Intent(StrEnum):
    ORDER_STATUS = "order_status"
    RETURNS = "returns"
    PRICE = "price"
    STOCK = "stock"
    POLICY = "policy"
    UNKNOWN = "unknown"


# Intents whose answer states shop data (order, price, stock) that only a tool can supply.
DATA_INTENTS = frozenset({Intent.ORDER_STATUS, Intent.RETURNS, Intent.PRICE, Intent.STOCK})

_PATTERNS: list[tuple[Intent, re.Pattern[str]]] = [
    (Intent.RETURNS, re.compile(r"\b(return|refund|send (it )?back|exchange)\b", re.I)),
    (
        Intent.STOCK,
        re.compile(r"\b(in stock|stock|available|availability|inventory|sold out)\b", re.I),
    ),
    (
        Intent.PRICE,
        re.compile(r"\b(price|cost|costs|how much|cheaper|discount|promo|compare)\b", re.I),
    ),
    (
        Intent.ORDER_STATUS,
        re.compile(
            r"#?W\d{7}\b|\b(order|tracking|shipped|delivery|deliver|arrive|package)\b", re.I
        ),
    ),
    (Intent.POLICY, re.compile(r"\b(policy|policies|warranty|how long|can i|payment|faq)\b", re.I)),
]


# Ids that tie a question to one order, customer or SKU: then it is not a general question.
_ENTITY = re.compile(r"#?W\d{7}\b|\bU\d{8}\b|\b[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}\b")
_GENERAL = re.compile(
    r"\b(policy|policies|warranty|faq|how (long|many days|soon)|do you (accept|offer|ship)|"
    r"what is your)\b",
    re.I,
)


def intent_detect(query: str) -> Intent:
    """The first matching intent in priority order; UNKNOWN when nothing matches.

    A general question ("How long do I have to return an item?") names no order, customer
    or SKU: it is a policy question even when it mentions returns or delivery.
    """
    if _GENERAL.search(query) and not _ENTITY.search(query):
        return Intent.POLICY
    for intent, pattern in _PATTERNS:
        if pattern.search(query):
            return intent
    return Intent.UNKNOWN
