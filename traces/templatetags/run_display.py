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
