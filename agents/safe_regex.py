"""Regular expressions whose author is not trusted, run in linear time.

The learning loop writes patterns (a pre-condition's ``not_pattern``, a validation rule's
``pattern``, a repair step's ``regex_replace``) from what a model proposed, and they run on
what a model sends. Python's ``re`` backtracks: ``^(\\d+)+$`` on 40 digits and an ``x``
takes hours, and no static check of the pattern's shape catches every such case
(``\\d*\\d*\\d*#`` is polynomial, not nested). So these patterns run on RE2, whose time is
linear in the text whatever the pattern; a pattern RE2 cannot run (a backreference, a
lookaround) is refused when it is proposed.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

import re2

logger = logging.getLogger(__name__)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not to stderr


@functools.lru_cache(maxsize=1024)
def regex_compiled(pattern: str) -> Any:
    """``pattern`` compiled for RE2; ``ValueError`` saying why when RE2 cannot run it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"not a pattern that runs in linear time (RE2): {reason}") from None


def regex_unsafe_reason(pattern: Any) -> str:
    """Why ``pattern`` cannot run on RE2 ("" when it can)."""
    if not isinstance(pattern, str):
        return "a pattern must be a string"
    try:
        regex_compiled(pattern)
    except ValueError as exc:
        return str(exc)
    return ""


def regex_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``: on RE2, or on ``re`` for a
    pattern RE2 cannot run (only an administrator's, such as a lookahead in an imported
    or edited tool schema: the learning loop's are refused when proposed)."""
    try:
        compiled = regex_compiled(pattern)
    except ValueError:
        return re.search(pattern, text) is not None
    return compiled.search(text) is not None


def regex_fullmatch(pattern: str, text: str, *, otherwise: bool) -> bool:
    """Whether ``pattern`` matches all of ``text`` on RE2; ``otherwise`` for a pattern RE2
    cannot run (one stored before such patterns were refused), which is never run on
    ``re``: it came from the learning loop."""
    try:
        compiled = regex_compiled(pattern)
    except ValueError as exc:
        logger.warning("regex.refused", extra={"pattern": pattern[:200], "reason": str(exc)})
        return otherwise
    return compiled.fullmatch(text) is not None


def schema_regex_problems(schema: Any, where: str = "schema") -> list[str]:
    """Every ``pattern`` in a JSON Schema that RE2 cannot run, and any
    ``patternProperties`` (the validator matches those keys on ``re``), as problems."""
    problems: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                reason = regex_unsafe_reason(value)
                if reason:
                    problems.append(f"{where}.pattern: {reason}")
            elif key == "patternProperties":
                problems.append(f"{where}: patternProperties is not accepted in a proposal")
            else:
                problems += schema_regex_problems(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            problems += schema_regex_problems(item, f"{where}[{index}]")
    return problems
