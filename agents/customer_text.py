"""What the customer may read: no internal codes, no raw exception text.

Every text the runtime hands to a customer (a model's final answer, a fallback, a handover
message) passes through ``customer_text_clean``. Error-type codes and executor codes are
internal vocabulary: they stay in Step rows for ops and never reach the customer. A value
that a successful tool observation contains is data, not a code, and is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.tools.executor import ExecutorCode
from traces.models import ErrorType

# Codes the runtime, the executor and the classifier use for what went wrong.
_EXECUTOR_CODES = {v for k, v in vars(ExecutorCode).items() if k.isupper() and isinstance(v, str)}
INTERNAL_CODES = frozenset({*ErrorType.values, *_EXECUTOR_CODES, "UNSUPPORTED_ANSWER"}) - {"OK"}

# Plain words for a code that sits inside a sentence ("failed with TIMEOUT").
_PLAIN_WORDS = {
    "TIMEOUT": "a timeout",
    "CONNECTION_ERROR": "a connection problem",
    "RATE_LIMITED": "too many requests",
    "UNAUTHORIZED": "an access problem",
    "RESOURCE_NOT_FOUND": "not found",
    "TOOL_SUSPENDED": "a service that is paused",
    "INTERNAL_SERVER_ERROR": "a server problem",
    "SERVICE_UNAVAILABLE": "a service that is temporarily unavailable",
}
_GENERIC_WORDS = "a technical problem"

# UPPER_SNAKE identifiers (at least one underscore) and the taxonomy's single-word codes.
_CODE_TOKEN = re.compile(r"(?<![\w-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w-])")
_SINGLE_WORD_CODES = sorted((c for c in INTERNAL_CODES if "_" not in c), key=len, reverse=True)
_SINGLE_WORD_TOKEN = re.compile(
    r"(?<![\w-])(?:" + "|".join(map(re.escape, _SINGLE_WORD_CODES)) + r")(?![\w-])"
)
# A bracketed group holding only codes, HTTP statuses, snake-case names (a tool's:
# "check_inventory") and separators: "(404 RESOURCE_NOT_FOUND)", "(check_inventory)".
_GROUP_ITEM = r"(?:(?:HTTP\s*)?[45]\d\d|[A-Z][A-Z0-9_]{2,}|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)"
_CODE_GROUP = re.compile(
    r"\s*[(\[]\s*" + _GROUP_ITEM + r"(?:[\s,;:/-]+" + _GROUP_ITEM + r")*\s*[)\]]"
)
# A snake-case name in backticks, as models quote a tool or a field: "`check_inventory`".
_QUOTED_NAME = re.compile(r"\s*`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`")
# Traces of an exception: a traceback, a qualified exception name with its message, errno.
_EXCEPTION_TEXT = re.compile(
    r"Traceback \(most recent call last\)|\bFile \"[^\"]+\", line \d+|\[Errno -?\d+\]|"
    # A bounded module prefix: "a.a.a.…" must not cost quadratic time.
    r"\b(?:[a-z_]\w*\.){0,4}[A-Z]\w*(?:Error|Exception|Exceeded|Timeout)\b(?:\(|:\s)|"
    r"\b(?:httpx|httpcore|requests|urllib3|psycopg|django|asyncio|socket|ssl)\.\w+"
)
# Sentence ends: punctuation before whitespace (so "httpx.ConnectError" stays whole), newlines.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)|(?=\n)")


@dataclass(frozen=True)
class CleanText:
    text: str
    removed: tuple[str, ...]


def _is_data(token: str, observations: list[str]) -> bool:
    return any(token in observation for observation in observations)


def _code_words(match: re.Match[str], observations: list[str], removed: list[str]) -> str:
    token = match.group(0)
    if token not in INTERNAL_CODES and _is_data(token, observations):
        return token
    removed.append(token)
    return _PLAIN_WORDS.get(token, _GENERIC_WORDS)


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])(?=[.!?])", "", text)
    text = re.sub(r"\(\s*\)|\[\s*\]", "", text)
    return text.strip()


_INVISIBLE_CONTROLS = re.compile("[\x00\u202a-\u202e\u2066-\u2069]")


def customer_text_clean(text: str, *, observations: list[str] | None = None) -> CleanText:
    """``text`` without internal codes or exception text; what was taken out is returned
    so that the caller can keep it on the step record."""
    observations = observations or []
    removed: list[str] = []
    kept = []
    # A NUL, or a bidirectional override that makes "txt.exe" read as "exe.txt": never
    # part of an answer a customer should see as written.
    text = _INVISIBLE_CONTROLS.sub("", text)
    for sentence in _SENTENCE_END.split(text):
        if _EXCEPTION_TEXT.search(sentence):
            # A sentence that carries an exception cannot be repaired word by word.
            removed.append(sentence.strip())
            continue
        kept.append(sentence)
    cleaned = "".join(kept)

    def drop_group(match: re.Match[str]) -> str:
        inner = match.group(0).strip()[1:-1].strip()
        names_code = any(w in INTERNAL_CODES for w in re.findall(r"[A-Z][A-Z0-9_]{2,}", inner))
        # "(USD)" or "(UPS)" is ordinary text; a status or a snake-case name is a code
        # unless an observation showed it as data (a promotion code, say).
        looks_internal = names_code or bool(re.search(r"[45]\d\d|_", inner))
        if not looks_internal or (not names_code and _is_data(inner, observations)):
            return match.group(0)
        removed.append(inner)
        return ""

    cleaned = _CODE_GROUP.sub(drop_group, cleaned)

    def drop_quoted(match: re.Match[str]) -> str:
        if _is_data(match.group(1), observations):
            return match.group(0)
        removed.append(match.group(1))
        return " that service"  # it stood for a name in the sentence: keep one

    cleaned = _QUOTED_NAME.sub(drop_quoted, cleaned)
    cleaned = _CODE_TOKEN.sub(lambda m: _code_words(m, observations, removed), cleaned)
    cleaned = _SINGLE_WORD_TOKEN.sub(lambda m: _code_words(m, observations, removed), cleaned)
    return CleanText(_tidy(cleaned), tuple(removed))


def shows_internal_codes(text: str) -> bool:
    """Whether ``text`` names an internal code or carries exception text."""
    return bool(customer_text_clean(text).removed)
