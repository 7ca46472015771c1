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
