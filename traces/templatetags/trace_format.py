"""Template filters that show stored step data as people read it, never as Python reprs."""

from __future__ import annotations

import json
from typing import Any

from django import template

from traces.models import Step

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON of a stored value (a dict renders as ``{"a": 1}``, not ``{'a': 1}``)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def compact_json(value: Any) -> str:
    """One-line JSON of a stored value, for inputs shown inline."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def model_reply(step: Step) -> str:
    """What the model answered in an LLM step, as recorded, ready to show.

    A parsed reasoning reply is stored across the step's fields; an unparseable one keeps
    its raw text in ``response_summary``; other phases keep the parsed reply in ``details``.
    """
    if step.phase == Step.Phase.REASONING and step.ok:
        return pretty_json(
            {
                "thought": step.thought,
                "action": step.tool_name or Step.ActionType.FINAL_ANSWER,
                "action_input": step.action_input,
                "expectation": step.details.get("expectation", ""),
                "final_answer": step.details.get("final_answer"),
            }
        )
    if step.ok and step.details:
        return pretty_json(step.details)
    return step.response_summary or step.error_detail


@register.filter
def took(started: Any, finished: Any) -> str:
    """How long from ``started`` to ``finished``, to the second under an hour ("0.4 s",
    "2 min 5 s"); Django's ``timesince`` says "0 minutes" for most jobs."""
    try:
        seconds = max(0.0, (finished - started).total_seconds())
    except (TypeError, AttributeError):
        return ""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
