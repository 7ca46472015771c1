"""Reads of the policy tree, including the compiled policy every run applies."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import Aggregate, Count, FloatField, Prefetch, Q, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone

from agents.policy_runtime import EMPTY_POLICY, RuntimePolicy
from policies.branches import runtime_policy_compile
from policies.models import (
    PolicyVersion,
    Rollout,
    RolloutDecision,
    Strategy,
    StrategyConfidenceEvent,
)
from policies.rollout_stats import (
    percentile,
    rate_difference_interval,
    rollout_routes_canary,
    routing_key,
    rules_from,
)
from traces.models import Trace
from traces.selectors import traces_visible_to

# Reading the policy tree, its versions and strategy histories (ops, admins).
VIEW_POLICIES = "policies.view_policyversion"
# Pausing, resuming, setting, promoting and rolling back canary rollouts (ops, admins).
MANAGE_ROLLOUTS = "policies.manage_rollouts"

# Strategies a version lists that the runtime still applies (deprecated/rejected stop).
APPLIED_STATUSES = (Strategy.Status.ACTIVE, Strategy.Status.APPROVED, Strategy.Status.IN_REVIEW)

# A new version, a deprecation or a rollout percentage must reach every worker within a
# second: the routing state (the stable and canary policies and the split) is cached per
# process for at most half of that.
_CACHE_SECONDS = 0.5
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, PolicyRouting]] = {}


@dataclass(frozen=True)
class PolicyRouting:
    """What a process needs to route a run: stable, and the open rollout's canary if any."""

    stable: RuntimePolicy
    canary: RuntimePolicy | None = None
    rollout_id: int | None = None
    percent: int = 0

    def policy_for(self, *, key: str, bucket: int | None) -> RuntimePolicy:
        if self.canary is None or self.rollout_id is None or self.percent <= 0:
            return self.stable
        if key:
            on_canary = rollout_routes_canary(
                rollout_id=self.rollout_id, key=key, percent=self.percent
            )
        else:
            # Nothing names the conversation: the run's own bucket 0..99 decides.
            on_canary = bucket is not None and bucket < self.percent
        return self.canary if on_canary else self.stable


def policy_version_active() -> PolicyVersion | None:
    return PolicyVersion.objects.filter(is_active=True).first()


def rollout_open() -> Rollout | None:
    """The open rollout (running or paused): at most one exists."""
    return (
        Rollout.objects.select_related("version", "stable", "strategy").filter(is_open=True).first()
    )


def runtime_policy_build(version: PolicyVersion | None) -> RuntimePolicy:
    if version is None:
        return EMPTY_POLICY
    rows = version.strategies.filter(status__in=APPLIED_STATUSES).values_list(
        "id", "kind", "branch", "error_type"
    )
    return runtime_policy_compile(version=version.label, strategies=list(rows))


def policy_routing_build() -> PolicyRouting:
    stable = runtime_policy_build(policy_version_active())
    rollout = rollout_open()
    if rollout is None:
        return PolicyRouting(stable=stable)
    return PolicyRouting(
        stable=stable,
        canary=runtime_policy_build(rollout.version),
        rollout_id=rollout.pk,
        percent=rollout.percent,
    )


def policy_routing() -> PolicyRouting:
    key = "routing"
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(key)
        if cached and now - cached[0] < _CACHE_SECONDS:
            return cached[1]
    routing = policy_routing_build()
    with _cache_lock:
        _cache[key] = (now, routing)
    return routing


def runtime_policy_for_trace(trace: Trace) -> RuntimePolicy:
    """The policy ``trace``'s run executes (registered with the runtime, ``agents.hooks``).

    A conversation stays on one version: an open rollout buckets by customer or session. An
    A/B experiment's control arm runs without the learned strategies."""
    from policies.experiments import CONTROL, experiment_arm_for_run

    policy = runtime_policy_for_run(
        bucket=trace.policy_bucket,
        customer_id=trace.customer_id,
        session_id=trace.session_id,
        trace_id=str(trace.pk),
    )
    if experiment_arm_for_run(trace=trace) == CONTROL:
        return EMPTY_POLICY
    return policy


def runtime_policy_for_run(
    *, bucket: int | None = None, customer_id: str = "", session_id: str = "", trace_id: str = ""
) -> RuntimePolicy:
    """The policy a run applies: stable, or the open rollout's canary for the share of
    customers (else sessions, else runs) its percentage selects. ``bucket`` (0..99) only
    decides for a run that names none of them."""
    key = routing_key(customer_id=customer_id, session_id=session_id, trace_id=trace_id)
    return policy_routing().policy_for(key=key, bucket=bucket)


def runtime_policy_cache_clear() -> None:
    with _cache_lock:
        _cache.clear()


def strategies_citable(*, error_type: str, limit: int = 3) -> QuerySet[Strategy]:
    """Past strategies for this error type that Reflexion may cite (confidence >= 0.5)."""
    return (
        Strategy.objects.filter(error_type=error_type, confidence__gte=0.5)
        .exclude(status__in=[Strategy.Status.REJECTED, Strategy.Status.DEPRECATED])
        .prefetch_related("source_traces")
        .order_by("-confidence", "-updated_at")[:limit]
    )


@dataclass(frozen=True)
class TraceStrategies:
    """The strategies one trace is linked to, for its page."""

    produced: list[Strategy]  # learned from this trace (it is one of their source traces)
    applied: list[Strategy]  # fired in one of its steps


def source_traces_prefetch(*, lookup: str = "source_traces") -> Prefetch:
    """A strategy's source traces, newest first, with only what a link needs."""
    return Prefetch(
        lookup,
        queryset=Trace.objects.only("id", "query", "status", "created_at").order_by("-created_at"),
    )


def strategies_for_trace(*, trace_id: object, applied_ids: list[int]) -> TraceStrategies:
    """Strategies produced by or applied in one trace, in two queries however many."""
    rows = list(
        Strategy.objects.filter(Q(source_traces=trace_id) | Q(pk__in=applied_ids))
        .distinct()
        .prefetch_related(source_traces_prefetch())
        .order_by("pk")
    )
    produced = [s for s in rows if any(str(t.pk) == str(trace_id) for t in s.source_traces.all())]
    by_id = {s.pk: s for s in rows}
    applied = [by_id[pk] for pk in applied_ids if pk in by_id]
    return TraceStrategies(produced=produced, applied=applied)


# --- the policy pages ---------------------------------------------------------------------


def user_can_view_policies(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(VIEW_POLICIES))  # type: ignore[union-attr]


def policy_versions_page(*, before: int | None = None, limit: int = 25) -> list[PolicyVersion]:
    """Up to ``limit`` + 1 versions below number ``before``, newest first (keyset: the
    extra row only says whether an older page exists)."""
    qs = PolicyVersion.objects.select_related("parent", "author").prefetch_related(
        Prefetch("source_strategies", queryset=Strategy.objects.only("id", "kind", "tool_name"))
    )
    if before is not None:
        qs = qs.filter(number__lt=before)
    return list(qs.order_by("-number")[: limit + 1])


def strategies_by_id(ids: list[int]) -> dict[int, Strategy]:
    """Live rows (status, confidence) for the strategies a document lists, in one query."""
    return Strategy.objects.in_bulk(ids)


def strategy_confidence_history(
    *, strategy_id: int, limit: int = 200
) -> list[StrategyConfidenceEvent]:
    """The latest ``limit`` confidence moves, oldest first (for a chart and a table)."""
    latest = (
        StrategyConfidenceEvent.objects.filter(strategy_id=strategy_id)
        .select_related("trace")
        .only("id", "at", "old", "new", "reason", "trace_id", "trace__status")
        .order_by("-at", "-id")[:limit]
    )
    return list(reversed(list(latest)))


def strategy_source_traces(
    *, strategy: Strategy, user: AbstractBaseUser | AnonymousUser, limit: int = 50
) -> list[Trace]:
    """The runs a strategy was learned from that ``user`` may open, newest first."""
    visible = traces_visible_to(user=user).values("pk")
    return list(
        strategy.source_traces.filter(pk__in=visible)
        .only("id", "query", "status", "outcome", "llm_backend", "created_at")
        .order_by("-created_at")[:limit]
    )


def strategy_versions(*, strategy: Strategy, limit: int = 50) -> list[PolicyVersion]:
    """The versions that list ``strategy``, newest first."""
    return list(
        strategy.versions.only("id", "number", "is_active", "created_at").order_by("-number")[
            :limit
        ]
    )


def _guarded_metrics(
    buckets: list[datetime],
    cells: dict[tuple[datetime, str], dict[str, Any]],
    labels: dict[str, str],
) -> dict[str, Any]:
    """The canary's difference from stable per guarded metric, as a guarded rollout shows
    it: error and success rates over every run since the start (so the interval narrows as
    runs come in), with their (1 - alpha) interval; p95 latency per bucket. Error rate and
    latency with the line the evaluator acts on (an error rate significantly above 0, a p95
    the latency budget above stable's, roll back); the success rate is shown, not judged."""
    rules = rules_from(settings)
    totals = {arm: {"n": 0, "errors": 0, "successes": 0} for arm in labels}
    rates: dict[str, dict[str, list[float | None]]] = {
        name: {"diff": [], "low": [], "high": []} for name in ("error_rate", "success_rate")
    }
    p95: list[float | None] = []
    for at in buckets:
        for arm, label in labels.items():
            cell = cells.get((at, label)) or {}
            for counter, counts in totals[arm].items():
                totals[arm][counter] = counts + cell.get(counter, 0)
        canary, stable = totals["canary"], totals["stable"]
        for name, counter in (("error_rate", "errors"), ("success_rate", "successes")):
            interval = rate_difference_interval(
                x1=canary[counter],
                n1=canary["n"],
                x2=stable[counter],
                n2=stable["n"],
                alpha=rules.alpha,
            )
            for key, value in zip(("diff", "low", "high"), interval or (None,) * 3, strict=True):
                rates[name][key].append(None if value is None else round(value, 4))
        canary_p95 = (cells.get((at, labels["canary"])) or {}).get("p95")
        stable_p95 = (cells.get((at, labels["stable"])) or {}).get("p95")
        p95.append(
            None if canary_p95 is None or stable_p95 is None else round(canary_p95 - stable_p95, 1)
        )
    return {
        "alpha": rules.alpha,
        "n": {arm: totals[arm]["n"] for arm in labels},
        "error_rate": {**rates["error_rate"], "threshold": 0.0},
        # Shown, not judged: the evaluator acts on errors and latency alone.
        "success_rate": {**rates["success_rate"], "threshold": None},
        "p95_ms": {"diff": p95, "threshold": rules.latency_budget_ms},
    }


def strategy_rollouts(*, strategy: Strategy, limit: int = 20) -> list[Rollout]:
    """The canary rollouts that took ``strategy`` out, newest first."""
    return list(
        Rollout.objects.filter(strategy=strategy)
        .select_related("version")
        .order_by("-created_at")[:limit]
    )


def strategy_approvals_by_error_type(
    *, error_types: list[str]
) -> tuple[dict[str, list[datetime]], set[str]]:
    """When strategies for each error type were approved: the creation of the version each
    one introduced (a reviewer's approval and an auto-merge both publish one); and the
    types an approved strategy still covers (the runtime applies it: a type whose every
    approved strategy was since deprecated has none). One query."""
    approvals: dict[str, list[datetime]] = {}
    in_force: set[str] = set()
    if not error_types:
        return approvals, in_force
    rows = (
        Strategy.objects.filter(error_type__in=error_types, introduced_in__isnull=False)
        .order_by()
        .values_list("error_type", "introduced_in__created_at", "status")
    )
    for error_type, approved_at, status in rows:
        approvals.setdefault(error_type, []).append(approved_at)
        if status in APPLIED_STATUSES:
            in_force.add(error_type)
    return approvals, in_force


# --- the rollout pages --------------------------------------------------------------------


# A run that failed, or ended (handed over) after an error it could not get past.
RUN_ERROR = Q(status=Trace.Status.FAILED) | ~Q(error_type="")


class PercentileCont(Aggregate):
    """PostgreSQL's interpolated percentile (the same rule as ``rollout_stats.percentile``)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


def percentiles_in_database() -> bool:
    """PostgreSQL computes percentiles; SQLite (the embedded shape) does not."""
    return connection.vendor == "postgresql"


def user_can_manage_rollouts(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(MANAGE_ROLLOUTS))  # type: ignore[union-attr]


def rollouts_page(*, limit: int = 100) -> list[Rollout]:
    """The open rollout first, then the latest ended ones."""
    return list(
        Rollout.objects.select_related("version", "stable", "strategy", "created_by").order_by(
            "-is_open", "-created_at", "-id"
        )[:limit]
    )


def rollout_decisions(*, rollout: Rollout) -> list[RolloutDecision]:
    return list(rollout.decisions.select_related("actor").order_by("at", "id"))


def _series_bucket(span_seconds: float) -> str:
    if span_seconds <= 3 * 3600:
        return "minute"
    if span_seconds <= 4 * 86400:
        return "hour"
    return "day"


def rollout_series(*, rollout: Rollout) -> dict[str, Any]:
    """Canary and stable per time bucket since the rollout started: runs, error rate,
    success rate and p95 latency, plus the canary percentage after each decision."""
    start = rollout.created_at
    end = rollout.ended_at or timezone.now()
    bucket = _series_bucket((end - start).total_seconds())
    labels = {"canary": rollout.version.label}
    labels["stable"] = rollout.stable.label if rollout.stable is not None else ""
    runs = Trace.objects.filter(
        origin=Trace.Origin.CUSTOMER,
        status__in=Trace.TERMINAL_STATUSES,
        created_at__gte=start,
        created_at__lte=end,
        policy_version__in=list(labels.values()),
    ).annotate(at=Trunc("created_at", bucket, tzinfo=UTC))
    counts: dict[str, Any] = {
        "n": Count("id"),
        "errors": Count("id", filter=RUN_ERROR),
        "successes": Count("id", filter=Q(status=Trace.Status.FINISHED)),
    }
    if percentiles_in_database():
        counts["p95"] = PercentileCont("total_latency_ms", 0.95)
    rows = list(runs.values("at", "policy_version").annotate(**counts).order_by("at"))
    if not percentiles_in_database():
        # SQLite: the p95 of each cell in Python (the embedded shape's volumes are small).
        latencies: dict[tuple[datetime, str], list[float]] = {}
        for at, label, latency in runs.values_list("at", "policy_version", "total_latency_ms"):
            latencies.setdefault((at, label), []).append(latency)
        for row in rows:
            row["p95"] = percentile(latencies.get((row["at"], row["policy_version"]), []), 95)
    buckets: list[datetime] = []
    cells: dict[tuple[datetime, str], dict[str, Any]] = {}
    for row in rows:
        if row["at"] not in buckets:
            buckets.append(row["at"])
        cells[(row["at"], row["policy_version"])] = row

    def arm(label: str) -> dict[str, list[Any]]:
        series: dict[str, list[Any]] = {"n": [], "error_rate": [], "success_rate": [], "p95_ms": []}
        for at in buckets:
            cell = cells.get((at, label))
            n = cell["n"] if cell else 0
            series["n"].append(n)
            series["error_rate"].append(round(cell["errors"] / n, 4) if cell and n else None)
            series["success_rate"].append(round(cell["successes"] / n, 4) if cell and n else None)
            series["p95_ms"].append(round(cell["p95"], 1) if cell and n else None)
        return series

    return {
        "bucket": bucket,
        "buckets": [at.isoformat() for at in buckets],
        "canary": {"label": labels["canary"], **arm(labels["canary"])},
        "stable": {"label": labels["stable"] or "no policy", **arm(labels["stable"])},
        "guard": _guarded_metrics(buckets, cells, labels),
        "decisions": [
            {"at": d.at.isoformat(), "action": d.action, "to_percent": d.to_percent}
            for d in rollout.decisions.order_by("at", "id")
        ],
    }
