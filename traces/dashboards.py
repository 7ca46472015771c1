"""Reads behind the dashboards: every number comes from the rollup tables, none from Steps.

A window ends at the end of the current hour (hour buckets) or UTC day (day buckets) and
reads the hourly or the daily tables accordingly, so each query touches at most a few
thousand pre-aggregated rows whatever the number of steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet, Sum
from django.utils.dateparse import parse_datetime

from traces.models import (
    ErrorType,
    RunRollupDaily,
    RunRollupHourly,
    StepRollupDaily,
    StepRollupHourly,
    Trace,
)
from traces.rollups import BUCKET_BANDS, day_of, hour_of

HOUR = "hour"
DAY = "day"
# window key -> (length, default bucket, allowed buckets)
WINDOWS: dict[str, tuple[timedelta, str, tuple[str, ...]]] = {
    "24h": (timedelta(hours=24), HOUR, (HOUR,)),
    "7d": (timedelta(days=7), HOUR, (HOUR, DAY)),
    "30d": (timedelta(days=30), DAY, (DAY,)),
}
DEFAULT_WINDOW = "7d"
ORIGIN_ALL = "all"
BREAKDOWNS = {"tool": "tool_name", "endpoint": "endpoint", "policy_version": "policy_version"}
BREAKDOWN_LIMIT = 12
# A filter value meaning "blank": the steps with no tool, endpoint or policy version.
NONE_VALUE = "(none)"


def matches(column: str, value: str) -> Q:
    """``column`` equal to a filter value, ``NONE_VALUE`` standing for blank."""
    return Q(**{column: "" if value == NONE_VALUE else value})


@dataclass(frozen=True)
class Window:
    """A half-open time range [start, end) read at one bucket size."""

    key: str
    start: datetime
    end: datetime
    bucket: str

    @property
    def step(self) -> timedelta:
        return timedelta(hours=1) if self.bucket == HOUR else timedelta(days=1)

    @property
    def previous(self) -> Window:
        length = self.end - self.start
        return replace(self, start=self.start - length, end=self.start)

    def bucket_starts(self) -> list[datetime]:
        starts, moment = [], self.start
        while moment < self.end:
            starts.append(moment)
            moment += self.step
        return starts


def window_resolve(*, key: str, now: datetime, bucket: str = "") -> Window:
    """The window ``key`` (unknown keys fall back to 7d) ending with the current bucket."""
    if key not in WINDOWS:
        key = DEFAULT_WINDOW
    length, default_bucket, allowed = WINDOWS[key]
    bucket = bucket if bucket in allowed else default_bucket
    end = hour_of(now) + timedelta(hours=1) if bucket == HOUR else day_of(now) + timedelta(days=1)
    return Window(key=key, start=end - length, end=end, bucket=bucket)


@dataclass(frozen=True)
class RollupFilters:
    """The global filters of the dashboards; blank means any. Origin defaults to customers."""

    origin: str = Trace.Origin.CUSTOMER
    agent_id: int | None = None
    policy_version: str = ""
    bucket_band: int | None = None
    tool_name: str = ""
    endpoint: str = ""
    error_type: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> RollupFilters:
        """Read the filters from a query string; values that cannot be valid are ignored."""
        origin = params.get("origin", "")
        agent = params.get("agent", "")
        band = params.get("bucket", "")
        error_type = params.get("error_type", "")
        return cls(
            origin=origin
            if origin in (*Trace.Origin.values, ORIGIN_ALL)
            else Trace.Origin.CUSTOMER,
            agent_id=int(agent) if agent.isdigit() and len(agent) < 10 else None,
            policy_version=params.get("policy_version", "")[:40],
            bucket_band=int(band) if band.isdigit() and int(band) in BUCKET_BANDS else None,
            tool_name=params.get("tool", "")[:64],
            endpoint=params.get("endpoint", "")[:300],
            error_type=error_type if error_type in ErrorType.values else "",
        )

    def as_params(self) -> dict[str, str]:
        """The filters as trace-list / dashboard query parameters (blank ones left out)."""
        values = {
            "origin": self.origin if self.origin != Trace.Origin.CUSTOMER else "",
            "agent": "" if self.agent_id is None else str(self.agent_id),
            "policy_version": self.policy_version,
            "bucket": "" if self.bucket_band is None else str(self.bucket_band),
            "tool": self.tool_name,
            "endpoint": self.endpoint,
            "error_type": self.error_type,
        }
        return {name: value for name, value in values.items() if value}

    def run_q(self) -> Q:
        q = Q()
        if self.origin != ORIGIN_ALL:
            q &= Q(origin=self.origin)
        if self.agent_id is not None:
            q &= Q(agent_id=self.agent_id)
        if self.policy_version:
            q &= matches("policy_version", self.policy_version)
        if self.bucket_band is not None:
            q &= Q(bucket_band=self.bucket_band)
        return q

    def step_q(self) -> Q:
        q = self.run_q()
        if self.tool_name:
            q &= matches("tool_name", self.tool_name)
        if self.endpoint:
            q &= matches("endpoint", self.endpoint)
        if self.error_type:
            q &= Q(error_type=self.error_type)
        else:
            q &= ~Q(error_type="")
        return q


def _step_rows(window: Window) -> QuerySet[Any]:
    model = StepRollupHourly if window.bucket == HOUR else StepRollupDaily
    return model.objects.order_by()


def _run_rows(window: Window) -> QuerySet[Any]:
    model = RunRollupHourly if window.bucket == HOUR else RunRollupDaily
    return model.objects.order_by()


def _in(window: Window, prefix: str = "") -> Q:
    return Q(
        **{f"{prefix}period_start__gte": window.start, f"{prefix}period_start__lt": window.end}
    )


@dataclass(frozen=True)
class Kpi:
    """One figure of the overview with the same figure over the previous window."""

    key: str
    label: str
    value: float | None
    previous: float | None
    unit: str = ""
    higher_is_better: bool = True

    @property
    def change(self) -> float | None:
        if self.value is None or self.previous is None:
            return None
        return self.value - self.previous

    @property
    def trend(self) -> str:
        """``better``, ``worse`` or ``flat`` against the previous window; blank if unknown."""
        change = self.change
        if change is None:
            return ""
        if abs(change) < 1e-9:
            return "flat"
        return "better" if (change > 0) == self.higher_is_better else "worse"

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "value": self.value,
            "previous": self.previous,
            "change": self.change,
            "trend": self.trend,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
        }


_RUN_SUMS = (
    "runs",
    "successes",
    "first_response_successes",
    "action_steps",
    "resolution_ms_sum",
    "handovers",
    "tokens",
    "cost_usd",
)


def _ratio(numerator: Any, denominator: Any, scale: float = 1.0) -> float | None:
    if not denominator:
        return None
    return float(numerator or 0) * scale / float(denominator)


def _kpis_from_sums(sums: Mapping[str, Any]) -> dict[str, float | None]:
    runs = sums["runs"] or 0
    return {
        "runs": float(runs),
        "success_rate": _ratio(sums["successes"], runs, 100),
        "error_rate": _ratio(sums["errors"], runs, 100),
        "first_response_success_rate": _ratio(sums["first_response_successes"], runs, 100),
        "mean_action_steps": _ratio(sums["action_steps"], runs),
        "mean_resolution_s": _ratio(sums["resolution_ms_sum"], runs, 0.001),
        "takeover_rate": _ratio(sums["handovers"], runs, 100),
        "tokens": float(sums["tokens"] or 0),
        "cost_usd": float(sums["cost_usd"] or Decimal(0)),
    }


KPI_LABELS: tuple[tuple[str, str, str, bool], ...] = (
    ("runs", "Runs", "", True),
    ("success_rate", "Success rate", "%", True),
    ("error_rate", "Error rate", "%", False),
    ("first_response_success_rate", "First-response success", "%", True),
    ("mean_action_steps", "Mean action steps per query", "", False),
    ("mean_resolution_s", "Mean resolution time", "s", False),
    ("takeover_rate", "Human-takeover rate", "%", False),
    ("tokens", "Tokens", "", False),
    ("cost_usd", "Cost", "USD", False),
)


def kpis_for_window(*, window: Window, filters: RollupFilters) -> list[Kpi]:
    """The run KPIs of seed §5.1 for ``window`` and the one before it, in one query."""
    previous = window.previous
    aggregates: dict[str, Any] = {}
    for name in _RUN_SUMS:
        aggregates[f"cur_{name}"] = Sum(name, filter=_in(window))
        aggregates[f"prev_{name}"] = Sum(name, filter=_in(previous))
    # Runs that ended with an error type (a failed run, or a handover after a failure); the
    # run rollups keep the run's own error type, not its status.
    with_error = ~Q(error_type="")
    aggregates["cur_errors"] = Sum("runs", filter=_in(window) & with_error)
    aggregates["prev_errors"] = Sum("runs", filter=_in(previous) & with_error)
    sums = (
        _run_rows(window)
        .filter(filters.run_q(), period_start__gte=previous.start, period_start__lt=window.end)
        .aggregate(**aggregates)
    )
    names = (*_RUN_SUMS, "errors")
    current = _kpis_from_sums({name: sums[f"cur_{name}"] for name in names})
    before = _kpis_from_sums({name: sums[f"prev_{name}"] for name in names})
    return [
        Kpi(
            key=key,
            label=label,
            value=current[key],
            previous=before[key],
            unit=unit,
            higher_is_better=higher,
        )
        for key, label, unit, higher in KPI_LABELS
    ]


@dataclass(frozen=True)
class NewErrorType:
    error_type: str
    first_seen: datetime
    approved_at: datetime | None = None
    # False once every approved strategy for the type was deprecated: the approval is
    # history, and nothing covers the type any more.
    in_force: bool = True

    @property
    def hours_to_approval(self) -> float | None:
        if self.approved_at is None:
            return None
        return max(0.0, (self.approved_at - self.first_seen).total_seconds() / 3600)


@dataclass(frozen=True)
class Discoveries:
    """Error types whose first customer occurrence falls in a window and the one before."""

    current: list[NewErrorType] = field(default_factory=list)
    previous: list[NewErrorType] = field(default_factory=list)


def error_types_first_seen(*, window: Window) -> Discoveries:
    """Error types first seen (in customer traffic, ever) during ``window`` or the one before.

    One query of one index probe per error type of the taxonomy: the first hourly row of
    each, read from the (error_type, origin, period_start) index, so it costs the same at
    a thousand rows and at millions.
    """
    table = connection.ops.quote_name(StepRollupHourly._meta.db_table)
    probe = (
        f"SELECT %s, (SELECT MIN(period_start) FROM {table} WHERE error_type = %s AND origin = %s)"
    )
    types = ErrorType.values
    params: list[str] = []
    for error_type in types:
        params += [error_type, error_type, Trace.Origin.CUSTOMER]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join([probe] * len(types)), params)
        rows = cursor.fetchall()
    previous = window.previous
    current, before = [], []
    for error_type, first in rows:
        if first is None:
            continue
        if isinstance(first, str):  # SQLite hands an untyped MIN() back as text
            first = parse_datetime(first)
            if first is not None and first.tzinfo is None:
                first = first.replace(tzinfo=UTC)
        found = NewErrorType(error_type=error_type, first_seen=first)
        if window.start <= found.first_seen < window.end:
            current.append(found)
        elif previous.start <= found.first_seen < previous.end:
            before.append(found)
    current.sort(key=lambda item: item.first_seen)
    before.sort(key=lambda item: item.first_seen)
    return Discoveries(current=current, previous=before)


def discoveries_with_approvals(
    discoveries: Discoveries,
    *,
    approvals: Mapping[str, list[datetime]],
    in_force: set[str] | None = None,
) -> Discoveries:
    """Attach the first approval at or after each type's first occurrence.

    ``approvals`` maps an error type to the times strategies for it were approved, and
    ``in_force`` names the types an approved strategy still covers (None: all of them); the
    caller reads both from the policy tree (this layer cannot).
    """

    def attach(items: list[NewErrorType]) -> list[NewErrorType]:
        attached = []
        for item in items:
            later = [at for at in approvals.get(item.error_type, []) if at >= item.first_seen]
            attached.append(
                replace(
                    item,
                    approved_at=min(later) if later else None,
                    in_force=in_force is None or item.error_type in in_force,
                )
            )
        return attached

    return Discoveries(current=attach(discoveries.current), previous=attach(discoveries.previous))


def mean_hours_to_approval(items: list[NewErrorType]) -> float | None:
    hours = [h for h in (item.hours_to_approval for item in items) if h is not None]
    return sum(hours) / len(hours) if hours else None


def runs_over_time(*, window: Window, filters: RollupFilters) -> dict[str, Any]:
    """Runs, successes and handovers per bucket of ``window`` (zero-filled)."""
    rows = (
        _run_rows(window)
        .filter(filters.run_q(), _in(window))
        .values("period_start")
        .annotate(runs=Sum("runs"), successes=Sum("successes"), handovers=Sum("handovers"))
    )
    by_start = {row["period_start"]: row for row in rows}
    starts = window.bucket_starts()
    return {
        "buckets": [start.isoformat() for start in starts],
        "bucket": window.bucket,
        "series": {
            name: [int((by_start.get(start) or {}).get(name) or 0) for start in starts]
            for name in ("runs", "successes", "handovers")
        },
    }


def failures_over_time(*, window: Window, filters: RollupFilters) -> dict[str, Any]:
    """Failed steps per error type and bucket of ``window`` (zero-filled, biggest first)."""
    rows = (
        _step_rows(window)
        .filter(filters.step_q(), _in(window))
        .values("period_start", "error_type")
        .annotate(n=Sum("steps"))
    )
    starts = window.bucket_starts()
    index = {start: position for position, start in enumerate(starts)}
    series: dict[str, list[int]] = {}
    for row in rows:
        position = index.get(row["period_start"])
        if position is None:
            continue
        series.setdefault(row["error_type"], [0] * len(starts))[position] += int(row["n"])
    ordered = sorted(series.items(), key=lambda item: (-sum(item[1]), item[0]))
    return {
        "buckets": [start.isoformat() for start in starts],
        "bucket_ends": [(start + window.step).isoformat() for start in starts],
        "bucket": window.bucket,
        "series": [{"error_type": name, "counts": counts} for name, counts in ordered],
        "total": sum(sum(counts) for _, counts in ordered),
    }


def failures_breakdown(*, window: Window, filters: RollupFilters, by: str) -> dict[str, Any]:
    """Failed steps in ``window`` per tool, endpoint or policy version, biggest first."""
    column = BREAKDOWNS[by]
    rows = list(
        _step_rows(window)
        .filter(filters.step_q(), _in(window))
        .values(column)
        .annotate(n=Sum("steps"))
        .order_by("-n", column)[: BREAKDOWN_LIMIT + 1]
    )
    shown = rows[:BREAKDOWN_LIMIT]
    return {
        "by": by,
        "items": [{"value": row[column] or NONE_VALUE, "count": int(row["n"])} for row in shown],
        "truncated": len(rows) > BREAKDOWN_LIMIT,
    }


def failure_filter_choices(*, window: Window, filters: RollupFilters) -> dict[str, list[Any]]:
    """The values the global filters can take in ``window`` (one query on the daily table)."""
    rows = (
        StepRollupDaily.objects.order_by()
        .filter(
            ~Q(error_type=""),
            period_start__gte=day_of(window.start),
            period_start__lt=window.end,
            **({} if filters.origin == ORIGIN_ALL else {"origin": filters.origin}),
        )
        .values_list("agent_id", "policy_version", "tool_name", "endpoint")
        .distinct()
    )
    agents, versions, tools, endpoints = set(), set(), set(), set()
    for agent_id, version, tool, endpoint in rows:
        agents.add(agent_id)
        versions.add(version or NONE_VALUE)
        tools.add(tool or NONE_VALUE)
        endpoints.add(endpoint or NONE_VALUE)
    return {
        "agents": sorted(agents),
        "policy_versions": sorted(versions),
        "tools": sorted(tools),
        "endpoints": sorted(endpoints),
    }
