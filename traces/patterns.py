"""The classifier's body patterns, run in linear time.

Admins edit the rules' patterns, and they are searched in text that tools and OTLP
exporters send. On Python's backtracking ``re``, a pattern such as ``(\\w+\\s?)+$`` holds a
worker for hours on one long body, and a pattern that does not compile (``(``) made every
rule load raise, so every run and every ingest failed. Patterns run on RE2 (linear in the
text, whatever the pattern) over at most ``BODY_SCAN_CHARS`` of the text; one that RE2
cannot run is refused when it is saved and skipped, with a warning, if it is in the table.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

# How much of a body the rules read: an error's words come first, and a 6 MB HTML page
# need not be scanned to the end for "not found".
BODY_SCAN_CHARS = 64 * 1024

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def body_regex(pattern: str) -> Any:
    """``pattern`` compiled case-insensitively on RE2; ValueError saying why it cannot be."""
    try:
        return re2.compile(f"(?i:{pattern})", _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"not a pattern that runs in linear time (RE2): {reason}. Lookarounds and "
            "backreferences are not supported."
        ) from None


def body_pattern_problem(pattern: str) -> str:
    """Why ``pattern`` cannot be a rule's body pattern ("" when it can)."""
    try:
        body_regex(pattern)
    except ValueError as exc:
        return str(exc)
    return ""
