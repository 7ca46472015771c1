"""The benchmark's judge: does an answer state the sandbox's ground truth?

It compares normalised facts, never wording. It knows the facts of a task (an order's
status, a return's eligibility, the prices of a product's SKUs, the stock of each SKU,
which product is cheaper, a policy's number, a date) and reads them out of the answer in
the ways people and models write them:

- an order status by its synonyms ("dispatched", "on its way", "arrived", "canceled",
  "being prepared"...), not when negated ("hasn't shipped yet") or only announced
  ("should be delivered by Friday"), and not when the answer also asserts a later or
  conflicting status or hedges between several;
- amounts of money in any common notation ("$1,199.50", "1199.5 USD", "USD 1199",
  "1199,50 €"), within a cent or rounded to a whole unit, and per SKU: an amount stated
  next to a SKU must be one of that SKU's prices;
- stock per SKU, named by its code or by its colour (and size): every SKU the answer
  speaks of must be right, and the answer's verdict (is anything of the product in
  stock?) must be the product's;
- dates in ISO, US, European and written forms ("2026-11-03", "11/03/2026", "3 Nov 2026",
  "November 3rd, 2026").

It never matches one model's phrasing: the simulated model's wording is one case of many
in the tests (tests/bench/test_judge.py).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from agents.grounding import MONTH_NUMBERS

# --- order status ---------------------------------------------------------------------

# Canonical states a customer can tell apart. "pending" and "processing" are one for the
# customer: not shipped yet, being prepared.
STATUS_CANONICAL = {
    "pending": "preparing",
    "processing": "preparing",
    "shipped": "shipped",
    "delivered": "delivered",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "returned": "returned",
}
# Lifecycle position: an answer may recount earlier states ("shipped on the 1st, delivered
# on the 3rd"), never a later one.
_STATUS_RANK = {"preparing": 0, "shipped": 1, "delivered": 2, "returned": 3}
_STATUS_PHRASES: dict[str, tuple[str, ...]] = {
    "preparing": (
        r"\bpending\b",
        r"\bprocessing\b",
        r"\bbeing (?:processed|prepared|packed|packaged|picked|readied|handled)\b",
        r"\bpreparing\b",
        r"\bin preparation\b",
        r"\bon hold\b",
        r"\bawaiting (?:shipment|dispatch|fulfil+ment|processing|payment|confirmation)\b",
        r"\bnot (?:yet )?(?:been )?(?:shipped|dispatched|sent)\b",
        r"\bhas(?:n't| not) (?:yet )?(?:been )?(?:shipped|dispatched|sent|left)\b",
    ),
    "shipped": (
        r"\bshipped\b",
        r"\bdispatched\b",
        r"\bon (?:its|the|their) way\b",
        r"\bin transit\b",
        r"\bout for delivery\b",
        r"\b(?:has|have|was|were) (?:been )?sent(?! back)\b",
        r"\b(?:has|have) left (?:our|the) (?:warehouse|facility|depot)\b",
        r"\bwith the (?:carrier|courier)\b",
        r"\bhanded (?:over )?to (?:the )?(?:carrier|courier)\b",
    ),
    "delivered": (
        r"\bdelivered\b",
        r"\barrived\b",
        r"\bdelivery (?:was|has been) (?:completed|made)\b",
    ),
    "cancelled": (
        r"\bcancel+ed\b",
        r"\bvoided\b",
        r"\bcancel+ation (?:is|was|has been) (?:confirmed|complete|completed|processed)\b",
    ),
    "returned": (
        r"\breturned\b",
        r"\bsent back\b",
        r"\breturn (?:is|was|has been) (?:complete|completed|received|processed)\b",
    ),
}
# A mention preceded (within a few words) by one of these does not assert the status.
_NEGATION_BEFORE = re.compile(
    r"(?:\bnot|n't|\bnever|\bno longer|\byet to(?: be)?|\bwithout)(?:\W+\w+){0,3}\W*$"
)
_MODAL_BEFORE = re.compile(
    r"\b(?:will|would|should|shall|could|can|may|might|must|expected|expect|expects|"
    r"scheduled|estimated|due|going to|once|when|after|until|before|if|whether|soon|"
    r"eligible|able)(?:\W+\w+){0,3}\W*$"
)
_NEGATION_AFTER = re.compile(r"^\W*(?:\bnot yet\b|\byet to\b)")
_QUESTION_AFTER = re.compile(r"^\s*(?:yet\s*)?\?")
# "pending, shipped or delivered": hedging between statuses states none of them.
_HEDGE_BETWEEN = re.compile(r"[\s,\"'/]*(?:\bor\b|/|\band/or\b)[\s\"'(]*(?:either\s+)?")

# A "preparing" phrase that itself says "not shipped" stays an assertion of preparing.
_SELF_NEGATING = ("not", "n't")


@dataclass(frozen=True)
class _Mention:
    state: str
    start: int
    end: int
    asserted: bool
    negated: bool


def _clause_before(text: str, start: int) -> str:
    """The text of the current clause before ``start`` (back to a sentence end or ';')."""
    head = text[:start]
    cut = max(head.rfind(mark) for mark in (". ", "; ", "! ", "? ", "\n"))
    return head[cut + 1 :] if cut >= 0 else head


def _status_mentions(lowered: str) -> list[_Mention]:
    found: list[tuple[int, int, str, bool]] = []
    for state, patterns in _STATUS_PHRASES.items():
        for pattern in patterns:
            for match in re.finditer(pattern, lowered):
                self_negating = state == "preparing" and any(
                    word in match.group(0) for word in _SELF_NEGATING
                )
                found.append((match.start(), match.end(), state, self_negating))
    # Longest match wins where phrases overlap ("has not been shipped" vs "shipped").
    found.sort(key=lambda item: (item[0], -(item[1] - item[0])))
    mentions: list[_Mention] = []
    last_end = -1
    for start, end, state, self_negating in found:
        if start < last_end:
            continue
        last_end = end
        before = _clause_before(lowered, start)
        after = lowered[end : end + 12]
        negated = not self_negating and bool(
            _NEGATION_BEFORE.search(before) or _NEGATION_AFTER.search(after)
        )
        modal = not self_negating and bool(
            _MODAL_BEFORE.search(before) or _QUESTION_AFTER.search(after)
        )
        mentions.append(_Mention(state, start, end, not negated and not modal, negated))
    return mentions


def says_status(text: str, status: str) -> bool:
    """The answer asserts the true status (or a synonym), never negates it, asserts no
    later or conflicting status, and does not hedge between statuses."""
    truth = STATUS_CANONICAL.get(status.lower())
    if truth is None:
        raise ValueError(f"unknown order status {status!r}")
    lowered = " ".join(text.lower().split())
    mentions = _status_mentions(lowered)
    asserted = [m for m in mentions if m.asserted]
    if not any(m.state == truth for m in asserted):
        return False
    if any(m.state == truth and m.negated for m in mentions):
        return False
    for other in {m.state for m in asserted} - {truth}:
        if truth == "cancelled" or other == "cancelled":
            if other != "preparing":
                return False
        elif _STATUS_RANK[other] > _STATUS_RANK[truth]:
            return False
    for first, second in itertools.pairwise(asserted):
        if first.state != second.state and _HEDGE_BETWEEN.fullmatch(
            lowered[first.end : second.start]
        ):
            return False
    return True


# --- return eligibility ---------------------------------------------------------------

_NEGATION = r"(not|n't|never|no longer|cannot|can't|isn't|is not|ineligible|unable)"
_NOT_ELIGIBLE = re.compile(
    r"\bineligible\b|\bnot (?:be )?eligible\b|\bcannot be returned\b|\bnon-?returnable\b"
    r"|\b(?:return )?(?:window|period) (?:has )?(?:closed|expired|ended|passed)\b"
    r"|\boutside (?:of )?the return (?:window|period)\b|\btoo late to return\b"
)
_ELIGIBLE = re.compile(
    r"\beligible\b|\breturnable\b|\bcan (?:still )?(?:be )?return|\bcan be returned\b"
    r"|\bwithin the return (?:window|period)\b|\bcan (?:still )?send (?:it|them) back\b"
)


def says_eligible(text: str) -> bool | None:
    lowered = " ".join(text.lower().split())
    if _NOT_ELIGIBLE.search(lowered):
        return False
    if re.search(rf"\b{_NEGATION}\b[^.]{{0,40}}\b(eligible|return)", lowered):
        return False
    if _ELIGIBLE.search(lowered):
        return True
    return None


# --- amounts --------------------------------------------------------------------------

_SKU_CODE = re.compile(r"(?<![A-Za-z0-9-])[A-Za-z]{2,5}-\d{3,5}-[A-Za-z0-9]{1,5}(?![A-Za-z0-9-])")
_IDENTIFIER = re.compile(r"#?\b[A-Za-z]+[-_]?\d[\w-]*|\b\d+[A-Za-z][\w-]*")
_PERCENT = re.compile(r"\d+(?:[.,]\d+)?\s*(?:%|percent\b)")
_AMOUNT = re.compile(
    r"(?<![\w.,])(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+,\d{2}(?![\d,])|\d+)"
    r"(?![\w]|[.,]\d)"
)
_CURRENCY_BEFORE = re.compile(r"(?:[$€£]|\b(?:usd|eur|gbp|us\$))\s?$", re.IGNORECASE)
_CURRENCY_AFTER = re.compile(r"^\s?(?:usd|eur|gbp|dollars?|euros?|€|\$)(?![a-z])", re.IGNORECASE)


@dataclass(frozen=True)
class Amount:
    value: float
    start: int
    end: int
    currency: bool
    whole: bool


def _blank(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(lambda match: " " * len(match.group(0)), text)


def amounts_in(text: str) -> list[Amount]:
    """Amounts of money in ``text``: numbers that are not part of an id, a date or a
    percentage, with whether a currency marks them and whether they have cents."""
    cleaned = text
    for _, start, end in dates_in(text):
        cleaned = cleaned[:start] + " " * (end - start) + cleaned[end:]
    cleaned = _blank(cleaned, _SKU_CODE)
    cleaned = _blank(cleaned, _PERCENT)
    cleaned = _blank(cleaned, _IDENTIFIER)
    found = []
    for match in _AMOUNT.finditer(cleaned):
        raw = match.group("number")
        if re.fullmatch(r"\d+,\d{2}", raw):
            raw = raw.replace(",", ".")  # a decimal comma: "12,50 €"
        value = float(raw.replace(",", ""))
        currency = bool(
            _CURRENCY_BEFORE.search(cleaned[: match.start()])
            or _CURRENCY_AFTER.search(cleaned[match.end() :])
        )
        found.append(Amount(value, match.start(), match.end(), currency, "." not in raw))
    return found


def amount_matches(stated: Amount, true_amount: float) -> bool:
    """Within a cent, or the true amount rounded to a whole unit when written without
    cents ("about $1,200" for 1,199.50)."""
    if abs(stated.value - true_amount) < 0.0100001:
        return True
    return stated.whole and abs(stated.value - true_amount) <= 0.5


def says_price(text: str, amounts_by_sku: dict[str, list[float]]) -> bool:
    """Some stated amount is a price of the product (list or final, any SKU); an amount
    stated in the same sentence after a SKU's code must be one of that SKU's prices."""
    every = [a for values in amounts_by_sku.values() for a in values]
    stated = amounts_in(text)
    if not any(amount_matches(s, a) for s in stated for a in every):
        return False
    lowered = text.lower()
    for sku, values in amounts_by_sku.items():
        if not sku:
            continue
        for match in re.finditer(re.escape(sku.lower()), lowered):
            end = _sentence_end(lowered, match.end(), stop_at=[k.lower() for k in amounts_by_sku])
            near = [s for s in stated if match.end() <= s.start < end]
            if near and not any(amount_matches(s, a) for s in near for a in values):
                return False
    return True


def _sentence_end(text: str, start: int, *, stop_at: list[str]) -> int:
    ends = [m.start() for m in re.finditer(r"[.!?;](?=\s|$)|\n", text[start:])]
    end = start + ends[0] if ends else len(text)
    for other in stop_at:
        position = text.find(other, start)
        if 0 <= position < end:
            end = position
    return end


# --- stock ----------------------------------------------------------------------------

_OUT_OF_STOCK = re.compile(
    r"out of stock|not (?:currently |presently )?(?:in stock|available)|sold out|unavailable"
    r"|\bno stock\b|\b0 (?:in stock|available|units|left)\b|\bnone (?:left|available|in stock)"
    r"|(?:isn't|aren't|is not|are not) (?:currently )?(?:in stock|available)|backordered"
    r"|\bno (?:units|items) (?:left|available)\b"
)
_IN_STOCK = re.compile(
    r"\bin stock\b|\bavailable\b|\bready to ship\b|\b\d+ (?:units? )?(?:left|on hand)\b"
    r"|\bwe have (?:\d+|some|plenty)\b|\bin-stock\b"
)


def stock_claim(text: str) -> bool | None:
    """True for "in stock", False for "out of stock", None when the text says neither."""
    lowered = text.lower()
    if _OUT_OF_STOCK.search(lowered):
        return False
    if _IN_STOCK.search(lowered):
        return True
    return None


def _stock_clauses(text: str) -> list[str]:
    """Sentences and contrasted clauses; a comma splits only between two stock claims
    ("black and white are in stock, red is sold out")."""
    parts = re.split(
        r"[.!?;](?=\s|$)|\n|\bbut\b|\bwhile\b|\bwhereas\b|\balthough\b|\bhowever\b|\bexcept\b",
        text,
    )
    clauses: list[str] = []
    for part in parts:
        current = ""
        for piece in part.split(","):
            if current and stock_claim(current) is not None and stock_claim(piece) is not None:
                clauses.append(current)
                current = piece
            else:
                current = f"{current},{piece}" if current else piece
        if current.strip():
            clauses.append(current)
    return clauses


def _named_skus(clause: str, variants: dict[str, tuple[str, str]]) -> set[str]:
    """SKUs a clause names: by code, by colour (narrowed by a size named with it), or by
    size alone."""
    lowered = clause.lower()
    by_code = {
        sku
        for sku in variants
        if re.search(rf"(?<![\w-]){re.escape(sku.lower())}(?![\w-])", lowered)
    }
    if by_code:
        return by_code
    by_colour = {
        sku
        for sku, (colour, _) in variants.items()
        if colour and re.search(rf"\b{re.escape(colour.lower())}\b", lowered)
    }
    if not by_colour:
        # A size alone ("S is sold out") names that size in every colour.
        return {sku for sku, (_, size) in variants.items() if _names_size(clause, size)}
    sized = {sku for sku in by_colour if _names_size(clause, variants[sku][1])}
    return sized or by_colour


def _names_size(clause: str, size: str) -> bool:
    """A size is named as "size 9" / "sizes 8 and 9", or as a letter size in capitals
    ("M", "XL"; never the "s" of "it's")."""
    if not size:
        return False
    if size.isdigit():
        return bool(
            re.search(rf"\bsizes?\s+(?:\w+\s*(?:,|and|or)\s*)*{size}\b", clause, re.IGNORECASE)
        )
    return bool(re.search(rf"(?<![\w'\u2019]){re.escape(size)}(?![\w'\u2019])", clause))


def says_stock(
    text: str, stock_by_sku: dict[str, bool], variants: dict[str, tuple[str, str]] | None = None
) -> bool:
    """Every SKU the answer speaks of has its true stock, a claim about the product as a
    whole is true of it (in stock: some SKU is; out of stock: none is), and the answer's
    verdict — is any of it in stock? — is the product's."""
    labels = {sku: (variants or {}).get(sku, ("", "")) for sku in stock_by_sku}
    anything = any(stock_by_sku.values())
    claims: list[bool] = []
    for clause in _stock_clauses(text):
        claim = stock_claim(clause)
        if claim is None:
            continue
        named = _named_skus(clause, labels) or set(stock_by_sku)
        truths = [bool(stock_by_sku[sku]) for sku in named]
        if claim and not any(truths):
            return False
        if not claim and any(truths):
            return False
        claims.append(claim)
    return bool(claims) and any(claims) is anything


# --- dates ----------------------------------------------------------------------------

_MONTH = r"(?P<month>" + "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_DATE_PATTERNS = [
    # 2026-11-03, 2026/11/03, 2026-11-03T14:00:00Z
    (
        "ymd",
        re.compile(
            r"(?<![\d-])(?P<year>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})(?:T[\d:.+Z-]*)?(?!\d)"
        ),
    ),
    # 11/03/2026 (US) or 03/11/2026 (European), 03.11.2026, 3-11-2026
    (
        "numeric",
        re.compile(r"(?<![\d/.-])(?P<a>\d{1,2})[/.-](?P<b>\d{1,2})[/.-](?P<year>\d{4})(?!\d)"),
    ),
    # 3 Nov 2026, 3rd of November, 2026, 3 November
    ("dmy", re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?\b", re.IGNORECASE)),
    # November 3, 2026; Nov. 3rd 2026; November 3
    ("mdy", re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b", re.IGNORECASE)),
]


def _valid(year: int | None, month: int, day: int) -> tuple[int | None, int, int] | None:
    try:
        date(year or 2000, month, day)  # 2000 is a leap year: February 29 stays possible
    except ValueError:
        return None
    return (year, month, day)


def dates_in(text: str) -> list[tuple[tuple[int | None, int, int], int, int]]:
    """Dates written in ``text`` as ((year or None, month, day), start, end). An ambiguous
    numeric date (03/11/2026) gives both readings."""
    found: list[tuple[tuple[int | None, int, int], int, int]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            groups = match.groupdict()
            year = int(groups["year"]) if groups.get("year") else None
            readings: list[tuple[int | None, int, int] | None]
            if kind == "ymd":
                readings = [_valid(year, int(groups["m"]), int(groups["d"]))]
            elif kind == "numeric":
                a, b = int(groups["a"]), int(groups["b"])
                readings = [_valid(year, a, b), _valid(year, b, a)]
            else:
                month = groups["month"].lower()
                if kind == "dmy" and month == "may" and year is None:
                    continue  # "12 may apply" is no date
                readings = [_valid(year, MONTH_NUMBERS[month], int(groups["day"]))]
            valid = {reading for reading in readings if reading is not None}
            if not valid:
                continue
            taken.append((match.start(), match.end()))
            found.extend(
                (reading, match.start(), match.end()) for reading in sorted(valid, key=str)
            )
    return sorted(found, key=lambda item: item[1])


def says_date(text: str, expected: str | date) -> bool:
    """The answer writes the date ``expected`` (ISO text or a date) in any common form; a
    date written without a year matches on month and day."""
    day = expected if isinstance(expected, date) else _iso_date(expected)
    return any(
        (year is None or year == day.year) and (month, dom) == (day.month, day.day)
        for (year, month, dom), _, _ in dates_in(text)
    )


def _iso_date(value: str) -> date:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
    except ValueError as error:
        raise ValueError(f"expected an ISO date, got {value!r}") from error


# --- comparisons and policies ---------------------------------------------------------


def says_cheaper(lowered: str, winner: str, loser: str) -> bool:
    """The cheaper product is named as cheaper (or the dearer one as dearer): the subject of
    a comparison word is the product named last before it."""
    if winner not in lowered or loser not in lowered:
        return False
    cheaper = r"(cheaper|less expensive|costs less|lower price|more affordable)"
    dearer = r"(more expensive|costs more|pricier|higher price|dearer)"
    for words, right in ((cheaper, winner), (dearer, loser)):
        for match in re.finditer(words, lowered):
            before = lowered[: match.start()]
            subject = max((winner, loser), key=before.rfind)
            if before.rfind(subject) >= 0:
                return subject == right
    return False


def dash_normalise(text: str) -> str:
    return re.sub(r"\s*[\u2010-\u2015-]\s*", "-", text)


# --- the verdict ----------------------------------------------------------------------


def answer_correct(expected: dict[str, Any], status: str, answer: str) -> bool:
    """Whether ``answer`` (of a run that ended with ``status``) states the facts in
    ``expected``. A "date" key, when present, must be stated as well."""
    if status != "finished":
        return False
    text = " ".join(answer.split())
    lowered = text.lower()
    if "date" in expected and not says_date(text, expected["date"]):
        return False
    if "status" in expected:
        return says_status(text, str(expected["status"]))
    if "eligible" in expected:
        return says_eligible(text) is bool(expected["eligible"])
    if "amounts_by_sku" in expected:
        return says_price(text, expected["amounts_by_sku"])
    if "amounts" in expected:
        return says_price(text, {"": list(expected["amounts"])})
    if "stock_by_sku" in expected:
        variants = {
            sku: (pair[0] or "", pair[1] or "")
            for sku, pair in expected.get("variants", {}).items()
        }
        return says_stock(text, expected["stock_by_sku"], variants)
    if "cheaper" in expected:
        return says_cheaper(lowered, expected["cheaper"].lower(), expected["dearer"].lower())
    if "same_price" in expected:
        return bool(re.search(r"\b(same|equal|identical)\b", lowered)) and all(
            name.lower() in lowered for name in expected["same_price"]
        )
    if "contains_any" in expected:
        said = dash_normalise(lowered)
        return any(dash_normalise(fact.lower()) in said for fact in expected["contains_any"])
    return "date" in expected
