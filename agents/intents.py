"""Keyword intent detection of a customer request.

Used to decide whether a final answer needs a supporting tool result and, later, which
mode (ReAct or Self-RAG) serves the request.
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


# Identifiers and amounts that a grounded answer may state only if an observation showed them.
_FACT_PATTERNS = [
    re.compile(r"#W\d{7}"),
    re.compile(r"\bU\d{8}\b"),
    re.compile(r"\b[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}\b"),
    re.compile(r"\b1Z[0-9A-Z]{8,}\b"),
    re.compile(r"\$\s?\d+(?:\.\d{2})?"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
]


def answer_unsupported_reason(
    *, query: str, answer: str, observations: list[str], successful_tool_results: int
) -> str:
    """Why a final answer is not grounded in tool results; empty string when it is.

    An answer is unsupported when the request needs shop data but no tool call succeeded,
    or when it states an identifier, date or amount that neither the request nor any
    observation contains.
    """
    intent = intent_detect(query)
    if intent in DATA_INTENTS and successful_tool_results == 0:
        # Saying honestly that nothing could be retrieved is not a hallucination, as long as
        # it states no fact of its own (checked against the evidence below).
        if re.search(
            r"\b(could not|couldn't|cannot|can't|unable|not able|unavailable|not available|"
            r"not found|no order)\b",
            answer,
            re.I,
        ) and not _CLAIM_RE.search(answer):
            return _unsupported_fact(answer, query, observations)
        return f"the request ({intent.value}) needs shop data but no tool call succeeded"
    return _unsupported_fact(answer, query, observations)


# Status claims that only a tool could have told the model.
_CLAIM_RE = re.compile(
    r"\b(was|has been|is) (delivered|shipped|in stock|eligible|refunded|cancelled)\b|"
    r"\bwill (arrive|be delivered)\b",
    re.I,
)


def _unsupported_fact(answer: str, query: str, observations: list[str]) -> str:
    evidence = query + "\n" + "\n".join(observations)
    for pattern in _FACT_PATTERNS:
        for match in pattern.findall(answer) if pattern.groups == 0 else []:
            token = match.replace(" ", "").removeprefix("$")
            # Whole tokens only: "$1" is not supported by a "129.99" somewhere.
            if not re.search(rf"(?<![\w.]){re.escape(token)}(?![\w]|\.\d)", evidence):
                return f"the answer states {match!r}, which no observation contains"
    return ""
