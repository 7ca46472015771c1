"""The simulated model's answer to a Reflexion prompt.

Like the rest of the simulated backend it reads only the prompt text: the failed trace's
fields printed there. It maps the error type to a generic, plausible fix — the kind a real
model proposes — and, at ``vague_rate``, an unanchored non-answer the quality gates must
reject. It knows nothing about any benchmark's tasks or answers.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any


def _field(prompt: str, name: str) -> str:
    match = re.search(rf"^- {re.escape(name)}: (.*)$", prompt, re.MULTILINE)
    return match.group(1).strip() if match else ""


def reflexion_text(prompt: str, rng: random.Random, *, vague_rate: float = 0.0) -> str:
    error_type = _field(prompt, "error_type")
    tool = _field(prompt, "tool")
    tool = "" if tool == "-" else tool
    trace_id = _field(prompt, "trace_id")
    status = _field(prompt, "status_code")
    try:
        action_input: dict[str, Any] = json.loads(_field(prompt, "action_input") or "{}")
    except ValueError:
        action_input = {}
    cited = (
        ["error_type"]
        + (["tool"] if tool else [])
        + (["status_code"] if status not in ("", "-") else [])
    )
    if rng.random() < vague_rate:
        return json.dumps(
            {
                "root_cause": "the model was not careful enough",
                "strategy_update": "be more careful next time",
                "kind": "prompt_hint",
                "branch": {"text": "Be more careful next time."},
                "cited_trace_ids": [trace_id],
                "cited_fields": [],
            }
        )
    kind, branch, cause, update = _proposal(error_type, tool, action_input)
    return json.dumps(
        {
            "root_cause": cause,
            "strategy_update": update,
            "kind": kind,
            "branch": branch,
            "cited_trace_ids": [trace_id] if trace_id else [],
            "cited_fields": cited,
        },
        ensure_ascii=False,
    )


def _hint(text: str, error_type: str) -> dict[str, Any]:
    return {"text": text, "error_type": error_type}


def _proposal(
    error_type: str, tool: str, action_input: dict[str, Any]
) -> tuple[str, dict[str, Any], str, str]:
    first_arg = next(iter(action_input), "")
    if error_type == "HALLUCINATED_ANSWER":
        return (
            "prompt_hint",
            _hint(
                "Call a tool before answering and cite only facts from its observation; "
                "never answer without one.",
                error_type,
            ),
            "final answer stated facts no tool returned",
            "Require a tool call before any final answer",
        )
    if error_type == "MODEL_FORMAT_ERROR":
        return (
            "prompt_hint",
            _hint(
                "Reply with exactly one well-formed JSON object: double quotes, no trailing "
                "commas, nothing else.",
                error_type,
            ),
            "reasoning output was not valid JSON",
            "Remind the model to emit one well-formed JSON object",
        )
    if error_type == "LOOP_DETECTED":
        return (
            "prompt_hint",
            _hint(
                "Never repeat the same tool call with the same arguments; answer from the "
                "observations you already have.",
                error_type,
            ),
            "same tool call repeated with identical arguments",
            "Forbid identical repeated calls; answer from existing observations",
        )
    if error_type == "MAX_STEPS":
        return (
            "prompt_hint",
            _hint(
                "Give the final answer as soon as the observations cover the request.", error_type
            ),
            "run used every iteration without answering",
            "Answer as soon as observations cover the request",
        )
    if error_type in ("UNAUTHORIZED", "RATE_LIMITED"):
        cause = (
            f"access token for {tool or 'the API'} expired"
            if error_type == "UNAUTHORIZED"
            else f"{tool or 'the API'} throttled the request"
        )
        return (
            "error_handler",
            {"tool": tool, "on": error_type, "action": "retry_once"},
            cause,
            f"Refresh and retry {tool or 'the call'} once on {error_type}",
        )
    if error_type == "TYPE_MISMATCH" and first_arg:
        return (
            "prompt_hint",
            _hint(
                f"When calling {tool}, send {first_arg} with the exact JSON type its params "
                "schema declares (an integer, not a string).",
                error_type,
            ),
            f"{first_arg} sent with the wrong JSON type",
            f"Tell the model to send {first_arg} as the schema's integer type",
        )
    if error_type == "RESOURCE_NOT_FOUND" and tool in ("get_sku_price", "check_inventory"):
        return (
            "prompt_hint",
            _hint(
                "Look up SKU codes with search_products before calling get_sku_price or "
                "check_inventory; never pass a product name as sku.",
                error_type,
            ),
            f"{tool} called with something that is not a SKU",
            "Search the product first to get its SKU code",
        )
    return (
        "prompt_hint",
        _hint(
            f"Read {tool or 'each tool'}'s description and params schema before calling it, "
            "and use the exact id formats it shows.",
            error_type,
        ),
        f"{tool or 'tool'} call failed with {error_type}",
        f"Follow {tool or 'the tool'} schema and id formats exactly",
    )
