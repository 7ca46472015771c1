"""The classifier's body patterns, run in linear time wherever they can be.

Admins edit the rules' patterns, and they are searched in text that tools and OTLP
exporters send. On Python's backtracking ``re``, a pattern such as ``(\\w+\\s?)+$`` holds a
worker for hours on one long body, and a pattern that does not compile (``(``) made every
rule load raise, so every run and every ingest failed. So:

- a pattern is saved only if RE2 runs it (linear in the text, whatever the pattern): the
  field's validator refuses a lookaround, a backreference or a syntax error, in admin;
- a row saved before that rule (or past it, by a queryset update) whose pattern RE2
  refuses still runs on ``re`` as it always did (its meaning is kept; a warning says so
  once per process), and one that neither compiles is skipped with a warning;
- a rule reads at most ``BODY_SCAN_CHARS`` of the text, and ``$`` also matches before a
  final newline, as it does on ``re``.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

import re2
from django.core.exceptions import ValidationError

logger = logging.getLogger(__name__)

# How much of a body the rules read: an error's words come first, and a 6 MB HTML page
# need not be scanned to the end for "not found".
BODY_SCAN_CHARS = 64 * 1024

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


def _re2(pattern: str) -> Any:
    """``pattern`` on RE2, case-insensitive; ValueError saying why RE2 cannot run it."""
    try:
        re2.compile(pattern, _OPTIONS)  # alone first: "a)|(b" must not pass as a group
        return re2.compile(f"(?i:{pattern})", _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"not a pattern that runs in linear time (RE2): {reason}. Lookarounds and "
            "backreferences are not supported; write \\z for the end of the text."
        ) from None


def body_pattern_problem(pattern: str) -> str:
    """Why ``pattern`` cannot be saved as a rule's body pattern ("" when it can)."""
    try:
        _re2(pattern)
    except ValueError as exc:
        return str(exc)
    return ""


def validate_body_pattern(pattern: str) -> None:
    problem = body_pattern_problem(pattern) if pattern else ""
    if problem:
        raise ValidationError(problem)


class _Searcher:
    """A compiled body pattern with ``search(text)``, RE2 or (an older row) ``re``."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def search(self, text: str) -> Any:
        text = text[:BODY_SCAN_CHARS]
        if text.endswith("\n") and not isinstance(self.compiled, re.Pattern):
            text = text[:-1]  # re's $ matches before a final newline; RE2's does not
        return self.compiled.search(text)


@functools.lru_cache(maxsize=512)
def body_regex(pattern: str) -> _Searcher:
    """``pattern`` compiled to search bodies with; ValueError when nothing can run it."""
    try:
        return _Searcher(_re2(pattern))
    except ValueError as refused:
        try:
            compiled = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"not a valid pattern: {exc}") from None
        logger.warning(
            "classifier.pattern_on_re", extra={"pattern": pattern[:100], "error": str(refused)}
        )
        return _Searcher(compiled)
