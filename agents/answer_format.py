"""Make a grounded final answer readable for the customer, and keep each fact traceable.

Models copy values out of observations as they are: ``2026-11-28T14:03:00+00:00``,
``129.99`` and ``AWH-2041-BLK``. This step, run after the grounding check has accepted the
answer, rewrites exactly those values the run's successful observations back:

- an ISO date or timestamp becomes a date in the customer's style (their locale's long
  date, and for a timestamp the time in the answer's time zone);
- a bare number that an observation gives as an amount of money with a currency becomes a
  price in that currency, formatted for the locale;
- a SKU code that an observation maps to a product name becomes "Product name (SKU)".

Every value it rewrites is recorded as a ``Fact``: the text the customer reads, the value
the observation holds, the field it came from and the step that recorded the observation.
Dates, currency-marked amounts and product names the model already wrote for the customer
are traced the same way (``rewritten=False``) and left as they are.
Values no observation maps are left exactly as the model wrote them. Pure and
deterministic: the same answer, evidence and style give the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale, UnknownLocaleError
from babel.dates import format_date, format_time, get_datetime_format, get_timezone_name
from babel.numbers import format_currency

from agents.grounding import written_values
from agents.observation import (
    CURRENCY_KEYS,
    MONEY_KEY,
    PRODUCT_NAME_KEYS,
    SKU_KEY,
    is_amount,
)

# The list under a product that holds its sellable variants.
VARIANTS_KEY = re.compile(r"sku|variant", re.IGNORECASE)
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
DEFAULT_LOCALE = "en_US"
DEFAULT_TIME_ZONE = "UTC"

ISO_VALUE = re.compile(
    r"(?<![\w-])(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:[T ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)(?P<zone>Z|[+-]\d{2}:?\d{2})?)?"
    r"(?![\w:]|-\d)"
)
# A number standing alone: not part of an id, a date, a version or an amount already
# written with its currency.
BARE_NUMBER = re.compile(
    r"(?<![\w.,/:#$€£¥₹+-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w%/:]|[.,]\d|-\w)"
)
CURRENCY_BEFORE = re.compile(r"(?:[$€£¥₹]|\b[A-Z]{3})\s?$")
# What a number is when a word follows it: a count or a duration, not money.
CODE_AFTER = re.compile(r"^\s?[A-Z]{3}\b")
NOT_MONEY_AFTER = re.compile(
    r"^\s?(?:%|percent|x\b|\u00d7|units?|items?|pieces?|pcs|available|in stock|"
    r"left|(?:business |working |calendar )?(?:days?|weeks?|months?|years?|hours?|minutes?)"
    r"|dollars?|euros?|pounds?)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AnswerStyle:
    """How a customer reads dates and amounts: a CLDR locale and an IANA time zone."""

    locale: str = DEFAULT_LOCALE
    time_zone: str = DEFAULT_TIME_ZONE


@dataclass(frozen=True)
class Evidence:
    """A successful observation the answer may draw on, and the step that recorded it."""

    step: int
    text: str


@dataclass(frozen=True)
class Fact:
    """One traced value: what the customer reads and where it comes from."""

    text: str
    value: str
    kind: str  # date | amount | product
    step: int
    field: str
    rewritten: bool = True  # False: the model already wrote it this way

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FormattedAnswer:
    text: str
    facts: tuple[Fact, ...]


def style_problem(*, locale: str = "", time_zone: str = "") -> str:
    """Why a locale or time zone setting cannot be used; "" when it can (or is blank)."""
    if locale:
        try:
            Locale.parse(locale.replace("-", "_"))
        except (UnknownLocaleError, ValueError):
            return f"unknown locale {locale!r}; use a language tag such as en-US or de-DE"
    if time_zone:
        try:
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            return f"unknown time zone {time_zone!r}; use an IANA name such as Europe/Berlin"
    return ""


def answer_style(*, locale: str = "", time_zone: str = "") -> AnswerStyle:
    """The style for these settings; blank or unusable settings fall back to the defaults."""
    usable_locale = locale if locale and not style_problem(locale=locale) else DEFAULT_LOCALE
    usable_zone = (
        time_zone if time_zone and not style_problem(time_zone=time_zone) else DEFAULT_TIME_ZONE
    )
    return AnswerStyle(locale=usable_locale.replace("-", "_"), time_zone=usable_zone)


# --- what the observations say ---------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    step: int
    field: str


@dataclass
class _Index:
    """Values of the observations the formatter may rewrite, each with where it came from."""

    dates: dict[str, _Source]
    money: dict[Decimal, tuple[str, _Source] | None]  # None: several currencies, ambiguous
    other_numbers: set[Decimal]
    products: dict[str, tuple[str, _Source]]


def _observation_data(text: str) -> Any:
    """The JSON value an observation text holds, after any note in front of it."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value


def _walk(value: Any, path: str, context: dict[str, Any]) -> Iterator[tuple[str, Any, dict]]:
    """(dotted field, leaf value, inherited context) for every leaf; lists add no segment.

    A currency applies to everything below the object that states it; a product name to
    that object's own fields and to its variants (``skus``), not to unrelated children.
    """
    if isinstance(value, dict):
        inner = dict(context)
        for key in CURRENCY_KEYS:
            if isinstance(value.get(key), str):
                inner["currency"] = value[key]
        for key in PRODUCT_NAME_KEYS:
            if isinstance(value.get(key), str) and value[key]:
                inner["name"] = value[key]
                inner["name_field"] = f"{path}.{key}" if path else key
                break
        unnamed = {k: v for k, v in inner.items() if k not in ("name", "name_field")}
        for key, child in value.items():
            nested = isinstance(child, dict | list)
            passed = inner if not nested or VARIANTS_KEY.search(key) else unnamed
            yield from _walk(child, f"{path}.{key}" if path else key, {**passed, "key": key})
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, path, context)
    else:
        yield path, value, context


def _index(evidence: Sequence[Evidence]) -> _Index:
    index = _Index(dates={}, money={}, other_numbers=set(), products={})
    # The latest observation wins: it holds the freshest copy of a value.
    for item in evidence:
        for match in ISO_VALUE.finditer(item.text):
            # Text the JSON walk below cannot read (a cut observation) still traces.
            index.dates[match.group(0)] = _Source(item.step, _field_of(item.text, match.start()))
        data = _observation_data(item.text)
        for field, value, context in _walk(data, "", {}):
            key = context.get("key", "")
            if isinstance(value, str) and ISO_VALUE.fullmatch(value):
                index.dates[value] = _Source(item.step, field)
            if is_amount(value):
                number = Decimal(str(value))
                currency = context.get("currency")
                if MONEY_KEY.search(key) and isinstance(currency, str) and len(currency) == 3:
                    known = index.money.get(number, ("", None))
                    if number in index.money and (known is None or known[0] != currency):
                        index.money[number] = None
                    else:
                        index.money[number] = (currency.upper(), _Source(item.step, field))
                else:
                    index.other_numbers.add(number)
            elif isinstance(value, str) and SKU_KEY.match(key) and "name" in context:
                index.products[value] = (context["name"], _Source(item.step, context["name_field"]))
    return index


def _field_of(text: str, position: int) -> str:
    """The JSON key just before ``position`` in an observation text, or ""."""
    keys = re.findall(r'"([\w.-]+)"\s*:\s*"?$', text[max(0, position - 80) : position])
    return keys[-1] if keys else ""


# --- how the customer reads them -------------------------------------------------------


def _zone(style: AnswerStyle) -> ZoneInfo:
    return ZoneInfo(style.time_zone)


def format_iso_value(match: re.Match[str], style: AnswerStyle) -> str | None:
    """An ISO date or timestamp in the customer's style; None when it is not a real date."""
    try:
        day = date.fromisoformat(match.group("date"))
    except ValueError:
        return None
    locale = style.locale
    if not match.group("time"):
        return format_date(day, "long", locale=locale)
    zone_text = match.group("zone") or ""
    try:
        moment = datetime.fromisoformat(
            f"{match.group('date')}T{match.group('time')}{_offset(zone_text)}"
        )
    except ValueError:
        return None
    if moment.tzinfo is None:
        # No offset: the clock time is all the value says, shown as it is.
        return _date_time(moment, locale=locale, zone_name="")
    local = moment.astimezone(_zone(style))
    return _date_time(local, locale=locale, zone_name=_zone_name(local, locale))


def _offset(zone: str) -> str:
    if zone == "Z":
        return "+00:00"
    if zone and ":" not in zone:
        return f"{zone[:3]}:{zone[3:]}"
    return zone


def _zone_name(moment: datetime, locale: str) -> str:
    name = get_timezone_name(moment, width="short", locale=locale)
    if " " not in name:
        return name
    # Some locales have only long names for a zone; an offset is shorter and exact.
    offset = moment.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _date_time(moment: datetime, *, locale: str, zone_name: str) -> str:
    time_text = format_time(moment.replace(tzinfo=None), "short", locale=locale)
    if zone_name:
        time_text = f"{time_text} {zone_name}"
    pattern = get_datetime_format("long", locale=locale)
    return (
        str(pattern)
        .replace("'", "")
        .replace("{0}", time_text)
        .replace("{1}", format_date(moment.date(), "long", locale=locale))
    )


def format_amount(amount: Decimal, currency: str, style: AnswerStyle) -> str:
    return format_currency(amount, currency, locale=style.locale)


# --- the rewrite -----------------------------------------------------------------------


def answer_format(
    *, answer: str, evidence: Sequence[Evidence], style: AnswerStyle
) -> FormattedAnswer:
    """``answer`` with ISO dates, bare amounts and SKU codes made readable, and its facts."""
    if not evidence:
        return FormattedAnswer(text=answer, facts=())
    index = _index(evidence)
    facts: list[Fact] = []
    pieces: list[str] = []
    cursor = 0
    for start, end, replacement, fact in _rewrites(answer, index, style):
        if start < cursor:
            continue
        pieces += [answer[cursor:start], replacement]
        facts.append(fact)
        cursor = end
    pieces.append(answer[cursor:])
    return FormattedAnswer(text="".join(pieces), facts=tuple(facts))


def _rewrites(answer: str, index: _Index, style: AnswerStyle) -> list[tuple[int, int, str, Fact]]:
    found: list[tuple[int, int, str, Fact]] = []
    taken = bytearray(len(answer))

    def claim(start: int, end: int) -> bool:
        if any(taken[start:end]):
            return False
        taken[start:end] = b"\x01" * (end - start)
        return True

    for match in ISO_VALUE.finditer(answer):
        source = index.dates.get(match.group(0)) or _same_day(match.group("date"), index)
        text = format_iso_value(match, style)
        if source is None or text is None or not claim(*match.span()):
            continue
        fact = Fact(text, match.group(0), "date", source.step, source.field)
        found.append((*match.span(), text, fact))
    for sku, (name, source) in index.products.items():
        for match in re.finditer(rf"(?<![\w-]){re.escape(sku)}(?![\w-])", answer):
            if _named_already(answer, match.start(), match.end(), name) or not claim(*match.span()):
                continue
            text = f"{name} ({sku})"
            found.append((*match.span(), text, Fact(name, sku, "product", *_at(source))))
    for match in BARE_NUMBER.finditer(answer):
        money = _money_value(match.group(0), index)
        if money is None:
            continue
        after = answer[match.end() :]
        if (
            CURRENCY_BEFORE.search(answer[: match.start()])
            or CODE_AFTER.match(after)
            or NOT_MONEY_AFTER.match(after)
        ):
            continue
        number, currency, source = money
        if not claim(*match.span()):
            continue
        text = format_amount(number, currency, style)
        fact = Fact(text, f"{match.group(0)} {currency}", "amount", source.step, source.field)
        found.append((*match.span(), text, fact))
    found += _written_facts(answer, index, style, claim, named={f.value for *_, f in found})
    return sorted(found, key=lambda item: item[0])


def _written_facts(
    answer: str,
    index: _Index,
    style: AnswerStyle,
    claim: Callable[[int, int], bool],
    *,
    named: set[str],
) -> list[tuple[int, int, str, Fact]]:
    """Facts the model already wrote for the customer, traced but left as written."""
    found: list[tuple[int, int, str, Fact]] = []
    by_day = _dates_by_day(index, style)
    for value in written_values(answer, locale=style.locale):
        if value.dates:
            day = next((day for day in value.dates if day in by_day), None)
            if day is None or not claim(value.start, value.end):
                continue
            iso, source = by_day[day]
            fact = Fact(value.text, iso, "date", source.step, source.field, rewritten=False)
        else:
            amount = next(
                (
                    (number, known)
                    for number in value.amounts
                    if (known := index.money.get(number)) and known[0] in value.currencies
                ),
                None,
            )
            if amount is None or not claim(value.start, value.end):
                continue
            number, (currency, source) = amount
            fact = Fact(value.text, f"{number} {currency}", "amount", *_at(source), rewritten=False)
        found.append((value.start, value.end, value.text, fact))
    for sku, (name, source) in index.products.items():
        if sku in named:
            continue
        for match in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", answer, re.IGNORECASE):
            if claim(*match.span()):
                fact = Fact(match.group(0), sku, "product", *_at(source), rewritten=False)
                found.append((*match.span(), match.group(0), fact))
                break
    return found


def _dates_by_day(index: _Index, style: AnswerStyle) -> dict[date, tuple[str, _Source]]:
    """Each observed ISO value under the calendar day it falls on for the customer."""
    days: dict[date, tuple[str, _Source]] = {}
    for value, source in index.dates.items():
        match = ISO_VALUE.fullmatch(value)
        if match is None:
            continue
        try:
            days[date.fromisoformat(match.group("date"))] = (value, source)
            if match.group("time") and match.group("zone"):
                moment = datetime.fromisoformat(
                    f"{match.group('date')}T{match.group('time')}{_offset(match.group('zone'))}"
                )
                days[moment.astimezone(_zone(style)).date()] = (value, source)
        except ValueError:
            continue
    return days


def _at(source: _Source) -> tuple[int, str]:
    return source.step, source.field


def _same_day(day: str, index: _Index) -> _Source | None:
    """A date the model shortened from an observed timestamp traces to that timestamp."""
    return next((src for value, src in index.dates.items() if value.startswith(day)), None)


def _named_already(answer: str, start: int, end: int, name: str) -> bool:
    """Whether the sentence around the code already names its product."""
    breaks = [m.end() for m in SENTENCE_END.finditer(answer)]
    sentence_start = max((i for i in breaks if i <= start), default=0)
    sentence_end = min((i for i in breaks if i >= end), default=len(answer))
    return name.lower() in answer[sentence_start:sentence_end].lower()


def _money_value(text: str, index: _Index) -> tuple[Decimal, str, _Source] | None:
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    known = index.money.get(number)
    # A number the observations also give as a count or a quantity may not be money here.
    if known is None or number in index.other_numbers:
        return None
    return number, known[0], known[1]
