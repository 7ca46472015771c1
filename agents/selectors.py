"""Reads of the agents app for the admins' tools page."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from agents.models import Agent, Tool, ToolAlert
from traces.models import StepRollupHourly, Trace
from traces.rollups import hour_of

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
    """Per-tool calls and failed calls by error type in customer traffic, in one query.

    Reads the hourly step rollups (``traces.rollups``), never the Step table: the hours
    from the one holding ``since`` to the one before ``until``'s end, so the cost follows
    the window's hours and tools whatever the number of steps. Replays and experiments
    of the learning loop are left out, as on the dashboards.
    """
    until = until or timezone.now()
    rates = {name: ToolErrorRate() for name in tool_names}
    if not tool_names:
        return rates
    rows = (
        StepRollupHourly.objects.filter(
            tool_name__in=tool_names,
            origin=Trace.Origin.CUSTOMER,
            period_start__gte=hour_of(since),
            period_start__lt=until,
            action_steps__gt=0,
        )
        .values("tool_name", "error_type")
        .annotate(calls=Sum("action_steps"), errors=Sum("failed_action_steps"))
        .order_by()
    )
    for row in rows:
        rate = rates[row["tool_name"]]
        rate.calls += row["calls"]
        if row["errors"]:
            error_type = row["error_type"] or "UNCLASSIFIED"
            rate.errors += row["errors"]
            rate.by_type[error_type] = rate.by_type.get(error_type, 0) + row["errors"]
    return rates
