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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale, UnknownLocaleError
from babel.numbers import list_currencies

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


def _statements(text: str, *, locale: str = "") -> list[str]:
    """The declarative sentences; a question states nothing."""
    return [s for s in _sentences_of(text, locale=locale) if not s.rstrip().endswith("?")]


def _sentences_of(text: str, *, locale: str) -> list[str]:
    """Sentences, keeping a day-dot date ("25. Dezember 2026") in one piece."""
    pieces = _sentences(text)
    if not locale:
        return pieces
    months = _month_names(locale)
    joined: list[str] = []
    for piece in pieces:
        first_word = re.match(r"([^\W\d_]+)\.?\s+\d{4}\b", piece)
        if (
            joined
            and re.search(r"(?<!\d)\d{1,2}\.$", joined[-1])
            and first_word
            and first_word.group(1).lower() in months
        ):
            joined[-1] = f"{joined[-1]} {piece}"
        else:
            joined.append(piece)
    return joined


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
# English month names and abbreviations -> month number (also read by bench.judge).
MONTH_NUMBERS = {
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
_MONTH = r"(?:" + "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True)) + r")\.?"
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w:])")
# An ISO value in an observation, read as an instant when it has a time and an offset.
_ISO_VALUE = re.compile(
    r"(?<![\w-])(?P<date>\d{4}-\d{2}-\d{2})(?:[T ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2})?)?"
)
# "28/11/2026", "11/28/26", "28.11.2026", "2026/11/28": the order depends on the customer.
_NUMERIC_DATE = re.compile(
    r"(?<![\w./-])(?:(?P<a>\d{1,2})(?P<sep>[/.])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2})|"
    r"(?P<y2>\d{4})/(?P<m2>\d{1,2})/(?P<d2>\d{1,2}))(?![\w/]|\.\d)"
)
# A clock time ("2:03 PM", "14:03") and a zone label ("UTC", "UTC-05:00", "+0100"), as a
# formatted timestamp shows them.
_CLOCK = re.compile(
    r"(?<![\w:.])(?P<h>\d{1,2}):(?P<m>\d{2})(?::\d{2})?(?:\s?(?P<ampm>[AaPp])\.?\s?[Mm]\.?)?"
    r"(?![\w:]|\.\d)"
)
_CJK_DATE = re.compile(r"(?P<y>\d{4})\s?年\s?(?P<m>\d{1,2})\s?月\s?(?P<d>\d{1,2})\s?日")
_ZONE_LABEL = re.compile(r"\b(?:UTC|GMT)(?:\s?[+-]\d{1,2}(?::?\d{2})?)?\b|(?<=\s)[+-]\d{4}\b")


@lru_cache(maxsize=32)
def _named_date(locale: str) -> re.Pattern[str]:
    """Dates written with a month name, in English or in the customer's language."""
    names = "|".join(map(re.escape, sorted(_month_names(locale), key=len, reverse=True)))
    return re.compile(
        rf"\b(?:(?P<m1>{names})\.?\s+(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(?P<y1>\d{{4}}))?|"
        rf"(?P<d2>\d{{1,2}})(?:st|nd|rd|th|\.)?\s+(?:of\s+|de\s+)?(?P<m2>{names})\.?"
        rf"(?:,?\s+(?:de\s+)?(?P<y2>\d{{4}}))?)(?!\w)",
        re.I,
    )


@lru_cache(maxsize=32)
def _month_names(locale: str) -> dict[str, int]:
    names = dict(MONTH_NUMBERS)
    try:
        cldr = Locale.parse(locale.replace("-", "_")) if locale else None
    except (UnknownLocaleError, ValueError):
        cldr = None
    if cldr is not None:
        for context in ("format", "stand-alone"):
            for width in ("wide", "abbreviated"):
                for number, name in cldr.months.get(context, {}).get(width, {}).items():
                    names.setdefault(str(name).lower().rstrip("."), number)
    return names


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
_NUMBER_TEXT = r"(?:\d{1,3}(?:[.,\u00a0\u202f]\d{3})+|\d+)(?:[.,]\d+)?"
_CURRENCY_CODES = frozenset(list_currencies())
# What a currency sign may stand for; a code stands for itself.
_CURRENCY_SIGNS = {
    "us$": {"USD"},
    "$us": {"USD"},
    "ca$": {"CAD"},
    "a$": {"AUD"},
    "nz$": {"NZD"},
    "hk$": {"HKD"},
    "$": {"USD", "CAD", "AUD", "NZD", "HKD", "SGD", "MXN"},
    "€": {"EUR"},
    "£": {"GBP"},
    "¥": {"JPY", "CNY"},
    "₹": {"INR"},
    "dollar": {"USD", "CAD", "AUD", "NZD", "HKD", "SGD"},
    "dollars": {"USD", "CAD", "AUD", "NZD", "HKD", "SGD"},
    "euro": {"EUR"},
    "euros": {"EUR"},
    "pound": {"GBP"},
    "pounds": {"GBP"},
}
_SIGN = r"(?:US\$|\$US|CA\$|A\$|NZ\$|HK\$|[$€£¥₹])"
_CODE = r"\b[A-Z]{3}\b"
_AMOUNT = re.compile(
    rf"(?P<pre>{_SIGN}|{_CODE})\s?(?P<n1>{_NUMBER_TEXT})|"
    rf"(?P<n2>{_NUMBER_TEXT})\s?(?P<post>{_SIGN}|{_CODE}|(?i:dollars?|euros?|pounds?)\b)"
)
_PERCENT = re.compile(rf"(?P<number>{_NUMBER_TEXT})\s?(?:%|percent\b)", re.I)
_OBSERVED_CURRENCY = re.compile(r'"currency(?:_code)?"\s*:\s*"([A-Za-z]{3})"')
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


def _number_readings(text: str) -> set[Decimal]:
    """What a written number can mean: "1.299,90" and "1,299.90" are both 1299.90.

    A single separator before exactly three digits ("1,299") may group thousands or mark
    decimals depending on the customer's locale, so both readings count.
    """
    digits = re.sub(r"[\s\u00a0\u202f]", "", text)
    separators = [c for c in digits if c in ".,"]
    readings: list[str] = []
    if not separators:
        readings = [digits]
    elif len(set(separators)) == 2:
        decimal_mark = separators[-1]
        grouping = "," if decimal_mark == "." else "."
        readings = [digits.replace(grouping, "").replace(decimal_mark, ".")]
    elif len(separators) > 1:
        readings = [digits.replace(separators[0], "")]
    else:
        head, _, tail = digits.replace(",", ".").partition(".")
        readings = [f"{head}.{tail}"] + ([head + tail] if len(tail) == 3 else [])
    found = set()
    for reading in readings:
        try:
            found.add(Decimal(reading))
        except InvalidOperation:
            continue
    return found


def _token_in(token: str, evidence: str) -> bool:
    token = token.lstrip("#")
    return bool(re.search(rf"(?<![\w.]){re.escape(token)}(?![\w]|\.\d)", evidence, re.I))


@dataclass
class _Evidence:
    """The observations, and the dates, times, numbers and currencies they state."""

    text: str
    numbers: set[Decimal]
    dates: set[date] = field(default_factory=set)
    clocks: set[tuple[int, int]] = field(default_factory=set)
    currencies: set[str] = field(default_factory=set)


def _evidence(observations: list[str], *, time_zone: str) -> _Evidence:
    text = "\n".join(observations)
    evidence = _Evidence(text=text, numbers=_numbers_in(text))
    evidence.currencies = {code.upper() for code in _OBSERVED_CURRENCY.findall(text)}
    try:
        zone = ZoneInfo(time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    for match in _ISO_VALUE.finditer(text):
        try:
            evidence.dates.add(date.fromisoformat(match.group("date")))
        except ValueError:
            continue
        if not match.group("time"):
            continue
        hours, minutes = (int(part) for part in match.group("time").split(":")[:2])
        evidence.clocks.add((hours, minutes))
        offset = match.group("zone") or ""
        if not offset:
            continue
        offset = "+00:00" if offset == "Z" else offset
        try:
            moment = datetime.fromisoformat(f"{match.group('date')}T{match.group('time')}{offset}")
        except ValueError:
            continue
        # The customer reads an instant in their own time zone, which may be another day.
        local = moment.astimezone(zone)
        evidence.dates.add(local.date())
        evidence.clocks.add((local.hour, local.minute))
    return evidence


def _iso_date_supported(text: str, evidence: _Evidence) -> bool:
    return text[:10] in evidence.text


def _named_date_supported(match: re.Match[str], evidence: _Evidence, locale: str) -> bool:
    day = int(match.group("d1") or match.group("d2"))
    name = (match.group("m1") or match.group("m2")).lower().rstrip(".")
    month = _month_names(locale)[name]
    year = match.group("y1") or match.group("y2")
    if year:
        if _is_date(int(year), month, day) in evidence.dates:
            return True
    elif any((seen.month, seen.day) == (month, day) for seen in evidence.dates):
        return True
    return match.group(0).lower() in evidence.text.lower()


def _numeric_date_supported(match: re.Match[str], evidence: _Evidence) -> bool:
    if match.group("y2"):
        year, readings = int(match.group("y2")), [(int(match.group("m2")), int(match.group("d2")))]
    else:
        year = int(match.group("y"))
        year += 2000 if year < 100 else 0
        first, second = int(match.group("a")), int(match.group("b"))
        # Day first or month first: the customer's locale decides, the evidence must agree.
        readings = [(second, first), (first, second)]
    return any(_is_date(year, month, day) in evidence.dates for month, day in readings)


def _is_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _clock_supported(match: re.Match[str], evidence: _Evidence) -> bool:
    hour, minute = int(match.group("h")), int(match.group("m"))
    ampm = (match.group("ampm") or "").lower()
    if ampm:
        hour = hour % 12 + (12 if ampm == "p" else 0)
    return (hour, minute) in evidence.clocks


def _amount_unsupported(match: re.Match[str], evidence: _Evidence, subject: str = "answer") -> str:
    """Why a written amount of money is not the observations' amount; "" when it is."""
    mark = match.group("pre") or match.group("post")
    number = match.group("n1") or match.group("n2")
    if not _number_readings(number) & evidence.numbers:
        return "absent"
    currencies = _CURRENCY_SIGNS.get(mark.lower(), {mark} if mark.isupper() else set())
    if evidence.currencies and currencies and not currencies & evidence.currencies:
        listed = ", ".join(sorted(evidence.currencies))
        return f"the {subject} states {match.group(0)!r}, but the observations give {listed}"
    return ""


def unsupported_fact(
    *,
    answer: str,
    query: str,
    observations: list[str],
    customer_id: str = "",
    locale: str = "",
    time_zone: str = "UTC",
) -> str:
    """The first fact ``answer`` states that the evidence does not back, described; or "".

    Facts may be written for the customer: dates with month names in English or in the
    ``locale``'s language, numeric dates in either day-month order, times of day in
    ``time_zone``, amounts with a currency sign or code and either decimal mark. They are
    normalised and then compared with what the observations hold; a currency other than
    the observations' is a different fact.
    """
    evidence = _evidence(observations, time_zone=time_zone)
    asked = f"{query}\n{customer_id}"
    for sentence in _statements(_normal(answer), locale=locale):
        reason = _sentence_unsupported(sentence, asked=asked, evidence=evidence, locale=locale)
        if reason:
            return reason
    return ""


def _sentence_unsupported(sentence: str, *, asked: str, evidence: _Evidence, locale: str) -> str:
    covered = bytearray(len(sentence))
    seen, numbers = evidence.text, evidence.numbers

    def fresh(match: re.Match[str]) -> bool:
        """Not part of a fact already checked, and not a format example."""
        start, end = match.span()
        if any(covered[start:end]):
            return False
        covered[start:end] = b"\x01" * (end - start)
        return not _is_example(sentence, start)

    def absent(what: str) -> str:
        return f"the answer states {what!r}, which no observation contains"

    has_digits = any(char.isdigit() for char in sentence)
    if has_digits:
        reason = _dates_and_amounts_unsupported(sentence, fresh, evidence=evidence, locale=locale)
        if reason:
            return reason
    for match in _RELATIVE_DATE.finditer(sentence):
        if (
            fresh(match)
            and _SHOP_EVENT.search(sentence)
            and not _supposed(sentence, match.start())
            and not (evidence.dates or _named_date(locale).search(seen))
        ):
            return f"the answer says {match.group(0)!r}, but no observation has a date"
    for match in _IDENTIFIER.finditer(sentence):
        token = match.group(0)
        if fresh(match) and not (_token_in(token, asked) or _token_in(token, seen)):
            return absent(token)
    if has_digits:
        reason = _counts_unsupported(sentence, fresh, numbers=numbers)
        if reason:
            return reason
    for match in _WORD_QUANTITY.finditer(sentence):
        value = Decimal(_NUMBER_WORDS[match.group(1).lower()])
        if fresh(match) and value not in numbers:
            return absent(match.group(0))
    for pattern, backing in _CLAIMS:
        for match in pattern.finditer(sentence):
            if _supposed(sentence, match.start()) or _is_example(sentence, match.start()):
                continue
            if not any(word in seen.lower() for word in backing):
                return f"the answer says {match.group(0)!r}, which no observation supports"
    return ""


def _absent(what: str) -> str:
    return f"the answer states {what!r}, which no observation contains"


def _dates_and_amounts_unsupported(
    sentence: str,
    fresh: Callable[[re.Match[str]], bool],
    *,
    evidence: _Evidence,
    locale: str,
    absent: Callable[[str], str] = _absent,
    subject: str = "answer",
) -> str:
    """Dates, times of day and amounts of a sentence, in whatever style they are written."""

    for match in _ISO_DATE.finditer(sentence):
        if fresh(match) and not _iso_date_supported(match.group(0), evidence):
            return absent(match.group(0))
    # A zone label states no fact of its own: its digits are not amounts.
    for match in _ZONE_LABEL.finditer(sentence):
        fresh(match)
    named = _named_date(locale)
    for match in named.finditer(sentence):
        if fresh(match) and not _named_date_supported(match, evidence, locale):
            return absent(match.group(0))
    for match in _NUMERIC_DATE.finditer(sentence):
        if fresh(match) and not _numeric_date_supported(match, evidence):
            return absent(match.group(0))
    for match in _CJK_DATE.finditer(sentence):
        found = _is_date(*(int(match.group(part)) for part in ("y", "m", "d")))
        if fresh(match) and found not in evidence.dates:
            return absent(match.group(0))
    for match in _CLOCK.finditer(sentence):
        if fresh(match) and not _clock_supported(match, evidence):
            return absent(match.group(0))
    for match in _AMOUNT.finditer(sentence):
        mark = match.group("pre") or match.group("post")
        if mark.isalpha() and mark.isupper() and mark not in _CURRENCY_CODES:
            continue  # "UPS 2" is a carrier and a number, not money
        if fresh(match):
            reason = _amount_unsupported(match, evidence, subject)
            if reason:
                return absent(match.group(0)) if reason == "absent" else reason
    for match in _PERCENT.finditer(sentence):
        if subject == "thought" and _number_readings(match.group("number")) == {Decimal(100)}:
            fresh(match)  # "100% sure" says how certain the model is, nothing about the shop
            continue
        if fresh(match) and not _number_readings(match.group("number")) & evidence.numbers:
            return absent(match.group(0))
    return ""


def _counts_unsupported(
    sentence: str, fresh: Callable[[re.Match[str]], bool], *, numbers: set[Decimal]
) -> str:
    """Durations and any other number left once dates, amounts and identifiers are checked."""
    absent = _absent
    for match in _DURATION.finditer(sentence):
        # "try again in 10 minutes" is advice about the agent, not a fact about the shop.
        advice = _ADVICE.search(sentence[: match.start()])
        if fresh(match) and not advice and _number_of(match.group(0)) not in numbers:
            return absent(match.group(0))
    for match in _NUMBER.finditer(sentence):
        if _LIST_MARKER.match(sentence[match.start() :]) and not sentence[: match.start()].strip():
            continue
        if fresh(match) and not _number_readings(match.group(0)) & numbers:
            return absent(match.group(0))
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
    r"process|pull|see|open|obtain|connect|search|query|read|contact)\w*|"
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
    *,
    query: str,
    answer: str,
    history: LookupHistory,
    customer_id: str = "",
    locale: str = "",
    time_zone: str = "UTC",
) -> Verdict:
    """Reject an answer that states unsupported facts; otherwise say how the run ended.

    The order matters: an answer admitting that the latest lookup failed is a failure even
    when it also asks the customer something; a question is an accepted outcome whatever
    the request; a data request with no successful lookup cannot be answered.
    """
    if not answer.strip():
        return Verdict(reason="the final answer is empty")
    reason = unsupported_fact(
        answer=answer,
        query=query,
        observations=history.observations,
        customer_id=customer_id,
        locale=locale,
        time_zone=time_zone,
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


# --- facts as a customer reads them, for tracing ---------------------------------------


@dataclass(frozen=True)
class WrittenValue:
    """A date or an amount as the answer writes it, with what it can mean."""

    start: int
    end: int
    text: str
    dates: tuple[date, ...] = ()
    amounts: frozenset[Decimal] = frozenset()
    currencies: frozenset[str] = frozenset()


def written_values(text: str, *, locale: str = "") -> list[WrittenValue]:
    """The dates and the currency-marked amounts ``text`` writes in a customer's style,
    read the way the grounding check reads them (month names of ``locale`` included)."""
    found: list[WrittenValue] = []
    for match in _named_date(locale).finditer(text):
        day = int(match.group("d1") or match.group("d2"))
        month = _month_names(locale)[(match.group("m1") or match.group("m2")).lower().rstrip(".")]
        year = match.group("y1") or match.group("y2")
        if year and (written := _is_date(int(year), month, day)):
            found.append(WrittenValue(*match.span(), match.group(0), dates=(written,)))
    for match in _NUMERIC_DATE.finditer(text):
        if match.group("y2"):
            year, readings = (
                int(match.group("y2")),
                [(int(match.group("m2")), int(match.group("d2")))],
            )
        else:
            year = int(match.group("y")) + (2000 if len(match.group("y")) == 2 else 0)
            first, second = int(match.group("a")), int(match.group("b"))
            readings = [(second, first), (first, second)]
        days = tuple(d for m, d_ in readings if (d := _is_date(year, m, d_)))
        if days:
            found.append(WrittenValue(*match.span(), match.group(0), dates=days))
    for match in _AMOUNT.finditer(text):
        mark = match.group("pre") or match.group("post")
        currencies = _CURRENCY_SIGNS.get(mark.lower(), {mark} if mark in _CURRENCY_CODES else set())
        if currencies:
            number = match.group("n1") or match.group("n2")
            found.append(
                WrittenValue(
                    *match.span(),
                    match.group(0),
                    amounts=frozenset(_number_readings(number)),
                    currencies=frozenset(currencies),
                )
            )
    return sorted(found, key=lambda value: value.start)


# --- the think validator (seeds/000 §4.1) ----------------------------------------------
# A thought may restate anything the model was shown: the request (unlike an answer, a
# thought may repeat what the customer claims), the customer's details and the tool
# results. It may not state a concrete fact from anywhere else. Unlike the answer check
# it leaves bare numbers alone ("my 2nd try", "3 rounds left"): it checks identifiers
# with a run of three or more digits, dates, times of day, amounts, percentages,
# durations, short quoted values and the shop statuses of ``_CLAIMS``.
_THOUGHT_ID_DIGITS = re.compile(r"\d{3,}")
_ORDINAL = re.compile(r"#?\d+(?:st|nd|rd|th)", re.I)
# Names of standards ("ISO-8601", "UTF-8", "RFC 7807", "SHA256") are not shop facts.
_STANDARD = re.compile(r"(?:ISO|RFC|UTF|SHA|HTTP)[-_]?\d+", re.I)
_QUOTED = re.compile(r'"(?P<a>[^"\n]{1,60})"|\u201c(?P<b>[^\u201d\n]{1,60})\u201d')
# Quoting what the agent will say, ask or search for is a plan, not a fact.
_QUOTE_INTRO = re.compile(
    r"\b(?:say|saying|says|tell|telling|reply|replying|answer|answering|write|writing|ask|"
    r"asking|search(?:ing)?(?: for)?|look(?:ing)? up|query|with the text|message)\W*$",
    re.I,
)
_QUOTED_MAX_WORDS = 3


def thought_evidence(texts: list[str], *, locale: str = "", time_zone: str = "UTC") -> _Evidence:
    """What a thought may draw on: ``texts`` (the request, the customer's details, the
    observations shown to the model), with the dates and times they write for a person
    ("March 3", "28/11/2026", "2:30 PM") as well as the ISO ones."""
    evidence = _evidence([text for text in texts if text], time_zone=time_zone)
    for value in written_values(evidence.text, locale=locale):
        evidence.dates.update(value.dates)
    for match in _CLOCK.finditer(evidence.text):
        hour = int(match.group("h"))
        ampm = (match.group("ampm") or "").lower()
        if ampm:
            hour = hour % 12 + (12 if ampm == "p" else 0)
        evidence.clocks.add((hour, int(match.group("m"))))
    return evidence


def thought_unsupported_fact(
    *, thought: str, evidence: _Evidence, locale: str = "", time_zone: str = "UTC"
) -> str:
    """The first concrete fact ``thought`` states that ``evidence`` (see
    :func:`thought_evidence`) does not hold, described; or "" when it states none."""
    for sentence in _statements(_normal(thought), locale=locale):
        reason = _thought_sentence_unsupported(sentence, evidence=evidence, locale=locale)
        if reason:
            return reason
    return ""


def _thought_absent(what: str) -> str:
    return (
        f"the thought states {what!r}, which neither the request, the customer's details "
        "nor any observation contains"
    )


def _thought_sentence_unsupported(sentence: str, *, evidence: _Evidence, locale: str) -> str:
    covered = bytearray(len(sentence))
    seen = evidence.text
    absent = _thought_absent

    def fresh(match: re.Match[str]) -> bool:
        start, end = match.span()
        if any(covered[start:end]):
            return False
        covered[start:end] = b"\x01" * (end - start)
        return not _is_example(sentence, start)

    for match in _QUOTED.finditer(sentence):
        value = (match.group("a") or match.group("b") or "").strip()
        if not fresh(match) or not value or len(value.split()) > _QUOTED_MAX_WORDS:
            continue
        if _QUOTE_INTRO.search(sentence[max(0, match.start() - 30) : match.start()]):
            continue
        if value.lower() not in seen.lower():
            return absent(f'"{value}"')
    if any(char.isdigit() for char in sentence):
        reason = _dates_and_amounts_unsupported(
            sentence, fresh, evidence=evidence, locale=locale, absent=absent, subject="thought"
        )
        if reason:
            return reason
        for match in _IDENTIFIER.finditer(sentence):
            token = match.group(0)
            if (
                _ORDINAL.fullmatch(token)
                or _STANDARD.fullmatch(token)
                or not _THOUGHT_ID_DIGITS.search(token)
            ):
                continue
            if fresh(match) and not _token_in(token, seen):
                return absent(token)
        for match in _DURATION.finditer(sentence):
            advice = _ADVICE.search(sentence[: match.start()])
            if fresh(match) and not advice and _number_of(match.group(0)) not in evidence.numbers:
                return absent(match.group(0))
    for match in _RELATIVE_DATE.finditer(sentence):
        if (
            fresh(match)
            and _SHOP_EVENT.search(sentence)
            and not _supposed(sentence, match.start())
            and match.group(0).lower() not in seen.lower()
            and not (evidence.dates or _named_date(locale).search(seen))
        ):
            return f"the thought says {match.group(0)!r}, but nothing shown to it has a date"
    for pattern, backing in _CLAIMS:
        for match in pattern.finditer(sentence):
            if _supposed(sentence, match.start()) or _is_example(sentence, match.start()):
                continue
            if not any(word in seen.lower() for word in backing):
                return (
                    f"the thought says {match.group(0)!r}, which neither the request nor any "
                    "observation supports"
                )
    return ""
