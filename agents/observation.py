"""Observation pipeline: turn a tool response into the short text a model is shown.

Raw API responses waste the context window on links, nulls, debug blobs and repeated
items, and a long one can push the instructions out of the prompt. The pipeline keeps the
informative part: key fields (or everything minus noise), deduplicated and capped lists,
compact JSON, and finally a head-and-tail cut that never exceeds ``max_chars``.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 4
MAX_STRING_CHARS = 500
NOISY_KEYS = frozenset({"_links", "links", "metadata", "debug", "trace"})
NOISY_KEY_SUFFIXES = ("_base64", "_html")
TRUNCATION_MARKER = "…[truncated {count} chars]…"
# The head carries the top-level fields a reader looks at first; the tail shows how it ends.
HEAD_SHARE = 2 / 3
WHITESPACE_RUN = re.compile(r"[^\S\n]+")
# A field whose last word names money ("price", "final_price", "refund_amount", "total"):
# its number means nothing to a customer without the currency beside it.
MONEY_KEY = re.compile(r"(?:^|_)(?:price|amount|cost|fee|subtotal|total|refund)$", re.IGNORECASE)
CURRENCY_KEYS = ("currency", "currency_code")
# A field holding a stock-keeping-unit code, and the fields naming what that code sells.
SKU_KEY = re.compile(r"^(?:\w+_)?sku(?:_code)?$", re.IGNORECASE)
PRODUCT_NAME_KEYS = ("product_name", "name", "title")
# Text in a tool's data that speaks to the assistant instead of describing anything: a
# prompt injection planted in a field (an order note, a review, a status). The model is
# shown a placeholder in its place, so it can neither follow it nor repeat it to a customer.
INSTRUCTION_LIKE = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?"
    r"\b(?:previous|prior|above|earlier|all|any|your|these|those)\b[^.\n]{0,30}?"
    r"\b(?:instructions?|prompts?|rules?|guidelines?|directions?)\b"
    r"|\byou are now\b|\b(?:system|developer) (?:prompt|message|instructions?)\b"
    r"|\bnew instructions?\s*:|\bas (?:an ai|the assistant),? you (?:must|should|will)\b",
    re.IGNORECASE,
)
WITHHELD = "[withheld: text addressed to the assistant, not data]"


@dataclass(frozen=True)
class ReducedObservation:
    """What the model sees of one tool response, with what the reduction did to it.

    ``truncated`` is true when the final head-and-tail cut removed characters;
    ``deduped_items`` counts list items and text lines dropped as duplicates; ``data`` is
    the reduced JSON value, or None when the body was not JSON.
    """

    text: str
    original_chars: int
    truncated: bool
    deduped_items: int
    data: Any | None = None
    withheld: int = 0  # values (or lines) that read as instructions (``INSTRUCTION_LIKE``)


def observation_reduce(
    *,
    body: str | bytes,
    content_type: str = "application/json",
    key_fields: Sequence[str] = (),
    max_chars: int = 2000,
    max_list_items: int = 10,
) -> ReducedObservation:
    """Reduce a tool response body to at most ``max_chars`` characters of useful text.

    JSON bodies are reduced to ``key_fields`` (dotted paths such as ``shipping.carrier``)
    or, without key fields or when none of them is present, stripped of empty values and
    noisy keys; lists are deduplicated and capped at ``max_list_items``. Other text has
    its whitespace collapsed and repeated lines dropped. Pure and deterministic.
    """
    text = _decode(body, content_type=content_type)
    original_chars = len(text)
    parsed, is_json = _parse_json(text, content_type=content_type)

    if is_json:
        reduced = _project_key_fields(parsed, key_fields) if key_fields else _MISSING
        if reduced is _MISSING:
            reduced = _drop_noise(parsed, depth=1)
        dedupe = _ListDeduper(max_list_items=max_list_items)
        data, withheld = _withhold_instructions(dedupe.apply(reduced))
        compact = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        deduped_items = dedupe.removed
    else:
        data = None
        compact, deduped_items = _reduce_text(text)
        lines = compact.split("\n")
        withheld = sum(1 for line in lines if INSTRUCTION_LIKE.search(line))
        if withheld:
            compact = "\n".join(WITHHELD if INSTRUCTION_LIKE.search(ln) else ln for ln in lines)

    final_text, truncated = _truncate_middle(compact, max_chars=max_chars)
    return ReducedObservation(
        text=final_text,
        original_chars=original_chars,
        truncated=truncated,
        deduped_items=deduped_items,
        data=data,
        withheld=withheld,
    )


def _withhold_instructions(value: Any) -> tuple[Any, int]:
    """``value`` with every string that reads as instructions replaced by ``WITHHELD``."""
    if isinstance(value, str):
        return (WITHHELD, 1) if INSTRUCTION_LIKE.search(value) else (value, 0)
    if isinstance(value, dict):
        count, out = 0, {}
        for key, item in value.items():
            out[key], found = _withhold_instructions(item)
            count += found
        return out, count
    if isinstance(value, list):
        count, items = 0, []
        for item in value:
            cleaned, found = _withhold_instructions(item)
            items.append(cleaned)
            count += found
        return items, count
    return value, 0


# --- decoding and parsing ----------------------------------------------------------------


def _decode(body: str | bytes, *, content_type: str) -> str:
    return body if isinstance(body, str) else response_text(body, content_type)


def _charset(content_type: str) -> str | None:
    """The charset a Content-Type declares, if Python knows it."""
    match = re.search(r"charset\s*=\s*\"?([A-Za-z0-9._:-]+)", content_type)
    if match:
        try:
            return codecs.lookup(match.group(1)).name
        except LookupError:
            pass
    return None


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16's: it starts with the same two bytes
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _cp1252_bytes(error: UnicodeError) -> tuple[str, int]:
    """Decode each byte UTF-8 refused as Windows-1252 (latin-1 where cp1252 has a gap)."""
    assert isinstance(error, UnicodeDecodeError)
    bad = error.object[error.start : error.end]
    text = "".join(
        bytes([byte]).decode("cp1252", errors="strict")
        if byte not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
        else chr(byte)
        for byte in bad
    )
    return text, error.end


codecs.register_error("agentops-cp1252", _cp1252_bytes)


def response_text(body: bytes, content_type: str) -> str:
    """A response body as text. A byte-order mark wins (JSON may be UTF-16 or UTF-32 with
    one, and a UTF-8 BOM is no character of the data); else the charset the body declares;
    else UTF-8, each byte it refuses read as Windows-1252 (the old default of text on the
    web): a latin-1 "Crème" arrived as "Cr\ufffdme", and one stray byte in a UTF-8 body
    must not turn its every accent into "Ã¨"."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body.decode(encoding, errors="replace")
    declared = _charset(content_type)
    if declared and declared != "utf-8":
        return body.decode(declared, errors="replace")
    return body.decode("utf-8", errors="agentops-cp1252")


def _parse_json(text: str, *, content_type: str) -> tuple[Any, bool]:
    stripped = text.strip()
    # A text/plain body of "42" is prose that happens to parse; only treat it as JSON when
    # the server says so or it is plainly a JSON document.
    looks_like_json = "json" in content_type.lower() or stripped[:1] in ("{", "[")
    if not looks_like_json or not stripped:
        return None, False
    try:
        return json.loads(stripped), True
    except ValueError:
        return None, False


# --- JSON reduction ----------------------------------------------------------------------

_MISSING: Any = object()


def _project_key_fields(value: Any, key_fields: Sequence[str]) -> Any:
    """Keep only the dotted ``key_fields``; ``_MISSING`` when none of them is present.

    A list along the way (the response itself or a field such as ``items``) is projected
    item by item, so ``items.sku`` keeps the sku of every item.
    """
    paths = [tuple(field.split(".")) for field in key_fields if field]
    projected = _project(value, paths)
    if projected is _MISSING or projected in ({}, []):
        return _MISSING
    return projected


def _project(value: Any, paths: list[tuple[str, ...]]) -> Any:
    if any(not path for path in paths):
        return _shorten_strings(value)
    if isinstance(value, list):
        items = [_project(item, paths) for item in value]
        kept = [item for item in items if item is not _MISSING]
        return kept if kept else _MISSING
    if not isinstance(value, dict):
        return _MISSING
    result: dict[str, Any] = {}
    # Output follows the order of the key fields, so the caller decides what comes first.
    for key in dict.fromkeys(path[0] for path in paths):
        if key not in value:
            continue
        child = _project(value[key], [path[1:] for path in paths if path[0] == key])
        if child is not _MISSING:
            result[key] = child
    if result:
        _keep_companions(value, result)
    return result if result else _MISSING


def _keep_companions(source: dict[str, Any], kept: dict[str, Any]) -> None:
    """Keep the fields that give kept values their meaning for a customer.

    An amount kept without its currency, or a SKU code without the product it sells,
    cannot be told to a customer in words; key fields name what matters, not everything
    it needs beside it.
    """
    if _holds_money(kept):
        for key in CURRENCY_KEYS:
            if isinstance(source.get(key), str) and key not in kept:
                kept[key] = source[key]
                break
    if any(SKU_KEY.match(key) and isinstance(value, str) for key, value in kept.items()):
        for key in PRODUCT_NAME_KEYS:
            if isinstance(source.get(key), str) and source[key]:
                kept.setdefault(key, _shorten(source[key]))
                break


def _holds_money(value: Any) -> bool:
    if isinstance(value, list):
        return any(_holds_money(item) for item in value)
    if not isinstance(value, dict):
        return False
    return any(
        (MONEY_KEY.search(key) and is_amount(child)) or _holds_money(child)
        for key, child in value.items()
    )


def is_amount(value: Any) -> bool:
    """A JSON number that can be an amount of money (booleans are ints in Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shorten_strings(value: Any) -> Any:
    if isinstance(value, str):
        return _shorten(value)
    if isinstance(value, list):
        return [_shorten_strings(item) for item in value]
    if isinstance(value, dict):
        return {key: _shorten_strings(child) for key, child in value.items()}
    return value


def _drop_noise(value: Any, *, depth: int) -> Any:
    """Drop empty values and noisy keys, shorten long strings, and cap nesting depth."""
    if isinstance(value, str):
        return _shorten(value)
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            return f"{{…{_count(len(value), 'key')}}}"
        cleaned: dict[str, Any] = {}
        for key, child in value.items():
            if _is_noisy_key(key):
                continue
            reduced = _drop_noise(child, depth=depth + 1)
            if not _is_empty(reduced):
                cleaned[key] = reduced
        return cleaned
    if isinstance(value, list):
        if depth > MAX_DEPTH:
            return f"[…{_count(len(value), 'item')}]"
        # Items keep their positions (an empty item is still an item), only inner noise goes.
        return [_drop_noise(item, depth=depth + 1) for item in value]
    return value


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _is_noisy_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in NOISY_KEYS or lowered.endswith(NOISY_KEY_SUFFIXES)


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and len(value) == 0)


def _shorten(text: str) -> str:
    if len(text) <= MAX_STRING_CHARS:
        return text
    return text[: MAX_STRING_CHARS - 1] + "…"


class _ListDeduper:
    """Drops repeated list items (counting them) and caps list length, at every level."""

    def __init__(self, *, max_list_items: int) -> None:
        self.max_list_items = max_list_items
        self.removed = 0

    def apply(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: self.apply(child) for key, child in value.items()}
        if not isinstance(value, list):
            return value
        seen: set[str] = set()
        unique: list[Any] = []
        for item in value:
            reduced = self.apply(item)
            fingerprint = json.dumps(reduced, sort_keys=True, ensure_ascii=False)
            if fingerprint in seen:
                self.removed += 1
                continue
            seen.add(fingerprint)
            unique.append(reduced)
        if len(unique) > self.max_list_items:
            hidden = len(unique) - self.max_list_items
            unique = [*unique[: self.max_list_items], f"…(+{hidden} more)"]
        return unique


# --- text reduction ----------------------------------------------------------------------


def _reduce_text(text: str) -> tuple[str, int]:
    """Collapse whitespace, drop blank lines, and keep only the first of identical lines."""
    seen: set[str] = set()
    lines: list[str] = []
    removed = 0
    for raw_line in text.splitlines():
        line = WHITESPACE_RUN.sub(" ", raw_line).strip()
        if not line:
            continue
        if line in seen:
            removed += 1
            continue
        seen.add(line)
        lines.append(line)
    return "\n".join(lines), removed


# --- final cut ---------------------------------------------------------------------------


def _truncate_middle(text: str, *, max_chars: int) -> tuple[str, bool]:
    """Cut the middle out of ``text`` so the result, marker included, fits ``max_chars``."""
    if len(text) <= max_chars:
        return text, False
    # The marker names the number of removed characters, which depends on the marker's own
    # length; take the first digit count whose result fits.
    for digits in range(1, len(str(len(text))) + 1):
        marker_length = len(TRUNCATION_MARKER.format(count="9" * digits))
        kept = max_chars - marker_length
        if kept < 0:
            break
        removed = len(text) - kept
        if len(str(removed)) <= digits:
            head_length = round(kept * HEAD_SHARE)
            tail_length = kept - head_length
            tail = text[len(text) - tail_length :] if tail_length else ""
            marker = TRUNCATION_MARKER.format(count=removed)
            return text[:head_length] + marker + tail, True
    # max_chars is smaller than the marker itself: a plain cut is all that fits.
    return text[:max_chars], True
