"""Redaction of secret-looking values from everything the project stores or logs.

Two kinds of match, applied to text and, recursively, to JSON-like values:

- **known secrets**, verbatim and in the forms an API echoes them back (percent-encoded
  from a query string, JSON-escaped): the configured ``LLM_API_KEY`` and every value
  handed to ``secret_register`` (tool credentials read from the environment at call time);
- **patterns**: API keys of the common providers (``sk-...``, ``ghp_...``, ``AKIA...``,
  JWTs, ...), ``Authorization:`` and ``Cookie:`` header values, bearer tokens and this
  API's ``Token <key>``, PEM private keys (a block cut short is redacted to the end), the
  password of a URL's userinfo (``https://u:p@h``), ``password=`` / ``api_key=`` /
  ``token=`` style pairs in query strings, JSON, Python reprs and log text, and card
  numbers (13 to 19 digits, optionally grouped by spaces or dashes, starting 2-6 like
  every payment card, and Luhn-valid, so that order numbers, tracking numbers and
  timestamps stay readable).

In a dict, a value under a secret-looking key (``password``, ``apiKey``, ``X-Api-Key``,
``client_secret``, ``refresh_token``, ...) is replaced whatever it is.

This is the lowest layer: it imports nothing of the project, so that ``traces``,
``agents`` and the logging configuration can all use it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

REDACTED = "[REDACTED]"

# A registered secret shorter than this would redact ordinary words and numbers.
MIN_KNOWN_SECRET_LENGTH = 6

_SECRET_WORDS = (
    r"password|passwd|passphrase|pwd|secret|secret[_-]?key|client[_-]?secret|token"
    r"|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?"
)
# A key whose last word is a secret word: ``api_key``, ``X-Api-Key``, ``refresh_token``,
# but not ``max_tokens``, ``token_type`` or ``passenger``.
_SECRET_KEY = re.compile(rf"(?:^|_)(?:{_SECRET_WORDS}|authorization|cookie|set_cookie)$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_SEPARATORS = re.compile(r"[-.\s]+")

# Each family of patterns runs only when one of its trigger words occurs in the
# lower-cased text: Python's regex engine is slow on case-insensitive alternations, and
# most step text contains none of them.
_FAMILIES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (
        ("authorization",),
        # Authorization / Proxy-Authorization header values, to the end of the value.
        re.compile(
            r"(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\"'\r\n,}]+)",
            re.IGNORECASE,
        ),
    ),
    (
        ("pass", "pwd", "secret", "token", "key", "credential"),
        # name=value, "name": "value", 'name': 'value', name: value. The secret word must
        # end the name (the separator follows), so ``max_tokens=5`` stays.
        re.compile(
            rf"(?P<head>(?:{_SECRET_WORDS})[\"']?\s*[:=]\s*)"
            r"(?P<value>\"(?:[^\"\\\r\n]|\\.)*\"|'(?:[^'\\\r\n]|\\.)*'|[^\s&,;\"'{}\[\]()<>]+)",
            re.IGNORECASE,
        ),
    ),
    (
        ("bearer",),
        re.compile(r"(?P<head>\bbearer\s+)(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)", re.IGNORECASE),
    ),
    (
        ("token",),
        # This API's own scheme (`Authorization: Token <40 hex>`), quoted without its header.
        re.compile(r"(?P<head>\btoken\s+)(?P<value>[0-9a-f]{40})\b", re.IGNORECASE),
    ),
    (
        ("cookie",),
        # Cookie / Set-Cookie header values carry session ids: to the end of the line.
        re.compile(
            r"(?P<head>\b(?:set-)?cookie[\"']?\s*:\s*[\"']?)(?P<value>[^\"'\r\n}]+)",
            re.IGNORECASE,
        ),
    ),
    (
        ("private key",),
        re.compile(
            r"(?P<value>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
            r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*))",
            re.DOTALL,
        ),
    ),
    (
        ("@",),
        # The password of userinfo in any scheme's URL: https://user:pass@host
        re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@?#]*:)(?P<value>[^\s/@?#]+)(?=@)"),
    ),
    (
        ("sk-", "k_live_", "k_test_", "gh", "glpat-", "xox", "akia", "aiza", "hf_", "eyj"),
        re.compile(
            r"(?P<value>"
            r"\bsk-[A-Za-z0-9_\-]{12,}"  # OpenAI, Anthropic and compatible proxies
            r"|\b[rsp]k_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
            r"|\bglpat-[A-Za-z0-9_\-]{20,}"  # GitLab
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
            r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
            r"|\bAIza[0-9A-Za-z_\-]{35}"  # Google API key
            r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
            r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
            r")"
        ),
    ),
)
# One search for every family's triggers: most text has none, and is done with after it.
_ANY_TRIGGER = re.compile(
    "|".join(re.escape(trigger) for triggers, _ in _FAMILIES for trigger in triggers)
)
_CARD_CANDIDATE = re.compile(r"[2-6]\d(?:[ -]?\d){11,17}")

_known_lock = threading.Lock()
_registered: set[str] = set()


def secret_register(value: str | None) -> None:
    """Redact ``value`` from now on, verbatim and in the encoded forms an API may echo
    (``secret_forms``): a credential read from the environment."""
    if not value or len(value) < MIN_KNOWN_SECRET_LENGTH:
        return
    if value in _registered:
        return
    with _known_lock:
        _registered.add(value)


def secret_key_name(key: object) -> bool:
    """True when a mapping key names a secret (``password``, ``apiKey``, ``X-Api-Key``)."""
    if not isinstance(key, str):
        return False
    # The cache keeps short keys only: a long one (any text can be a key) is not kept.
    return _secret_key_name(key) if len(key) <= _CACHED_KEY_MAX else _secret_key_uncached(key)


_CACHED_KEY_MAX = 256


@functools.lru_cache(maxsize=4096)  # the same few keys come back in every step
def _secret_key_name(key: str) -> bool:
    return _secret_key_uncached(key)


def _secret_key_uncached(key: str) -> bool:
    normalised = _KEY_SEPARATORS.sub("_", _CAMEL_BOUNDARY.sub("_", key.strip())).lower()
    return bool(_SECRET_KEY.search(normalised))


def redact_text(
    text: str, *, extra_secrets: Iterable[str] = (), secrets: list[str] | None = None
) -> str:
    """``text`` with every known secret and secret-looking value replaced by [REDACTED]."""
    if not text:
        return text
    return _redact_text(text, _known_secrets(extra_secrets) if secrets is None else secrets)


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _shapes_redacted(text)


def _redact_key(key: str, secrets: list[str]) -> str:
    """``_redact_text`` for a mapping key: the same few keys come back value after value,
    so the part that depends on the key alone (the secret shapes) is remembered."""
    for secret in secrets:
        if secret in key:
            key = key.replace(secret, REDACTED)
    return _shapes_redacted_cached(key) if len(key) <= _CACHED_KEY_MAX else _shapes_redacted(key)


@functools.lru_cache(maxsize=4096)
def _shapes_redacted_cached(text: str) -> str:
    return _shapes_redacted(text)


def _shapes_redacted(text: str) -> str:
    """``text`` with secret-looking values (by their shape: pairs, tokens, card numbers)
    replaced."""
    lowered = text.lower()
    if _ANY_TRIGGER.search(lowered):
        for triggers, pattern in _FAMILIES:
            if any(trigger in lowered for trigger in triggers):
                text = pattern.sub(_replace, text)
    return _CARD_CANDIDATE.sub(_replace_card, text)


def known_secrets() -> list[str]:
    """The verbatim secrets to redact now: pass them to ``redact_text`` / ``redact_value``
    as ``secrets`` when redacting many values at once."""
    return _known_secrets(())


def redact_known_secrets(text: str) -> str:
    """``text`` with only the known secrets replaced: cheap, and leaves other data intact."""
    if not text:
        return text
    for secret in _known_secrets(()):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_value(
    value: Any, *, extra_secrets: Iterable[str] = (), secrets: list[str] | None = None
) -> Any:
    """A copy of a JSON-like value with secrets redacted from keys' values and all text.
    ``secrets``: the verbatim ones, from ``known_secrets()``, instead of looking them up."""
    return _redact_value(value, _known_secrets(extra_secrets) if secrets is None else secrets)


def _redact_value(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return _redact_text(value, secrets) if value else value
    if isinstance(value, dict):
        redacted: dict[Any, Any] = {}
        for key, item in value.items():
            item = (
                REDACTED
                if secret_key_name(key) and item not in (None, "")
                else _redact_value(item, secrets)
            )
            if isinstance(key, str) and key:
                # A key is text too: a secret used as a key is redacted like any other. Two
                # keys redacted alike both stay, numbered, so no value is lost.
                clean = _redact_key(key, secrets)
                if clean != key:
                    base, n = clean, 2
                    while clean in redacted or clean in value:
                        clean, n = f"{base} #{n}", n + 1
                    key = clean
            redacted[key] = item
        return redacted
    if isinstance(value, list | tuple):
        return [_redact_value(item, secrets) for item in value]
    return value


def _replace(match: re.Match[str]) -> str:
    groups = match.groupdict()
    head = groups.get("head") or ""
    value = groups["value"]
    quote = value[0] if head and value[:1] in {'"', "'"} and value[-1:] == value[:1] else ""
    return f"{head}{quote}{REDACTED}{quote}"


def _replace_card(match: re.Match[str]) -> str:
    candidate = match.group(0)
    start, end = match.span()
    text = match.string
    before = text[start - 1] if start else ""
    after = text[end : end + 2]
    # Part of a longer number or token (a tracking number, an amount, a hex id, a UUID such
    # as a Celery task id): not a card.
    if (
        before.isalnum()
        or before in {".", "_"}
        or (before == "-" and start > 1 and text[start - 2].isalnum())
        or after[:1].isalnum()
        or after[:1] == "_"
        or (after[:1] == "-" and after[1:].isalnum())
    ):
        return candidate
    # Written in groups, a card's are of at most 6 digits (4-4-4-4, 4-6-5); a UUID's first
    # is 8.
    groups = re.split(r"[ -]", candidate)
    if len(groups) > 1 and any(len(group) > 6 for group in groups):
        return candidate
    return REDACTED if _luhn_valid(candidate) else candidate


def _luhn_valid(candidate: str) -> bool:
    digits = [int(char) for char in candidate if char.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


_secrets_cache: tuple[tuple[Any, ...], list[str]] | None = None


def secret_forms(secret: str) -> set[str]:
    """``secret`` as an API may echo it back: verbatim, percent-encoded (a credential sent
    in the query string, upper- or lower-case escapes, ``+`` for a space) and JSON-escaped
    (``\\u`` escapes, ``\\/``)."""
    forms = {secret}
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms |= {encoded, _PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), encoded)}
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms |= {escaped, escaped.replace("/", "\\/")}
    return forms


_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _known_secrets(extra_secrets: Iterable[str]) -> list[str]:
    global _secrets_cache
    try:
        llm_key = settings.LLM_API_KEY or ""
    except (ImproperlyConfigured, AttributeError):  # no settings, or no such setting
        llm_key = ""
    extra = tuple(extra_secrets)
    # Secrets are only ever added, so their count tells whether the cached list is current.
    key = (len(_registered), llm_key, extra)
    cached = _secrets_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    secrets = {
        form
        for secret in (*_registered, llm_key, *extra)
        if secret and len(secret) >= MIN_KNOWN_SECRET_LENGTH
        for form in secret_forms(secret)
    }
    # Longest first, so that a secret containing another is replaced whole.
    found = sorted(secrets, key=len, reverse=True)
    _secrets_cache = (key, found)
    return found


# Attributes every LogRecord has; anything else came in through ``extra=``.
_STANDARD_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__
) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    """Redacts a record's message, arguments, string extras and exception text in place.

    Installed on the handlers in ``LOGGING``: a handler filter sees every record that
    reaches the handler, whichever logger it came from. The record is rewritten rather
    than copied, so handlers that run after this one see the redacted record too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record
            message = f"{record.msg!r} {record.args!r}"
        record.msg = redact_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        for name, value in list(record.__dict__.items()):
            if name in _STANDARD_RECORD_ATTRIBUTES:
                continue
            if isinstance(value, str | dict | list | tuple):
                record.__dict__[name] = redact_value(value)
        return True


class ClientErrorOneLineFilter(logging.Filter):
    """Logs a 4xx response (403 above all) as one line with the path and the user id.

    Django logs every ``PermissionDenied`` through ``django.request`` with the exception's
    full traceback: an expected refusal then fills the log like a crash. Records with a
    ``status_code`` below 500 from Django's loggers lose their traceback and gain ``path``
    and ``user_id``; 5xx records are untouched and keep theirs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status_code = getattr(record, "status_code", None)
        if not isinstance(status_code, int) or not 400 <= status_code < 500:
            return True
        # Only Django's response logging: other records carry a status_code of their own
        # (an upstream API's) and keep their message.
        if not record.name.startswith("django.") or not hasattr(record, "request"):
            return True
        # Installed on the logger and on the handler: rewrite once.
        if getattr(record, "one_line", False):
            return True
        request = getattr(record, "request", None)
        path = str(getattr(request, "path", "") or "")
        user = getattr(request, "user", None)
        user_id = getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg = "%s status=%s path=%s user_id=%s"
        record.args = (
            message.replace("\r", "\\r").replace("\n", "\\n"),
            status_code,
            path.encode("unicode_escape").decode("ascii"),
            user_id,
        )
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.path = path
        record.user_id = user_id
        record.one_line = True
        return True


# --- values PostgreSQL can store ------------------------------------------------------------
# Model output, tool responses and exporters' spans may carry what no text or jsonb column
# takes: a NUL character, a lone UTF-16 surrogate (from a JSON "\ud800" escape), NaN or
# Infinity. One such value fails the INSERT of a whole batch of steps, other runs' too.


def storable_text(text: str) -> str:
    """``text`` without NUL characters, and with lone surrogates replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # Through UTF-16: a surrogate pair becomes its character, a lone half U+FFFD.
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_value(value: Any) -> Any:
    """A JSON-like value that PostgreSQL stores as it is: ``storable_text`` on every string
    and key, a non-finite number as its text ("nan", "inf")."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {
            storable_text(k) if isinstance(k, str) else k: storable_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable_value(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


MAX_JSON_DEPTH = 32  # as the API's parser (config/api_parsers.py)


def untrusted_json(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON written outside this process (a model's reply, an exporter's attribute), read
    as leniently as a grammar writes it (a raw newline inside a string is kept) and as
    strictly as storage needs: NaN and Infinity (no JSON), and nesting past ``max_depth``
    (or Python's recursion limit), are a ``ValueError``; strings and keys come back
    ``storable_text``."""
    try:
        value = _UNTRUSTED_JSON.decode(text)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
    if json_depth(value, stop_past=max_depth) > max_depth:
        raise ValueError(f"the JSON is nested deeper than {max_depth} levels")
    # Only an escape (or, read leniently, a raw NUL) can bring in what storage refuses.
    return storable_value(value) if "\\u" in text or "\x00" in text else value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_UNTRUSTED_JSON = json.JSONDecoder(strict=False, parse_constant=_not_json)


def json_depth(value: Any, *, stop_past: int | None = None) -> int:
    """How deep lists and objects nest in ``value`` (iterative: a deep value cannot
    overflow the stack); counting stops once past ``stop_past``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list | tuple):
            deepest = max(deepest, level)
            if stop_past is not None and level > stop_past:
                return level
            stack.extend((child, level + 1) for child in item)
    return deepest
