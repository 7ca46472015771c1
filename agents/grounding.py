"""The grounding check of a final answer, and how a run that ends with it turned out.

A final answer *states facts* when a declarative sentence of it names an identifier, a
number (an amount, a quantity, a duration, a percentage), a date, or a status or decision
that only the shop's data can tell (shipped, delivered, in stock, eligible for a return,
refunded, cancelled, will arrive...). Every stated fact must be backed by the evidence:

- identifiers may come from the request or the customer id (echoing the customer's own
  order number is fine) or from a successful observation;
- every other fact must come from a successful observation. The request does not count:
  a customer who asks "is it $20?" has not told the agent the price, and a long request
  cannot turn invented facts into supported ones.

Questions are not statements: "Has it shipped?" states nothing. Format examples ("it looks
like #W1234567") are not facts either. Clauses that only suppose ("whether it was
delivered", "once it ships") claim nothing.

With the facts checked, an accepted answer is one of: a question asking the customer for
missing information (``asked_customer``), an admission that a lookup failed (``failed``),
an answer backed by tool results (``answered_from_data``), or an answer that needed no
data (``answered_without_data``). A request that needs shop data is never answered
without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from agents.intents import DATA_INTENTS, intent_detect
from traces.models import ErrorType, Trace

Outcome = Trace.Outcome


@dataclass(frozen=True)
class LookupHistory:
    """What the run's tool calls produced, as the grounding check needs it."""

    observations: list[str]  # the summaries of successful calls
    successful_calls: int = 0
    last_call_error: str = ""  # error type of the latest tool call when it failed
    latest_error: str = ""  # error type of the latest failed tool call, if any


@dataclass(frozen=True)
class Verdict:
    """``reason`` is set when the answer is rejected; otherwise the outcome it gives."""

    reason: str = ""
    outcome: str = ""
    error_type: str = ""

    @property
    def accepted(self) -> bool:
        return not self.reason


def _normal(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'")


# --- sentences and clauses -------------------------------------------------------------
# Not after "e.g." or "i.e.": the example that follows belongs to the same sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)\s+|\n+", re.I)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _statements(text: str) -> list[str]:
    """The declarative sentences; a question states nothing."""
    return [s for s in _sentences(text) if not s.rstrip().endswith("?")]


_EXAMPLE_MARKER = re.compile(
    r"\b(looks? like|e\.g\.?|for example|for instance|such as|in the (?:form|format) of?|"
    r"formatted like|something like|like this)\W*$",
    re.I,
)
_SUPPOSITION = re.compile(
    r"\b(whether|if|once|when|whenever|until|unless|as soon as|in case|before|after)\b", re.I
)
_CLAUSE_BREAK = re.compile(r"[,;:\u2014]|\b(but|and|so|because|however)\b", re.I)


def _is_example(sentence: str, start: int) -> bool:
    return bool(_EXAMPLE_MARKER.search(sentence[max(0, start - 40) : start]))


def _supposed(sentence: str, start: int) -> bool:
    """Whether the words at ``start`` sit in a clause that only supposes them."""
    before = sentence[:start]
    breaks = list(_CLAUSE_BREAK.finditer(before))
    clause = before[breaks[-1].end() :] if breaks else before
    return bool(_SUPPOSITION.search(clause))


# --- facts ---------------------------------------------------------------------------
_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+Z?)?\b")
_NAMED_DATE = re.compile(
    rf"\b(?:{_MONTH}\s+(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?|"
    rf"(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?)\b",
    re.I,
)
_RELATIVE_DATE = re.compile(
    r"\b(today|tomorrow|yesterday|tonight|this (?:week|weekend)|next (?:week|month)|"
    r"(?:on|by|this|next) (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
    re.I,
)
# A relative date is a fact when it dates something the shop does ("arrives tomorrow"),
# not when it dates the conversation ("I cannot check that today").
_SHOP_EVENT = re.compile(
    r"\b(arriv\w*|deliver\w*|ship\w*|dispatch\w*|refund\w*|restock\w*|return\w*|"
    r"cancel\w*|process(?:ed)?|available|back in stock|on sale)\b",
    re.I,
)
# An identifier: letters and digits (or a long digit run), as order, user, SKU and
# tracking ids are, whatever their exact format.
_IDENTIFIER = re.compile(
    r"#?\b(?:[A-Za-z]+[-_]?\d[\w-]*|\d+[A-Za-z][\w-]*|\d{5,})\b"
    r"|#\d{3,}\b"
)
_AMOUNT = re.compile(
    r"(?:[$€£]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?(?:%|percent\b|usd\b|eur\b|gbp\b|"
    r"dollars?\b|euros?\b|pounds?\b))",
    re.I,
)
# "1." or "2)" opening a list item numbers the list, it states nothing.
_LIST_MARKER = re.compile(r"\d{1,2}[.)](?:\s|$)")
_DURATION = re.compile(
    r"\b\d+(?:\.\d+)?\s+(?:(?:business|working|calendar)\s+)?"
    r"(?:days?|weeks?|months?|years?|hours?|minutes?)\b",
    re.I,
)
_ADVICE = re.compile(r"\b(?:try again|retry|check back|wait)(?: in| for| about)?\W*$", re.I)
_NUMBER = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?![\w]|\.\d)")
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fourteen": 14,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "forty-five": 45,
    "sixty": 60,
    "ninety": 90,
}
_WORD_QUANTITY = re.compile(
    r"\b(" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")\s+"
    r"(?:(?:business|working|calendar)\s+)?(days?|weeks?|months?|years?|hours?|units?|items?|"
    r"pieces?)\b",
    re.I,
)

# Statuses and decisions only the shop's data can tell, and the words an observation
# must contain to back them (as a field name or a value).
_CLAIMS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"\b(delivered|out for delivery)\b", re.I), ("deliver",)),
    (
        re.compile(r"\b(shipped|dispatched|in transit|on (?:its|the) way|has left)\b", re.I),
        ("ship", "transit", "dispatch", "deliver", "carrier", "tracking"),
    ),
    (re.compile(r"\b(cancell?ed)\b", re.I), ("cancel",)),
    (
        re.compile(r"\b(in stock|out of stock|sold out|back in stock|restock\w*)\b", re.I),
        ("stock", "avail", "inventor", "quantit", "qty", "on_hand"),
    ),
    (
        # Availability of a product, not of a person or a service ("our team is available").
        re.compile(
            r"\b(?:it|they|item|items|product|products|size|sizes|colou?r|model)"
            r"(?:'s|'re| is| are) (?:currently |now |still )?(?:un)?available\b|"
            r"\bavailable (?:now|again|to (?:order|buy)|for (?:purchase|order|delivery))\b",
            re.I,
        ),
        ("stock", "avail", "inventor", "quantit", "qty", "on_hand"),
    ),
    (re.compile(r"\b((?:not |in)?eligible|qualif(?:y|ies) for)\b", re.I), ("eligib",)),
    (
        re.compile(
            r"\b(refunded|(?:get|receive|issue|process|approve)d? (?:a |your |the |full )?refund|"
            r"refund (?:has|was|is|will)|will be refunded)\b",
            re.I,
        ),
        ("refund",),
    ),
    (
        re.compile(
            r"\breturn (?:has been|was|is) (?:approved|accepted|authori[sz]ed|received)\b", re.I
        ),
        ("return",),
    ),
    (
        re.compile(
            r"\b(will arrive|arrives|should arrive|expected (?:to arrive|delivery))\b", re.I
        ),
        ("deliver", "arriv", "eta", "estimated", "expected"),
    ),
    (
        re.compile(r"\b(on sale|discounted|promotion applies|(?:\w+ )?off the price)\b", re.I),
        ("discount", "promo", "sale", "final_price"),
    ),
]


def _numbers_in(text: str) -> set[Decimal]:
    found = set()
    for match in _NUMBER.findall(text):
        try:
            found.add(Decimal(match.replace(",", "")))
        except InvalidOperation:
            continue
    return found


def _number_of(text: str) -> Decimal | None:
    digits = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    if digits is None:
        return None
    try:
        return Decimal(digits.group(0).replace(",", ""))
    except InvalidOperation:
        return None


def _token_in(token: str, evidence: str) -> bool:
    token = token.lstrip("#")
    return bool(re.search(rf"(?<![\w.]){re.escape(token)}(?![\w]|\.\d)", evidence, re.I))


def _date_supported(match: re.Match[str], observations: str) -> bool:
    text = match.group(0)
    if _ISO_DATE.fullmatch(text):
        return text[:10] in observations
    day = int(match.group("d1") or match.group("d2"))
    month = next(
        number for name, number in _MONTHS.items() if re.search(rf"\b{name}\b", text, re.I)
    )
    return f"-{month:02d}-{day:02d}" in observations or text.lower() in observations.lower()


def unsupported_fact(
    *, answer: str, query: str, observations: list[str], customer_id: str = ""
) -> str:
    """The first fact ``answer`` states that the evidence does not back, described; or ""."""
    seen = "\n".join(observations)
    asked = f"{query}\n{customer_id}"
    seen_numbers = _numbers_in(seen)
    for sentence in _statements(_normal(answer)):
        reason = _sentence_unsupported(sentence, asked=asked, seen=seen, numbers=seen_numbers)
        if reason:
            return reason
    return ""


def _sentence_unsupported(sentence: str, *, asked: str, seen: str, numbers: set[Decimal]) -> str:
    covered = bytearray(len(sentence))

    def fresh(match: re.Match[str]) -> bool:
        """Not part of a fact already checked, and not a format example."""
        start, end = match.span()
        if any(covered[start:end]):
            return False
        covered[start:end] = b"\x01" * (end - start)
        return not _is_example(sentence, start)

    def absent(what: str) -> str:
        return f"the answer states {what!r}, which no observation contains"

    for pattern in (_ISO_DATE, _NAMED_DATE):
        for match in pattern.finditer(sentence):
            if fresh(match) and not _date_supported(match, seen):
                return absent(match.group(0))
    for match in _RELATIVE_DATE.finditer(sentence):
        if (
            fresh(match)
            and _SHOP_EVENT.search(sentence)
            and not _supposed(sentence, match.start())
            and not (_ISO_DATE.search(seen) or _NAMED_DATE.search(seen))
        ):
            return f"the answer says {match.group(0)!r}, but no observation has a date"
    for match in _AMOUNT.finditer(sentence):
        if fresh(match) and _number_of(match.group(0)) not in numbers:
            return absent(match.group(0))
    for match in _IDENTIFIER.finditer(sentence):
        token = match.group(0)
        if fresh(match) and not (_token_in(token, asked) or _token_in(token, seen)):
            return absent(token)
    for match in _DURATION.finditer(sentence):
        # "try again in 10 minutes" is advice about the agent, not a fact about the shop.
        advice = _ADVICE.search(sentence[: match.start()])
        if fresh(match) and not advice and _number_of(match.group(0)) not in numbers:
            return absent(match.group(0))
    for match in _WORD_QUANTITY.finditer(sentence):
        value = Decimal(_NUMBER_WORDS[match.group(1).lower()])
        if fresh(match) and value not in numbers:
            return absent(match.group(0))
    for match in _NUMBER.finditer(sentence):
        if _LIST_MARKER.match(sentence[match.start() :]) and not sentence[: match.start()].strip():
            continue
        if fresh(match) and Decimal(match.group(0).replace(",", "")) not in numbers:
            return absent(match.group(0))
    for pattern, backing in _CLAIMS:
        for match in pattern.finditer(sentence):
            if _supposed(sentence, match.start()) or _is_example(sentence, match.start()):
                continue
            if not any(word in seen.lower() for word in backing):
                return f"the answer says {match.group(0)!r}, which no observation supports"
    return ""


# --- what the answer does ------------------------------------------------------------
_ASKS = re.compile(
    r"\b(?:could|can|would|will) you (?:please |kindly |also )?(?:tell|give|send|share|provide|"
    r"confirm|check|double-check|let me know|clarify|specify|rephrase|describe|explain|"
    r"include|reply with|paste)\b|"
    r"\bplease (?:tell|give|send|share|provide|confirm|check|double-check|let me know|clarify|"
    r"specify|rephrase|describe|include|reply with)\b|"
    r"\b(?:may|can|could) I (?:have|get|ask)\b|"
    r"\b(?:I|we) (?:will |would )?need (?:your|the|an?|more|some)\b|"
    r"\bdo you have (?:your|the|an?)\b|"
    r"\bwhich (?:one|order|product|item|of)\b|"
    r"\bwhat(?:'s| is| was| are)? (?:your|the (?:order|product|item|email|name|number))\b",
    re.I,
)
_FAILED_LOOKUP = re.compile(
    r"\b(?:(?:could|was|were|did|am|is|are)(?: not|n'?t)|can(?:not| not|'?t)|unable to|"
    r"failed to)\b[^.!?,;:]{0,40}?"
    r"\b(?:look|find|check|retrieve|get|fetch|access|reach|load|verify|confirm|complete|"
    r"process|pull|see|open|obtain|connect)\w*|"
    r"\b(?:service|system|tool|server|lookup|database|api)s? (?:is |are |was |were )?"
    r"(?:currently |temporarily |still )?(?:unavailable|down|not available|not responding|"
    r"failing|failed|having (?:problems|issues|trouble))|"
    r"\btry again (?:later|in)\b|\bsomething went wrong\b|"
    r"\b(?:technical|temporary) (?:issue|problem|difficult|error|glitch)|"
    r"\bnot (?:be )?found\b",
    re.I,
)


def asks_customer(answer: str) -> bool:
    """Whether the answer asks the customer for information it needs."""
    return bool(_ASKS.search(_normal(answer)))


def reports_failed_lookup(answer: str) -> bool:
    """Whether the answer tells the customer that something could not be looked up."""
    return bool(_FAILED_LOOKUP.search(_normal(answer)))


def answer_judge(
    *, query: str, answer: str, history: LookupHistory, customer_id: str = ""
) -> Verdict:
    """Reject an answer that states unsupported facts; otherwise say how the run ended.

    The order matters: an answer admitting that the latest lookup failed is a failure even
    when it also asks the customer something; a question is an accepted outcome whatever
    the request; a data request with no successful lookup cannot be answered.
    """
    if not answer.strip():
        return Verdict(reason="the final answer is empty")
    reason = unsupported_fact(
        answer=answer, query=query, observations=history.observations, customer_id=customer_id
    )
    if reason:
        return Verdict(reason=reason)
    failed = reports_failed_lookup(answer)
    if failed and history.last_call_error:
        return Verdict(outcome=Outcome.FAILED, error_type=history.last_call_error)
    if asks_customer(answer):
        return Verdict(outcome=Outcome.ASKED_CUSTOMER)
    if failed and history.successful_calls == 0:
        return Verdict(
            outcome=Outcome.FAILED, error_type=history.latest_error or ErrorType.UNKNOWN.value
        )
    if history.successful_calls:
        return Verdict(outcome=Outcome.ANSWERED_FROM_DATA)
    intent = intent_detect(query)
    if intent in DATA_INTENTS:
        return Verdict(
            reason=f"the request ({intent.value}) needs shop data but no tool call succeeded"
        )
    return Verdict(outcome=Outcome.ANSWERED_WITHOUT_DATA)
