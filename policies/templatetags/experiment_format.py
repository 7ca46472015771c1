"""Number formats of the experiment report: rates as percentages, differences signed."""

from __future__ import annotations

import math

from django import template

register = template.Library()

# Shown where nothing was measured yet.
NOTHING = "\N{EN DASH}"


@register.filter
def percent(value: float | None) -> str:
    """0.897 -> "89.7%"; nothing measured -> an en dash."""
    return NOTHING if value is None else f"{value * 100:.1f}%"


@register.filter
def points(value: float | None) -> str:
    """A difference of two rates in percentage points, signed: 0.176 -> "+17.6 pts"."""
    return NOTHING if value is None else f"{value * 100:+.1f} pts"


@register.filter
def signed(value: float | None, digits: int = 2) -> str:
    """A signed number: 0.5 -> "+0.50"."""
    if value is None:
        return NOTHING
    if math.isinf(value):
        return "+\N{INFINITY}" if value > 0 else "\N{MINUS SIGN}\N{INFINITY}"
    return f"{value:+.{int(digits)}f}"


@register.filter
def number(value: float | None, digits: int = 2) -> str:
    """A number; a t statistic of two constant samples that differ is infinite."""
    if value is not None and math.isinf(value):
        return signed(value)
    return NOTHING if value is None else f"{value:.{int(digits)}f}"
