"""Portable structured output: one JSON Schema, five ways of asking a server for it.

OpenAI-compatible servers agree on chat completions and disagree on how a request asks
for JSON that matches a schema. The dialects:

- ``json_schema``: OpenAI's ``response_format: {"type": "json_schema", "json_schema": ...}``
  (OpenAI, Ollama, recent llama.cpp ``llama-server``, vLLM).
- ``json_object``: ``response_format: {"type": "json_object", "schema": ...}``, what
  llama-cpp-python's server takes (it answers 500 to ``json_schema``).
- ``guided_json``: vLLM's ``guided_json`` request field.
- ``tools``: one forced function call whose parameters are the schema; the arguments are
  the answer (servers that constrain tool calls but not content).
- ``prompt``: no constraint at all; the schema goes into the prompt and the runtime's
  lenient parser reads what comes back.

``LLM_STRUCTURED_OUTPUT`` picks one, or ``auto``: a probe tries them in that order once,
and the first that returns valid JSON is cached in ``var/llm-structured-output.json``,
keyed by base URL and model (``manage.py llm_probe`` prints it, ``--refresh`` probes again).

Schemas sent for constrained decoding go through :func:`grammar_schema` first: grammar
engines (llama.cpp's GBNF above all) turn ``maxLength: 4000`` into a repetition of 4000
states, which a server may refuse or crash on. Lengths are checked after parsing instead,
by the pydantic models in ``agents.llm.schemas``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletion

logger = logging.getLogger(__name__)

DIALECTS = ("json_schema", "json_object", "guided_json", "tools", "prompt")
SETTING_CHOICES = ("auto", *DIALECTS)
# The order ``auto`` tries: the most portable constrained dialect first, prompting last.
PROBE_ORDER = ("json_schema", "json_object", "guided_json", "tools")

# Keywords that build repetition bounds or regular expressions into a grammar. Checked
# after parsing instead (pydantic), never sent for constrained decoding.
_GRAMMAR_UNFRIENDLY = frozenset(
    {"maxLength", "minLength", "maxItems", "minItems", "pattern", "format", "maxProperties"}
)
# Annotations a grammar ignores; dropped to keep the request small.
_NOISE = frozenset({"title", "examples"})

PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "colour": {"enum": ["red", "green"]}},
    "required": ["ok", "colour"],
}
PROBE_MESSAGES = [
    {"role": "system", "content": "You reply with JSON only."},
    {
        "role": "user",
        # "blue" is outside the schema's enum: only a server that enforces the schema
        # answers red or green, so a server that ignores the request field fails here.
        "content": 'Reply with this JSON object: {"ok": true, "colour": "blue"}',
    },
]

# A 500 whose body says the request itself was refused, not that the server failed.
_UNSUPPORTED_RE = re.compile(
    r"unsupported|not supported|not implemented|unknown (field|parameter|argument)|"
    r"unrecognized|invalid (request|value|type)|response_format|json_schema|guided_json|"
    r"tool_choice|grammar|extra (inputs|fields) (are )?not permitted|validation error|"
    r"exceeds? (the )?context|context (length|window)",
    re.IGNORECASE,
)


def grammar_schema(schema: Any) -> Any:
    """``schema`` without repetition bounds, patterns, formats and titles (recursively)."""
    if isinstance(schema, dict):
        return {
            key: grammar_schema(value)
            for key, value in schema.items()
            if key not in _GRAMMAR_UNFRIENDLY and key not in _NOISE
        }
    if isinstance(schema, list):
        return [grammar_schema(item) for item in schema]
    return schema


def request_fields(
    dialect: str, *, name: str, schema: dict[str, Any], messages: list[dict[str, str]]
) -> dict[str, Any]:
    """The chat-completions request fields that ask for JSON matching ``schema``.

    Returns keyword arguments for ``client.chat.completions.create`` (``messages``
    included, since the ``prompt`` dialect adds the schema to them).
    """
    sent = grammar_schema(schema)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"
    if dialect == "json_schema":
        return {
            "messages": messages,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": sent, "strict": False},
            },
        }
    if dialect == "json_object":
        return {"messages": messages, "response_format": {"type": "json_object", "schema": sent}}
    if dialect == "guided_json":
        return {"messages": messages, "extra_body": {"guided_json": sent}}
    if dialect == "tools":
        return {
            "messages": messages,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": "Reply by calling this function with your answer.",
                        "parameters": sent,
                    },
                }
            ],
            "tool_choice": {"type": "function", "function": {"name": name}},
        }
    if dialect == "prompt":
        instruction = (
            "Reply with one JSON object valid against this JSON Schema, and nothing else:\n"
            + json.dumps(sent, separators=(",", ":"))
        )
        return {"messages": [*messages, {"role": "system", "content": instruction}]}
    raise ValueError(f"Unknown structured-output dialect {dialect!r}; use one of {DIALECTS}.")


def completion_text(dialect: str, completion: object) -> str | None:
    """The answer's text: the forced tool call's arguments for ``tools``, else the content.

    None when the body is not a usable chat completion.
    """
    # Without strict response validation the SDK hands back a plain str for a
    # non-JSON content type, and builds models without the fields a server left out.
    if not isinstance(completion, ChatCompletion):
        return None
    choices = getattr(completion, "choices", None)
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    if dialect == "tools":
        for call in getattr(message, "tool_calls", None) or []:
            arguments = getattr(getattr(call, "function", None), "arguments", None)
            if isinstance(arguments, str):
                return arguments
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def status_is_request_error(status_code: int, body: str) -> bool:
    """A refusal of the request itself, which no retry fixes.

    Every 4xx but 408 (request timeout) and 429 (rate limit); and a 500 whose body says
    the request is unsupported (llama-cpp-python answers 500 to a response format it
    does not know).
    """
    if 400 <= status_code < 500:
        return status_code not in (408, 429)
    if status_code == 500:
        return bool(_UNSUPPORTED_RE.search(body or ""))
    return False


def probe_answer_valid(text: str | None) -> bool:
    """Whether a probe's reply is the JSON object the probe schema asks for."""
    if not text:
        return False
    try:
        document = json.loads(text.strip(), strict=False)
    except ValueError:
        return False
    return (
        isinstance(document, dict)
        and isinstance(document.get("ok"), bool)
        and document.get("colour") in ("red", "green")
    )


# --- the probe's cache ---------------------------------------------------------------
_cache_lock = threading.Lock()
_memory: dict[str, str] = {}


def cache_key(base_url: str | None, model: str) -> str:
    """The server and model a probed dialect belongs to, as stored in the cache file: a
    password in the URL (``https://user:pass@host``) is redacted, the server still told
    apart by its host and path."""
    from traces.redaction import redact_text

    return f"{redact_text((base_url or 'https://api.openai.com/v1').rstrip('/'))}|{model}"


def cache_path() -> Path:
    from django.conf import settings

    return Path(settings.LLM_STRUCTURED_OUTPUT_CACHE)


def cached_dialect(key: str) -> str | None:
    """The dialect the probe found for ``key`` (this process first, then the file)."""
    with _cache_lock:
        if key in _memory:
            return _memory[key]
        dialect = _read_cache().get(key, {}).get("dialect")
        if dialect in DIALECTS:
            _memory[key] = dialect
            return str(dialect)
    return None


def cache_store(key: str, dialect: str, *, tried: dict[str, str]) -> None:
    """Remember the probe's result, in this process and in the cache file."""
    with _cache_lock:
        _memory[key] = dialect
        data = _read_cache()
        data[key] = {"dialect": dialect, "tried": tried}
        path = cache_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
            tmp.replace(path)
        except OSError as exc:
            logger.warning("llm.probe_cache_unwritable", extra={"error": str(exc)})


def cache_forget(key: str) -> None:
    with _cache_lock:
        _memory.pop(key, None)


def cache_entry(key: str) -> dict[str, Any]:
    with _cache_lock:
        entry = _read_cache().get(key, {})
        return entry if isinstance(entry, dict) else {}


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
