"""Reads of the agents app for the admins' tools page."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from agents.models import Agent, Tool, ToolAlert
from traces.models import Step

# The tools page edits the whitelist; of the roles only admin holds it (reviews/roles.py).
MANAGE_TOOLS = "agents.change_tool"

# Windows the error-rate column may cover, by URL value; the default is the first.
ERROR_WINDOWS: dict[str, timedelta] = {
    "24h": timedelta(hours=24),
    "1h": timedelta(hours=1),
    "7d": timedelta(days=7),
}


def tools_for_admin() -> QuerySet[Tool]:
    """Every tool row with its allowed agents and its count of unacknowledged alerts."""
    return (
        Tool.objects.order_by("name")
        .annotate(
            open_alerts=Count(
                "alerts",
                filter=Q(
                    alerts__kind=ToolAlert.Kind.SUSPENDED, alerts__acknowledged_by__isnull=True
                ),
            )
        )
        .prefetch_related("allowed_agents")
    )


def agents_all() -> QuerySet[Agent]:
    return Agent.objects.order_by("slug")


def tool_alerts_recent(*, tool: Tool, limit: int = 20) -> list[ToolAlert]:
    return list(tool.alerts.select_related("acknowledged_by").order_by("-created_at")[:limit])


@dataclass
class ToolErrorRate:
    """Tool calls of one tool over a window and how many failed, by error type."""

    calls: int = 0
    errors: int = 0
    by_type: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        return self.errors / self.calls if self.calls else None

    @property
    def top_errors(self) -> list[tuple[str, int]]:
        return sorted(self.by_type.items(), key=lambda item: (-item[1], item[0]))[:3]


def tool_error_rates(
    *, tool_names: list[str], since: datetime, until: datetime | None = None
) -> dict[str, ToolErrorRate]:
    """Per-tool call counts and error counts by type over [since, until), in one query.

    Reads the action steps through the ``step_tool_time`` index (tool_name, created_at):
    an IN list of the page's tool names and a bounded time range, grouped by tool and
    error type, so the cost follows the window's calls and not the Step table's size.
    This moves to the hourly/daily rollup tables by tool once they are merged (issue 7,
    item 1), which the pages are meant to read instead of Steps.
    """
    until = until or timezone.now()
    rates = {name: ToolErrorRate() for name in tool_names}
    if not tool_names:
        return rates
    rows = (
        Step.objects.filter(
            tool_name__in=tool_names,
            created_at__gte=since,
            created_at__lt=until,
            phase=Step.Phase.ACTION,
        )
        .values("tool_name", "ok", "error_type")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        rate = rates[row["tool_name"]]
        rate.calls += row["n"]
        if not row["ok"] or row["error_type"]:
            error_type = row["error_type"] or "UNCLASSIFIED"
            rate.errors += row["n"]
            rate.by_type[error_type] = rate.by_type.get(error_type, 0) + row["n"]
    return rates
