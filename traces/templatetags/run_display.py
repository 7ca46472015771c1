"""Filters the chat uses to show a run's steps."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def compact_json(value: Any) -> str:
    """A tool input as compact JSON (not a Python repr); autoescaped by the template."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def answer_evidence(run: Any) -> dict[str, list[dict[str, Any]]]:
    """What an ended run's answer rests on, for the chat: the facts its final step recorded
    (each with the step it came from) and the learned strategies that fired in any step,
    once each, in the order they first fired. Reads the run's prefetched steps when the
    page prefetched them (the chat does), else one query."""
    facts: list[dict[str, Any]] = []
    strategies: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for step in run.steps.all():
        for applied in step.strategies_applied or ():
            if isinstance(applied, dict) and applied.get("id") not in seen:
                seen.add(applied.get("id"))
                strategies.append(applied)
        details = step.details if isinstance(step.details, dict) else {}
        if step.phase == "final" and isinstance(details.get("facts"), list):
            facts = [fact for fact in details["facts"] if isinstance(fact, dict)]
    return {"facts": facts, "strategies": strategies}
