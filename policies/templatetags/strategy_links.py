"""Strategy sections other apps' pages include by name.

The trace pages belong to ``traces``, the lowest layer, which may not import ``policies``:
they load this library in their template instead, so the import still points down.
"""

from __future__ import annotations

from typing import Any

from django import template

from policies.selectors import strategies_for_trace

register = template.Library()


@register.inclusion_tag("policies/_trace_strategies.html")
def trace_strategies(trace: Any, applied_ids: list[int]) -> dict[str, Any]:
    """The strategies a trace produced and those that fired in it, with their evidence."""
    links = strategies_for_trace(trace_id=trace.pk, applied_ids=list(applied_ids))
    return {"trace": trace, "produced": links.produced, "applied": links.applied}
