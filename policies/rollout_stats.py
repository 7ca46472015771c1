"""The arithmetic of canary rollouts, free of the database: bucketing and the verdict.

``policies.rollouts`` feeds it rows; ``bench.rollout`` feeds it a simulated day. Both go
through ``rollout_judge``, so the benchmark measures the code that runs in production.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Buckets per rollout: 10 000 lets a schedule step be a hundredth of a percent apart.
BUCKETS = 10_000
# Promote only when the canary's error rate is at least this much lower, relative (seed §3.4).
MIN_RELATIVE_IMPROVEMENT = 0.2


def rollout_bucket(*, rollout_id: int, key: str) -> int:
    """A bucket 0..9999 from the rollout id and a customer or session id.

    Deterministic (a conversation stays on one version while the percentage holds) and
    independent between rollouts (the same customers are not always the guinea pigs).
    """
    digest = hashlib.sha256(f"{rollout_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def routing_key(*, customer_id: str = "", session_id: str = "", trace_id: str = "") -> str:
    """What a run is bucketed by: its customer, else its session, else the run itself."""
    if customer_id:
        return f"customer:{customer_id}"
    if session_id:
        return f"session:{session_id}"
    return f"trace:{trace_id}" if trace_id else ""


def rollout_routes_canary(*, rollout_id: int, key: str, percent: float) -> bool:
    """Whether ``key`` runs the canary at ``percent`` (raising the percentage only adds keys)."""
    return rollout_bucket(rollout_id=rollout_id, key=key) < round(percent * BUCKETS / 100)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` (0..100) percentile by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class ArmStats:
    """One arm's runs in the window."""

    n: int = 0
    errors: int = 0
    successes: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    error_types: dict[str, int] = field(default_factory=dict)

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.n if self.n else None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.n if self.n else None

    @classmethod
    def from_runs(cls, runs: Sequence[tuple[bool, bool, float, str]]) -> ArmStats:
        """``runs``: (error, success, latency_ms, error_type) per run."""
        latencies = [latency for _, _, latency, _ in runs]
        types: dict[str, int] = {}
        for error, _, _, error_type in runs:
            if error and error_type:
                types[error_type] = types.get(error_type, 0) + 1
        return cls(
            n=len(runs),
            errors=sum(1 for error, _, _, _ in runs if error),
            successes=sum(1 for _, success, _, _ in runs if success),
            p50_ms=percentile(latencies, 50),
            p95_ms=percentile(latencies, 95),
            error_types=types,
        )


def normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def two_proportion_z(*, x1: int, n1: int, x2: int, n2: int) -> float:
    """z of p1 - p2 with the pooled standard error (0 when both rates are 0 or 1)."""
    if not n1 or not n2:
        return 0.0
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0
    return (x1 / n1 - x2 / n2) / se


def normal_quantile(p: float) -> float:
    """The z with ``normal_cdf(z) == p`` (bisection: exact to 1e-9, no SciPy needed)."""
    low, high = -10.0, 10.0
    for _ in range(80):
        middle = (low + high) / 2
        if normal_cdf(middle) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def rate_difference_interval(
    *, x1: int, n1: int, x2: int, n2: int, alpha: float
) -> tuple[float, float, float] | None:
    """p1 - p2 and its two-sided (1 - alpha) Wald interval; None while an arm has no run.
    What a guarded-rollout tile draws: the canary's difference from stable, and how sure."""
    if not n1 or not n2:
        return None
    p1, p2 = x1 / n1, x2 / n2
    half = normal_quantile(1 - alpha / 2) * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return p1 - p2, p1 - p2 - half, p1 - p2 + half


@dataclass(frozen=True)
class RolloutRules:
    alpha: float = 0.05
    min_samples: int = 100
    latency_budget_ms: float = 100.0
    latency_min_samples: int = 30
    burst: int = 5
    min_improvement: float = MIN_RELATIVE_IMPROVEMENT


def rules_from(source: Any) -> RolloutRules:
    """The rules named by ``source``'s ROLLOUT_* settings (django.conf.settings, or the
    settings module itself for a caller without Django set up)."""
    return RolloutRules(
        alpha=source.ROLLOUT_ALPHA,
        min_samples=source.ROLLOUT_MIN_SAMPLES,
        latency_budget_ms=source.ROLLOUT_LATENCY_BUDGET_MS,
        latency_min_samples=source.ROLLOUT_LATENCY_MIN_SAMPLES,
        burst=source.ROLLOUT_BURST,
    )


def schedule_from(source: Any) -> list[int]:
    """ROLLOUT_SCHEDULE sorted, without steps outside 1..100 (``[100]`` when empty)."""
    steps = sorted({int(p) for p in source.ROLLOUT_SCHEDULE if 0 < int(p) <= 100})
    return steps or [100]


@dataclass(frozen=True)
class Verdict:
    """``action``: wait (too few runs), hold, promote or rollback; with the numbers."""

    action: str
    reason: str
    statistic: float | None = None
    p_value: float | None = None
    burst: dict[str, int] = field(default_factory=dict)


def rollout_judge(*, canary: ArmStats, stable: ArmStats, rules: RolloutRules) -> Verdict:
    """Compare the canary with stable over one window.

    - Roll back at once when ``rules.burst`` canary runs failed with an error type no
      stable run in the window failed with.
    - Below ``min_samples`` runs in either arm: wait.
    - Roll back when the canary's error rate is significantly higher (one-sided z-test at
      ``alpha``) or its p95 breaks the latency budget.
    - Promote when its error rate is at least 20% lower relative, significantly so, and
      its p95 is less than the budget above stable's.
    - Otherwise hold. Latency is judged only from ``latency_min_samples`` runs per arm;
      until then a canary can neither be promoted nor rolled back for latency.
    """
    burst = {
        error_type: count
        for error_type, count in sorted(canary.error_types.items())
        if count >= rules.burst and not stable.error_types.get(error_type)
    }
    if burst:
        names = ", ".join(f"{name} x{count}" for name, count in burst.items())
        return Verdict(
            "rollback", f"burst of an error type stable does not show: {names}", burst=burst
        )
    if canary.n < rules.min_samples or stable.n < rules.min_samples:
        return Verdict(
            "wait",
            f"{canary.n} canary and {stable.n} stable runs; {rules.min_samples} each needed",
        )
    z = two_proportion_z(x1=canary.errors, n1=canary.n, x2=stable.errors, n2=stable.n)
    p_worse = 1 - normal_cdf(z)
    p_better = normal_cdf(z)
    latency_known = (
        canary.n >= rules.latency_min_samples
        and stable.n >= rules.latency_min_samples
        and canary.p95_ms is not None
        and stable.p95_ms is not None
    )
    over_budget = (
        latency_known
        and canary.p95_ms is not None
        and stable.p95_ms is not None
        and canary.p95_ms >= stable.p95_ms + rules.latency_budget_ms
    )
    if z > 0 and p_worse < rules.alpha:
        return Verdict(
            "rollback",
            f"error rate significantly higher (p={p_worse:.4f} < {rules.alpha})",
            statistic=z,
            p_value=p_worse,
        )
    if over_budget:
        return Verdict(
            "rollback",
            f"p95 {canary.p95_ms:.0f} ms is not under stable's {stable.p95_ms:.0f} ms "
            f"+ {rules.latency_budget_ms:.0f} ms",
            statistic=z,
            p_value=p_worse if z > 0 else p_better,
        )
    canary_rate, stable_rate = canary.error_rate or 0.0, stable.error_rate or 0.0
    improvement = (stable_rate - canary_rate) / stable_rate if stable_rate else 0.0
    if z < 0 and p_better < rules.alpha and improvement >= rules.min_improvement:
        if not latency_known:
            return Verdict(
                "hold",
                f"error rate {improvement:.0%} lower, but p95 needs "
                f"{rules.latency_min_samples} runs per arm",
                statistic=z,
                p_value=p_better,
            )
        return Verdict(
            "promote",
            f"error rate {improvement:.0%} lower (p={p_better:.4f} < {rules.alpha}), "
            f"p95 within {rules.latency_budget_ms:.0f} ms",
            statistic=z,
            p_value=p_better,
        )
    return Verdict(
        "hold",
        f"error rate {canary_rate:.1%} vs {stable_rate:.1%}: no significant 20% improvement",
        statistic=z,
        p_value=p_better if z <= 0 else p_worse,
    )


def schedule_next(schedule: Sequence[int], percent: int) -> int:
    """The first step above ``percent`` (100 when none is left)."""
    for step in sorted(schedule):
        if step > percent:
            return min(step, 100)
    return 100
