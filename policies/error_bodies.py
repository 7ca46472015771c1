"""Read an API's error response, whatever layout it uses, into fields, messages and hints.

Proposers learn from what an API says went wrong. APIs say it in a handful of layouts:

- ``{"detail": "..."}`` (Django REST framework, FastAPI's HTTPException), and the flat
  ``{"error": "<code>", "detail" | "message": "...", "field": ..., ...}`` (this sandbox);
- FastAPI / pydantic 422: ``{"detail": [{"loc": [...], "msg": ..., "type": ..., "ctx"}]}``;
- ``{"errors": [{"field", "message"}]}`` (and ``{"errors": {"field": ["message"]}}``,
  JSON:API's ``source.pointer``);
- RFC 7807 / 9457 problem+json: ``type, title, status, detail, invalid-params``;
- ``{"error": {"message", "param", "type", "code"}}`` (OpenAI, Stripe) and Google's
  ``{"error": {"message", "details": [{"fieldViolations": [...]}]}}``;
- plain text (or HTML).

``error_body_parse`` returns a ``ParsedError``: the items as (field or None, message), each
with ``ErrorHints`` read cheaply from its message and structured data (the expected type,
letter case, pattern, format, allowed values, length, a prefix to add or drop, a
separator, a suggested or unknown parameter name, whether the field is required), plus
``Retry-After`` in seconds from the headers. Nothing here guesses beyond what the response says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from typing import Any

from agents.tools.executor import retry_after_seconds

MAX_BODY_CHARS = 20_000
MAX_MESSAGE_CHARS = 300
MAX_ITEMS = 20


@dataclass(frozen=True)
class ErrorHints:
    """What a message (or its structured context) says the value should be."""

    expected_type: str | None = None  # integer, number, string, boolean, array, object
    expected_case: str | None = None  # lower, upper
    expected_pattern: str | None = None  # a regex the API quoted
    expected_format: str | None = None  # e.g. YYYY-MM-DD, date-time, uuid, email
    allowed_values: tuple[str, ...] = ()
    length: int | None = None  # exactly this many characters / digits
    required_prefix: str | None = None
    forbidden_prefix: str | None = None
    separator: str | None = None  # "use '_' as the separator", "separated by '.'"
    suggested_name: str | None = None  # "did you mean q", "renamed to q", "use q instead"
    unknown_name: str | None = None  # a parameter the API does not know (any more)
    required: bool = False

    def merged(self, other: ErrorHints) -> ErrorHints:
        """These hints, with ``other``'s filling what these lack."""
        values = {}
        for item in fields(self):
            mine = getattr(self, item.name)
            values[item.name] = mine if mine not in (None, (), False) else getattr(other, item.name)
        return ErrorHints(**values)

    def is_empty(self) -> bool:
        return self == ErrorHints()


@dataclass(frozen=True)
class ErrorItem:
    field: str | None
    message: str
    hints: ErrorHints = dataclass_field(default_factory=ErrorHints)
    location: str | None = None  # path, query, body, header when the API says


@dataclass(frozen=True)
class ParsedError:
    status: int | None
    layout: str  # detail, flat, fastapi, errors, problem, error_object, text, empty
    items: tuple[ErrorItem, ...]
    summary: str = ""
    code: str | None = None
    retry_after: float | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(item.field for item in self.items if item.field)

    def hints_for(self, name: str | None) -> ErrorHints:
        """The hints of every item about ``name`` (None: the items naming no field)."""
        hints = ErrorHints()
        for item in self.items:
            if item.field == name:
                hints = hints.merged(item.hints)
        return hints

    def pairs(self) -> list[tuple[str | None, str]]:
        return [(item.field, item.message) for item in self.items]


Headers = Mapping[str, str] | Iterable[tuple[str, str]] | None


def error_body_parse(status: int | None, headers: Headers, body_text: str) -> ParsedError:
    """Parse one error response; never raises on odd input."""
    header_map = _headers(headers)
    text = (body_text or "")[:MAX_BODY_CHARS]
    retry_after = retry_after_seconds(header_map.get("retry-after"))
    data = _json(text)
    parsed: ParsedError
    if isinstance(data, dict):
        parsed = _from_mapping(status, data, header_map.get("content-type", ""))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        items = _list_items(data)
        parsed = ParsedError(status, "errors", items, _summary_of(items))
    elif text.strip():
        message = _plain(text)
        parsed = ParsedError(status, "text", (_item(None, message),), message)
    else:
        parsed = ParsedError(status, "empty", ())
    if retry_after is None and isinstance(data, dict):
        retry_after = _seconds(data.get("retry_after", data.get("retryAfter")))
    return replace(parsed, retry_after=retry_after)


# --- layouts --------------------------------------------------------------------------
def _from_mapping(status: int | None, data: dict[str, Any], content_type: str) -> ParsedError:
    code = _code(data)
    if "problem+json" in content_type or _looks_like_problem(data):
        return _problem(status, data)
    detail = data.get("detail")
    if isinstance(detail, list) and detail:
        items = _list_items(detail)
        return ParsedError(status, "fastapi", items, _summary_of(items), code)
    errors = data.get("errors")
    if isinstance(errors, list | dict) and errors:
        items = _list_items(errors) if isinstance(errors, list) else _dict_items(errors)
        summary = _text(data.get("message") or data.get("detail") or "") or _summary_of(items)
        return ParsedError(status, "errors", items, summary, code)
    error = data.get("error")
    if isinstance(error, dict):
        return _error_object(status, error)
    message = _text(
        detail if isinstance(detail, str) else data.get("message") or data.get("error_description")
    )
    if not message and isinstance(error, str):
        message = _text(error)
    if not message:
        message = _text(json.dumps(data, ensure_ascii=False))
    name = _field_name(data.get("field") or data.get("param") or data.get("parameter"))
    structured = _structured_hints(data)
    item = _item(name, message, structured)
    layout = "detail" if set(data) <= {"detail"} else "flat"
    return ParsedError(status, layout, (item,), message, code)


def _looks_like_problem(data: dict[str, Any]) -> bool:
    if "invalid-params" in data or "invalid_params" in data:
        return True
    return "title" in data and ("type" in data or "status" in data)


def _problem(status: int | None, data: dict[str, Any]) -> ParsedError:
    title = _text(data.get("title") or "")
    detail = _text(data.get("detail") or "") if isinstance(data.get("detail"), str) else ""
    raw = data.get("invalid-params", data.get("invalid_params"))
    items: list[ErrorItem] = []
    if isinstance(raw, list):
        for entry in raw[:MAX_ITEMS]:
            if not isinstance(entry, dict):
                continue
            name = _field_name(entry.get("name") or entry.get("field") or entry.get("pointer"))
            message = _text(entry.get("reason") or entry.get("detail") or entry.get("message"))
            items.append(_item(name, message or title, _structured_hints(entry)))
    errors = data.get("errors")
    if not items and isinstance(errors, list):
        items = list(_list_items(errors))
    if not items and isinstance(errors, dict):
        # ASP.NET Core's ValidationProblemDetails: {"errors": {"orderId": ["…"]}}.
        items = list(_dict_items(errors))
    if not items:
        items = [_item(None, detail or title)]
    code = _text(data.get("type") or "") or None
    problem_status = data.get("status") if isinstance(data.get("status"), int) else status
    return ParsedError(problem_status, "problem", tuple(items), detail or title, code)


def _error_object(status: int | None, error: dict[str, Any]) -> ParsedError:
    message = _text(error.get("message") or error.get("detail") or "")
    code = _text(error.get("code") or error.get("type") or error.get("status") or "") or None
    items: list[ErrorItem] = []
    for detail in error.get("details") or []:
        if not isinstance(detail, dict):
            continue
        for violation in detail.get("fieldViolations") or detail.get("field_violations") or []:
            if isinstance(violation, dict):
                items.append(
                    _item(
                        _field_name(violation.get("field")),
                        _text(violation.get("description") or violation.get("message")),
                    )
                )
    if not items:
        items.append(_item(_field_name(error.get("param")), message, _structured_hints(error)))
    return ParsedError(status, "error_object", tuple(items[:MAX_ITEMS]), message, code)


_LOCATIONS = {"body", "query", "path", "header", "cookie", "form"}
# pydantic v2 types (and v1's type_error.* suffixes) → the JSON type they expect.
_PYDANTIC_TYPES = {
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "decimal": "number",
    "number": "number",
    "string": "string",
    "str": "string",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "dict": "object",
}


def _list_items(entries: list[Any]) -> tuple[ErrorItem, ...]:
    items = []
    for entry in entries[:MAX_ITEMS]:
        if isinstance(entry, str):
            items.append(_item(None, _text(entry)))
            continue
        if not isinstance(entry, dict):
            continue
        location = None
        name = None
        loc = entry.get("loc")
        if isinstance(loc, list | tuple) and loc:
            parts = [str(part) for part in loc]
            if parts[0] in _LOCATIONS:
                location, parts = parts[0], parts[1:]
            name = ".".join(parts) or None
        else:
            source = entry.get("source")
            pointer = (
                source.get("pointer") or source.get("parameter")
                if isinstance(source, dict)
                else None
            )
            name = _field_name(
                entry.get("field")
                or entry.get("param")
                or entry.get("parameter")
                or entry.get("name")
                or entry.get("path")
                or entry.get("property")
                or pointer
            )
        message = _text(
            entry.get("msg")
            or entry.get("message")
            or entry.get("detail")
            or entry.get("reason")
            or entry.get("description")
            or entry.get("title")
            or entry.get("code")
            or ""
        )
        items.append(_item(name, message, _structured_hints(entry), location))
    return tuple(items)


def _dict_items(errors: dict[str, Any]) -> tuple[ErrorItem, ...]:
    items = []
    for name, messages in list(errors.items())[:MAX_ITEMS]:
        listed = messages if isinstance(messages, list) else [messages]
        for message in listed[:3]:
            text = _text(message if isinstance(message, str) else json.dumps(message))
            key = None if name in ("non_field_errors", "__all__", "base") else _field_name(name)
            items.append(_item(key, text))
    return tuple(items)


def _structured_hints(entry: dict[str, Any]) -> ErrorHints:
    """Hints a structured error states outright (pydantic ``type``/``ctx``, the sandbox's
    ``expected_type``, ``allowed``/``expected`` lists, a ``pattern``)."""
    values: dict[str, Any] = {}
    expected = entry.get("expected_type") or entry.get("expected")
    if isinstance(expected, str) and expected.lower() in _PYDANTIC_TYPES:
        values["expected_type"] = _PYDANTIC_TYPES[expected.lower()]
    kind = entry.get("type")
    if isinstance(kind, str):
        base = kind.removeprefix("type_error.").split("_")[0].lower()
        typed = kind.endswith(("_parsing", "_type")) or kind.startswith("type_error.")
        if typed and base in _PYDANTIC_TYPES:
            values["expected_type"] = _PYDANTIC_TYPES[base]
        if kind in ("missing", "value_error.missing"):
            values["required"] = True
        if kind in ("extra_forbidden", "value_error.extra"):
            values["unknown_name"] = _last_loc(entry)
        if kind in ("date_parsing", "date_from_datetime_parsing", "date_type"):
            values["expected_format"] = "date"
        if kind in ("datetime_parsing", "datetime_type", "datetime_from_date_parsing"):
            values["expected_format"] = "date-time"
        if kind == "uuid_parsing":
            values["expected_format"] = "uuid"
    ctx = entry.get("ctx")
    if isinstance(ctx, dict):
        if isinstance(ctx.get("pattern"), str):
            values["expected_pattern"] = ctx["pattern"]
        if isinstance(ctx.get("expected"), str):
            values["allowed_values"] = _split_values(ctx["expected"])
    pattern = entry.get("pattern")
    if isinstance(pattern, str):
        values["expected_pattern"] = pattern
    allowed = entry.get("allowed") or entry.get("allowed_values") or entry.get("enum")
    if isinstance(allowed, list) and all(isinstance(v, str | int) for v in allowed):
        values["allowed_values"] = tuple(str(v) for v in allowed[:50])
    fmt = entry.get("format") or entry.get("expected_format")
    if isinstance(fmt, str):
        values["expected_format"] = fmt
    suggestion = entry.get("suggestion") or entry.get("did_you_mean") or entry.get("replaced_by")
    if isinstance(suggestion, str) and _NAME.match(suggestion):
        values["suggested_name"] = suggestion
    return ErrorHints(**values)


def _last_loc(entry: dict[str, Any]) -> str | None:
    loc = entry.get("loc")
    if isinstance(loc, list | tuple) and loc:
        return str(loc[-1])
    return None


# --- hints from words -------------------------------------------------------------------
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_QUOTES = "\"'`\u2018\u2019\u201c\u201d"
_Q = f"[{_QUOTES}]"
_NQ = f"[^{_QUOTES}]"  # not a quote
_NQS = f"[^{_QUOTES}\\s]"  # neither a quote nor a space
_TYPE_WORDS = (
    r"integer|int|number|numeric|float|decimal|string|str|text|boolean|bool|array|list|object"
)
_TYPE_RE = re.compile(
    r"\b(?:must be|should be|expected|expects|expecting|is not|not an?|not a valid|"
    r"input should be|has to be|needs to be|requires)\s+(?:a valid\s+|an?\s+|of type\s+)?"
    r"(?:(?:positive|non-negative|negative|whole|valid|signed|unsigned)\s+)?"
    rf"({_TYPE_WORDS})\b",
    re.IGNORECASE,
)
_TYPE_NORMAL = {
    "int": "integer",
    "integer": "integer",
    "number": "number",
    "numeric": "number",
    "float": "number",
    "decimal": "number",
    "string": "string",
    "str": "string",
    "text": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "object": "object",
}
_CASE_RE = re.compile(
    r"\b(?:(?:must|should|has to|needs to) be (?:in |all |entirely )?|only |expected |"
    r"use |in |all )(lower|upper)[- ]?case\b|\b(lower|upper)[- ]?case (?:only|letters only|"
    r"is required|required|expected)\b",
    re.IGNORECASE,
)
_PATTERN_RE = re.compile(
    rf"\b(?:match(?:es|ing)?|pattern)\s*(?:the\s+)?(?:pattern|regex|regular expression)?\s*:?\s*"
    rf"({_Q}|/)(.{{1,120}}?)\1",
    re.IGNORECASE,
)
_ANCHORED_RE = re.compile(r"(\^[^\s\"'`]{1,120}\$)")
_FORMAT_RE = re.compile(
    rf"\b(?:in the format|in format|format(?:ted)? (?:as|like)|format|expected format|"
    rf"use (?:the )?format|formatted)\s*:?\s*{_Q}?([A-Za-z0-9:/._\-+ %]{{2,40}}?){_Q}?"
    r"(?=[\s,;)]|\.(?:\s|$)|$)",
    re.IGNORECASE,
)
_NAMED_FORMATS = {
    "iso 8601": "date-time",
    "iso-8601": "date-time",
    "iso8601": "date-time",
    "rfc 3339": "date-time",
    "rfc3339": "date-time",
    "uuid": "uuid",
    "email": "email",
    "e-mail": "email",
}
_ONE_OF_RE = re.compile(
    r"\b(?:must be one of|should be one of|one of|allowed values? (?:are|is)|valid values? "
    r"(?:are|is)|expected one of|permitted values? (?:are|is)|possible values? (?:are|is))\s*:?\s*"
    r"\[?(.{1,300}?)\]?(?:\.\s|\.?$|;)",
    re.IGNORECASE,
)
_QUOTED_CHOICES_RE = re.compile(
    rf"\b(?:must be|should be|expected|expecting|input should be)\s+((?:{_Q}{_NQ}{{1,60}}{_Q}"
    rf"\s*(?:,|or|,\s*or)\s*){{1,49}}{_Q}{_NQ}{{1,60}}{_Q})",
    re.IGNORECASE,
)
_LENGTH_RE = re.compile(
    r"\b(?:must be|should be|exactly|has to be|needs to be|expected)\s+(?:exactly\s+)?(\d{1,3})"
    r"[- ](?:digits?|characters?|chars?|letters?)\b|\b(\d{1,3})-digit\b",
    re.IGNORECASE,
)
_REQUIRED_PREFIX_RE = re.compile(
    rf"\b(?:must|should|has to|needs to) (?:start|begin) with\s+(?:the prefix\s+)?{_Q}"
    rf"({_NQ}{{1,20}}){_Q}|\b(?:requires|needs|missing) (?:the|a) (?:prefix\s+)?{_Q}"
    rf"({_NQ}{{1,20}}){_Q} prefix",
    re.IGNORECASE,
)
_FORBIDDEN_PREFIX_RE = re.compile(
    rf"\b(?:must not|should not|cannot|can't|may not) (?:start|begin) with\s+(?:the prefix\s+)?"
    rf"{_Q}({_NQ}{{1,20}}){_Q}|\bwithout (?:the|a|its) {_Q}?({_NQS}{{1,20}}){_Q}? "
    rf"prefix|\b(?:remove|drop|strip) (?:the )?(?:prefix )?{_Q}({_NQ}{{1,20}}){_Q}"
    r"(?: prefix)?",
    re.IGNORECASE,
)
_SEPARATOR_RE = re.compile(
    rf"\b(?:use|uses|using|with)\s+{_Q}([^A-Za-z0-9\s]|\s){_Q}\s+(?:as\s+(?:its|the|a)\s+)?"
    rf"(?:separator|delimiter)s?\b|\b(?:separated|delimited)\s+(?:by|with)\s+{_Q}"
    rf"([^A-Za-z0-9\s]|\s){_Q}|\b(?:separator|delimiter)\s+(?:must be|is now|should be)\s+"
    rf"{_Q}([^A-Za-z0-9\s]|\s){_Q}",
    re.IGNORECASE,
)
_SUGGEST_RE = re.compile(
    rf"\bdid you mean\s+{_Q}?([A-Za-z_][\w.\-]{{0,63}}){_Q}?|\b(?:renamed|changed) to\s+"
    rf"{_Q}?([A-Za-z_][\w.\-]{{0,63}}){_Q}?|\b(?:replaced by|superseded by)\s+(?:parameter\s+)?"
    rf"{_Q}?([A-Za-z_][\w.\-]{{0,63}}){_Q}?|\buse\s+(?:the\s+)?(?:parameter\s+|field\s+)?"
    rf"{_Q}([A-Za-z_][\w.\-]{{0,63}}){_Q}\s*(?:instead|\(|$|\.)|\b(?:use|pass|send)\s+"
    rf"{_Q}?([A-Za-z_][\w.\-]{{0,63}}){_Q}?\s+instead\b",
    re.IGNORECASE,
)
_UNKNOWN_RE = re.compile(
    rf"\b(?:unknown|unexpected|unrecognized|unrecognised|unsupported|deprecated|removed|extra)"
    rf"\s+(?:query\s+|body\s+|request\s+)?(?:parameter|param|field|argument|key|property)s?"
    rf"(?:\s+supplied)?"
    rf"(?:\s*:\s*{_Q}?([A-Za-z_][\w.\-]{{0,63}}){_Q}?|\s+{_Q}([A-Za-z_][\w.\-]{{0,63}}){_Q})"
    rf"|{_Q}([A-Za-z_][\w.\-]{{0,63}}){_Q}\s+(?:is|has been)\s+(?:no longer supported|"
    r"deprecated|renamed|removed|not (?:a )?(?:known|supported|allowed|recogni[sz]ed))",
    re.IGNORECASE,
)
_REQUIRED_RE = re.compile(
    r"\b(?:is required|are required|field required|required field|missing required|"
    r"must be provided|must be present|is missing|missing (?:parameter|field|value))\b",
    re.IGNORECASE,
)


def message_hints(message: str) -> ErrorHints:
    """Hints one error message states in words; cheap regexes, no guessing."""
    text = message[: MAX_MESSAGE_CHARS * 2]
    values: dict[str, Any] = {}
    match = _TYPE_RE.search(text)
    if match:
        values["expected_type"] = _TYPE_NORMAL[match.group(1).lower()]
    match = _CASE_RE.search(text)
    if match:
        values["expected_case"] = (match.group(1) or match.group(2)).lower()
    match = _PATTERN_RE.search(text)
    if match:
        values["expected_pattern"] = match.group(2)
    else:
        match = _ANCHORED_RE.search(text)
        if match:
            values["expected_pattern"] = match.group(1)
    lowered = text.lower()
    named = next((fmt for word, fmt in _NAMED_FORMATS.items() if word in lowered), None)
    match = _FORMAT_RE.search(text)
    if match and (
        "%" in match.group(1)
        or re.search(r"YY|MM|DD|HH|hh|mm|ss", match.group(1))
        or match.group(1).lower() in ("date", "date-time", "datetime", "time")
    ):
        values["expected_format"] = match.group(1).strip()
    if named and values.get("expected_format", "").lower() in ("", *_NAMED_FORMATS):
        values["expected_format"] = named
    match = _ONE_OF_RE.search(text)
    if match:
        allowed = _split_values(match.group(1))
        if allowed:
            values["allowed_values"] = allowed
    if "allowed_values" not in values:
        match = _QUOTED_CHOICES_RE.search(text)
        if match:
            values["allowed_values"] = _split_values(match.group(1))
    match = _LENGTH_RE.search(text)
    if match:
        values["length"] = int(match.group(1) or match.group(2))
    match = _REQUIRED_PREFIX_RE.search(text)
    if match:
        values["required_prefix"] = match.group(1) or match.group(2)
    match = _FORBIDDEN_PREFIX_RE.search(text)
    if match:
        values["forbidden_prefix"] = match.group(1) or match.group(2) or match.group(3)
    match = _SEPARATOR_RE.search(text)
    if match:
        values["separator"] = next(g for g in match.groups() if g is not None)
    match = _SUGGEST_RE.search(text)
    if match:
        values["suggested_name"] = next(g for g in match.groups() if g).rstrip(".-")
    match = _UNKNOWN_RE.search(text)
    if match:
        values["unknown_name"] = next(g for g in match.groups() if g).rstrip(".-")
    if _REQUIRED_RE.search(text):
        values["required"] = True
    return ErrorHints(**values)


def strftime_from_format(text: str | None) -> str | None:
    """``YYYY-MM-DD`` / ``DD/MM/YYYY HH:mm`` → a strftime pattern; an already-strftime
    pattern is returned as is; None when the text is not such a format."""
    if not text:
        return None
    if "%" in text:
        return text
    tokens = [
        ("YYYY", "%Y"),
        ("yyyy", "%Y"),
        ("YY", "%y"),
        ("yy", "%y"),
        ("MM", "%m"),
        ("DD", "%d"),
        ("dd", "%d"),
        ("HH", "%H"),
        ("hh", "%H"),
        ("mm", "%M"),
        ("ss", "%S"),
        ("SS", "%S"),
    ]
    out, index = "", 0
    while index < len(text):
        for token, directive in tokens:
            if text.startswith(token, index):
                out += directive
                index += len(token)
                break
        else:
            char = text[index]
            if char.isalpha():
                return None
            out += char
            index += 1
    return out if "%" in out else None


# --- small helpers ----------------------------------------------------------------------
def _item(
    name: str | None,
    message: str,
    structured: ErrorHints | None = None,
    location: str | None = None,
) -> ErrorItem:
    hints = (structured or ErrorHints()).merged(message_hints(message))
    if name is None and hints.unknown_name:
        name = hints.unknown_name
    return ErrorItem(name, message, hints, location)


def _headers(headers: Headers) -> dict[str, str]:
    if headers is None:
        return {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {str(key).lower(): str(value) for key, value in pairs}


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value >= 0 else None
    if isinstance(value, str) and re.fullmatch(r"\d{1,7}(\.\d+)?", value.strip()):
        return float(value)
    return None


def _json(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def _plain(text: str) -> str:
    if re.search(r"<(html|body|h1|title)\b", text, re.IGNORECASE):
        title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        body = re.sub(r"<[^>]+>", " ", re.sub(r"(?is)<(script|style|head).*?</\1>", " ", text))
        text = body if body.strip() else (title.group(1) if title else "")
    return _text(text)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return re.sub(r"\s+", " ", value).strip()[:MAX_MESSAGE_CHARS]


def _code(data: dict[str, Any]) -> str | None:
    for key in ("code", "error_code", "error"):
        value = data.get(key)
        if isinstance(value, str) and len(value) <= 80:
            return value
    return None


def _field_name(value: Any) -> str | None:
    if isinstance(value, list | tuple) and value:
        parts = [str(part) for part in value]
        if parts[0] in _LOCATIONS and len(parts) > 1:
            parts = parts[1:]
        value = ".".join(parts)
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if value.startswith("/"):  # a JSON pointer: /data/attributes/name → name
        value = value.rstrip("/").rsplit("/", 1)[-1]
    return value[:64] or None


def _split_values(text: str) -> tuple[str, ...]:
    parts = re.split(r"\s*,\s*|\s+or\s+|\s*\|\s*", text.strip())
    values = [part.strip().strip(_QUOTES + "[]() ") for part in parts]
    return tuple(value for value in values if value and len(value) <= 60)[:50]


def _summary_of(items: tuple[ErrorItem, ...]) -> str:
    return "; ".join(
        f"{item.field}: {item.message}" if item.field else item.message for item in items[:3]
    )[:MAX_MESSAGE_CHARS]
