"""The API's JSON parser: refuses what the stdlib parser would accept but the app cannot store."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Deeper than any request body the API declares; deep nesting is only ever an attack on
# recursive code (the parser itself, serializers, validators).
MAX_JSON_DEPTH = 32
# PostgreSQL cannot store a lone surrogate; JSON's \ud800 escape produces one.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _check_values(data: Any) -> None:
    """Walk the parsed document without recursion: depth and string content."""
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if _LONE_SURROGATE.search(value):
                raise ParseError("JSON parse error - string contains an unpaired surrogate")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        pending.extend((child, depth + 1) for child in children)


class BoundedJSONParser(JSONParser):
    """JSON without NaN/Infinity, out-of-range numbers, lone surrogates or deep nesting.

    Each of these is a 400 here; the stdlib parser accepts the first three and raises
    ``RecursionError`` (a 500) on the last.
    """

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.load(
                codecs.getreader(encoding)(stream),
                parse_constant=_refuse_constant,
                parse_float=_finite_float,
            )
        except RecursionError as exc:
            raise ParseError(
                f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels"
            ) from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        _check_values(data)
        return data
