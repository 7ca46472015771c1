"""Writes of canary rollouts: start, the evaluator's verdicts and the manual controls.

A rollout serves an inactive version to ``percent`` of customers (``policies.selectors``
routes runs); the evaluator compares it with stable over a sliding window and promotes it
along ``ROLLOUT_SCHEDULE`` or rolls it back (``policies.rollout_stats`` has the rules).
Every decision is a ``RolloutDecision`` row with its numbers and an audit row. Each write
locks the rollout row and re-checks its state under the lock, so the evaluator and people
clicking at once cannot both move it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from policies.hooks import review_records
from policies.models import PolicyVersion, Rollout, RolloutDecision, Strategy
from policies.rollout_stats import (
    ArmStats,
    RolloutRules,
    Verdict,
    percentile,
    rollout_judge,
    rules_from,
    schedule_from,
    schedule_next,
)
from policies.selectors import (
    APPLIED_STATUSES,
    RUN_ERROR,
    PercentileCont,
    percentiles_in_database,
    runtime_policy_cache_clear,
)
from policies.services import audit, policy_members_with
from traces.models import Trace
from traces.redaction import redact_text

logger = logging.getLogger(__name__)

EVALUATOR = "evaluator"
# A hold is written to the history when the verdict changes, else at most this often.
HOLD_RECORD_SECONDS = 3600


class RolloutError(ValueError):
    """A manual control that does not apply to the rollout's state (shown to the user)."""


def rollout_rules() -> RolloutRules:
    return rules_from(settings)


def rollout_schedule() -> list[int]:
    return schedule_from(settings)


# --- the window -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutWindow:
    start: datetime
    end: datetime
    canary: ArmStats
    stable: ArmStats


def _stable_label(rollout: Rollout) -> str:
    return rollout.stable.label if rollout.stable is not None else ""


def arm_stats(*, version_label: str, start: datetime, end: datetime) -> ArmStats:
    """Customer runs that ran ``version_label`` and started in [start, end). An error is a
    failed run or one that ended with an error type (a handover after a failure)."""
    runs = Trace.objects.filter(
        origin=Trace.Origin.CUSTOMER,
        policy_version=version_label,
        status__in=Trace.TERMINAL_STATUSES,
        created_at__gte=start,
        created_at__lt=end,
    )
    aggregates: dict[str, Any] = {
        "n": Count("id"),
        "errors": Count("id", filter=RUN_ERROR),
        "successes": Count("id", filter=Q(status=Trace.Status.FINISHED)),
    }
    if percentiles_in_database():
        aggregates["p50"] = PercentileCont("total_latency_ms", 0.5)
        aggregates["p95"] = PercentileCont("total_latency_ms", 0.95)
    totals = runs.aggregate(**aggregates)
    if not percentiles_in_database():
        # SQLite (the embedded shape) has no percentile aggregate: same rule, in Python.
        latencies = list(runs.values_list("total_latency_ms", flat=True))
        totals["p50"], totals["p95"] = percentile(latencies, 50), percentile(latencies, 95)
    types = dict(
        runs.filter(RUN_ERROR)
        .exclude(error_type="")
        .order_by()
        .values_list("error_type")
        .annotate(count=Count("id"))
        .values_list("error_type", "count")
    )
    return ArmStats(
        n=totals["n"],
        errors=totals["errors"],
        successes=totals["successes"],
        p50_ms=totals["p50"],
        p95_ms=totals["p95"],
        error_types=types,
    )


def rollout_window(rollout: Rollout, *, now: datetime | None = None) -> RolloutWindow:
    """The current step's sliding window: from the later of the step's start and
    ``now - ROLLOUT_WINDOW``; a promotion starts a fresh window."""
    end = now or timezone.now()
    start = max(rollout.step_started_at, end - timedelta(seconds=settings.ROLLOUT_WINDOW))
    # Runs that started up to now: the upper bound is exclusive, so include this instant.
    until = end + timedelta(microseconds=1)
    return RolloutWindow(
        start=start,
        end=end,
        canary=arm_stats(version_label=rollout.version.label, start=start, end=until),
        stable=arm_stats(version_label=_stable_label(rollout), start=start, end=until),
    )


def _numbers(window: RolloutWindow | None, verdict: Verdict | None) -> dict[str, Any]:
    if window is None:
        return {}
    canary, stable = window.canary, window.stable
    return {
        "window_start": window.start,
        "window_end": window.end,
        "canary_n": canary.n,
        "stable_n": stable.n,
        "canary_error_rate": canary.error_rate,
        "stable_error_rate": stable.error_rate,
        "canary_success_rate": canary.success_rate,
        "stable_success_rate": stable.success_rate,
        "canary_p50_ms": canary.p50_ms,
        "canary_p95_ms": canary.p95_ms,
        "stable_p50_ms": stable.p50_ms,
        "stable_p95_ms": stable.p95_ms,
        "statistic": verdict.statistic if verdict else None,
        "p_value": verdict.p_value if verdict else None,
        "details": {
            "canary_error_types": canary.error_types,
            "stable_error_types": stable.error_types,
            **({"burst": verdict.burst} if verdict and verdict.burst else {}),
        },
    }


def _decide(
    rollout: Rollout,
    *,
    action: str,
    actor: Any,
    from_percent: int,
    reason: str,
    window: RolloutWindow | None = None,
    verdict: Verdict | None = None,
) -> RolloutDecision:
    """Write the decision row and its audit row (in the caller's transaction)."""
    user = actor if getattr(actor, "pk", None) else None
    decision = RolloutDecision.objects.create(
        rollout=rollout,
        action=action,
        actor=user,
        actor_kind="user" if user else str(actor or "system"),
        from_percent=from_percent,
        to_percent=rollout.percent,
        reason=reason[:300],
        **_numbers(window, verdict),
    )
    details: dict[str, Any] = {
        "version": rollout.version.number,
        "from_percent": from_percent,
        "to_percent": rollout.percent,
        "reason": reason,
        "decision": decision.pk,
    }
    if window is not None:
        details.update(
            canary_n=decision.canary_n,
            stable_n=decision.stable_n,
            canary_error_rate=decision.canary_error_rate,
            stable_error_rate=decision.stable_error_rate,
            p_value=decision.p_value,
        )
    audit(action=f"rollout.{action}", target=rollout.label, actor=actor, details=details)
    transaction.on_commit(runtime_policy_cache_clear)
    logger.info(
        "rollout.decision",
        extra={"rollout": rollout.pk, "action": action, "percent": rollout.percent},
    )
    return decision


# --- start ------------------------------------------------------------------------------------


def rollout_start(*, strategy: Strategy, actor: Any = None, author_kind: str) -> Rollout | None:
    """Create version n+1 (inactive) and its rollout at the first schedule step.

    The database allows one open rollout: when another is open the insert fails, nothing
    is written, and the approved strategy waits (None) for ``rollout_start_next``.
    """
    from policies.documents import policy_version_create

    schedule = rollout_schedule()
    user = actor if getattr(actor, "pk", None) else None
    with transaction.atomic():
        stable = PolicyVersion.objects.select_for_update().filter(is_active=True).first()
        members, replaced = policy_members_with(current=stable, strategy=strategy)
        try:
            with transaction.atomic():
                version = policy_version_create(
                    strategies=members,
                    author=user,
                    author_kind=author_kind,
                    note=f"{strategy.label}: {strategy.strategy_update}"[:200],
                    source_strategies=[strategy],
                    activate=False,
                )
                rollout = Rollout.objects.create(
                    version=version,
                    stable=stable,
                    strategy=strategy,
                    replaced=[rival.pk for rival in replaced],
                    schedule=schedule,
                    percent=schedule[0],
                    step_started_at=timezone.now(),
                    created_by=user,
                    author_kind=author_kind,
                )
        except IntegrityError:
            if not Rollout.objects.filter(is_open=True).exists():
                raise
            audit(
                action="rollout.wait",
                target=strategy.label,
                actor=actor,
                details={"reason": "another rollout is open"},
            )
            return None
        _decide(
            rollout,
            action=RolloutDecision.Action.START,
            actor=actor or "system",
            from_percent=0,
            reason=f"{strategy.label} approved ({author_kind}); canary {version.label} "
            f"against {stable.label if stable else 'no policy'}",
        )
        if rollout.percent >= 100:
            rollout_complete(rollout=rollout, actor=actor or "system", reason="schedule is 100%")
    return rollout


def rollout_start_next() -> Rollout | None:
    """Start the oldest approved strategy that waited for a rollout to end."""
    waiting = (
        Strategy.objects.filter(status=Strategy.Status.APPROVED, rollouts__isnull=True)
        .order_by("updated_at", "pk")
        .first()
    )
    if waiting is None:
        return None
    # Published under the name of whoever approved it (the audit log, in reviews).
    approval = review_records().approval_last(waiting.label)
    actor = approval.actor if approval is not None else None
    author_kind = approval.author_kind if approval is not None else "reviewer"
    if author_kind not in PolicyVersion.AuthorKind.values:
        author_kind = PolicyVersion.AuthorKind.REVIEWER
    return rollout_start(strategy=waiting, actor=actor, author_kind=author_kind)


# --- moves ------------------------------------------------------------------------------------


def _lock(rollout_id: int) -> Rollout:
    return (
        Rollout.objects.select_for_update(of=("self",))
        .select_related("version", "stable", "strategy")
        .get(pk=rollout_id)
    )


def _require_open(rollout: Rollout) -> None:
    if not rollout.is_open:
        raise RolloutError(f"{rollout.label} has ended ({rollout.get_state_display()}).")


def rollout_complete(*, rollout: Rollout, actor: Any, reason: str, **numbers: Any) -> Rollout:
    """100%: the canary becomes the active version, its strategy active, its rivals
    deprecated. When stable moved meanwhile (an at-once publish, an import) the canary is
    rebased: a new version of the current tree plus the strategy becomes active."""
    from policies.documents import policy_version_create

    with transaction.atomic():
        rollout = _lock(rollout.pk)
        _require_open(rollout)
        active = PolicyVersion.objects.select_for_update().filter(is_active=True).first()
        strategy = Strategy.objects.select_for_update().get(pk=rollout.strategy_id)
        canary = rollout.version
        replaced_ids = list(rollout.replaced)
        if active is None or canary.parent_id == active.pk:
            if active is not None:
                PolicyVersion.objects.filter(pk=active.pk).update(is_active=False)
            PolicyVersion.objects.filter(pk=canary.pk).update(is_active=True)
            published = canary
        else:
            members, replaced = policy_members_with(current=active, strategy=strategy)
            replaced_ids += [rival.pk for rival in replaced]
            published = policy_version_create(
                strategies=members,
                author=rollout.created_by,
                author_kind=rollout.author_kind or PolicyVersion.AuthorKind.REVIEWER,
                note=f"{strategy.label}: {strategy.strategy_update} (rebased {canary.label})"[:200],
                source_strategies=[strategy],
            )
        if strategy.status in (Strategy.Status.APPROVED, Strategy.Status.IN_REVIEW):
            strategy.status = Strategy.Status.ACTIVE
            strategy.save(update_fields=["status", "updated_at"])
        Strategy.objects.filter(pk__in=replaced_ids, status__in=APPLIED_STATUSES).exclude(
            pk=strategy.pk
        ).update(status=Strategy.Status.DEPRECATED, updated_at=timezone.now())
        from_percent = rollout.percent
        rollout.percent = 100
        rollout.state = Rollout.State.COMPLETED
        rollout.is_open = False
        rollout.ended_at = timezone.now()
        rollout.end_reason = reason[:200]
        rollout.save(
            update_fields=["percent", "state", "is_open", "ended_at", "end_reason", "updated_at"]
        )
        _decide(
            rollout,
            action=RolloutDecision.Action.COMPLETE,
            actor=actor,
            from_percent=from_percent,
            reason=f"{reason}; {published.label} is active",
            **numbers,
        )
        audit(
            action="strategy.activate",
            target=strategy.label,
            actor=actor,
            details={"version": published.number, "rollout": rollout.pk},
        )
        rollout_start_next()
    return rollout


def rollout_rollback(*, rollout: Rollout, actor: Any, reason: str, **numbers: Any) -> Rollout:
    """Stop serving the canary: stable stays active, the strategy is rejected (kept for
    audit), and the next waiting strategy starts its rollout."""
    with transaction.atomic():
        rollout = _lock(rollout.pk)
        _require_open(rollout)
        from_percent = rollout.percent
        rollout.percent = 0
        rollout.state = Rollout.State.ROLLED_BACK
        rollout.is_open = False
        rollout.ended_at = timezone.now()
        rollout.end_reason = reason[:200]
        rollout.save(
            update_fields=["percent", "state", "is_open", "ended_at", "end_reason", "updated_at"]
        )
        Strategy.objects.filter(
            pk=rollout.strategy_id, status__in=[Strategy.Status.APPROVED, Strategy.Status.IN_REVIEW]
        ).update(status=Strategy.Status.REJECTED, updated_at=timezone.now())
        _decide(
            rollout,
            action=RolloutDecision.Action.ROLLBACK,
            actor=actor,
            from_percent=from_percent,
            reason=reason,
            **numbers,
        )
        rollout_start_next()
    return rollout


def rollout_set_percent(
    *, rollout: Rollout, percent: int, actor: Any, reason: str = "", **numbers: Any
) -> Rollout:
    """Serve the canary to ``percent`` (1..100; 100 completes) and start a fresh window."""
    if not 1 <= percent <= 100:
        raise RolloutError("A percentage is a whole number from 1 to 100.")
    if percent == 100:
        return rollout_complete(
            rollout=rollout, actor=actor, reason=reason or "set to 100%", **numbers
        )
    with transaction.atomic():
        rollout = _lock(rollout.pk)
        _require_open(rollout)
        _move(
            rollout,
            percent=percent,
            action=RolloutDecision.Action.SET_PERCENT,
            actor=actor,
            reason=reason or f"set to {percent}%",
            numbers=numbers,
        )
    return rollout


def _move(
    rollout: Rollout,
    *,
    percent: int,
    action: str,
    actor: Any,
    reason: str,
    numbers: dict[str, Any],
) -> None:
    """Serve the locked, open ``rollout`` to ``percent`` from now on: a fresh window."""
    from_percent = rollout.percent
    rollout.percent = percent
    rollout.step_started_at = timezone.now()
    rollout.save(update_fields=["percent", "step_started_at", "updated_at"])
    _decide(
        rollout, action=action, actor=actor, from_percent=from_percent, reason=reason, **numbers
    )


def rollout_promote(*, rollout: Rollout, actor: Any, reason: str = "", **numbers: Any) -> Rollout:
    """To the next schedule step (completing at 100%)."""
    with transaction.atomic():
        rollout = _lock(rollout.pk)
        _require_open(rollout)
        target = schedule_next(rollout.schedule, rollout.percent)
        if target >= 100:
            return rollout_complete(
                rollout=rollout, actor=actor, reason=reason or "promoted to 100%", **numbers
            )
        _move(
            rollout,
            percent=target,
            action=RolloutDecision.Action.PROMOTE,
            actor=actor,
            reason=reason or f"promoted to {target}%",
            numbers=numbers,
        )
    return rollout


def rollout_pause(*, rollout: Rollout, actor: Any, reason: str = "") -> Rollout:
    """Hold the percentage: the evaluator stops promoting (it still rolls back harm)."""
    return _set_state(rollout, actor, Rollout.State.PAUSED, RolloutDecision.Action.PAUSE, reason)


def rollout_resume(*, rollout: Rollout, actor: Any, reason: str = "") -> Rollout:
    return _set_state(rollout, actor, Rollout.State.RUNNING, RolloutDecision.Action.RESUME, reason)


def _set_state(rollout: Rollout, actor: Any, state: str, action: str, reason: str) -> Rollout:
    with transaction.atomic():
        rollout = _lock(rollout.pk)
        _require_open(rollout)
        if rollout.state == state:
            raise RolloutError(f"{rollout.label} is already {rollout.get_state_display()}.")
        rollout.state = state
        rollout.save(update_fields=["state", "updated_at"])
        _decide(
            rollout,
            action=action,
            actor=actor,
            from_percent=rollout.percent,
            reason=reason or action,
        )
    return rollout


MANUAL_ACTIONS = ("pause", "resume", "set_percent", "promote", "rollback")


def rollout_manual(
    *, rollout_id: int, action: str, actor: Any, percent: int | None = None, note: str = ""
) -> Rollout:
    """A person's control from the rollout page, with the window's numbers recorded."""
    rollout = Rollout.objects.select_related("version", "stable").get(pk=rollout_id)
    _require_open(rollout)
    reason = f"{action} by {getattr(actor, 'username', 'someone')}" + (
        f": {redact_text(note)}" if note else ""
    )
    window = rollout_window(rollout)
    numbers: dict[str, Any] = {"window": window}
    if action == "pause":
        return rollout_pause(rollout=rollout, actor=actor, reason=reason)
    if action == "resume":
        return rollout_resume(rollout=rollout, actor=actor, reason=reason)
    if action == "promote":
        return rollout_promote(rollout=rollout, actor=actor, reason=reason, **numbers)
    if action == "rollback":
        return rollout_rollback(rollout=rollout, actor=actor, reason=reason, **numbers)
    if action == "set_percent":
        if percent is None:
            raise RolloutError("Say which percentage.")
        return rollout_set_percent(
            rollout=rollout, percent=percent, actor=actor, reason=reason, **numbers
        )
    raise RolloutError(f"Unknown action {action!r}.")


# --- the evaluator ----------------------------------------------------------------------------


def rollouts_evaluate(*, now: datetime | None = None) -> RolloutDecision | None:
    """Judge the open rollout once and act on the verdict; returns the decision written."""
    rollout = (
        Rollout.objects.select_related("version", "stable", "strategy").filter(is_open=True).first()
    )
    if rollout is None:
        # A strategy approved while no rollout could start (a crash between) still goes out.
        started = rollout_start_next()
        return started.decisions.order_by("-pk").first() if started else None
    window = rollout_window(rollout, now=now)
    verdict = rollout_judge(canary=window.canary, stable=window.stable, rules=rollout_rules())
    if verdict.action != "rollback" and rollout.strategy.status in (
        Strategy.Status.DEPRECATED,
        Strategy.Status.REJECTED,
    ):
        # Confidence bookkeeping gave up on it: the canary no longer applies it anyway.
        verdict = Verdict("rollback", f"{rollout.strategy.label} was {rollout.strategy.status}")
    if verdict.action == "promote" and rollout.state == Rollout.State.PAUSED:
        verdict = Verdict(
            "hold", f"paused; otherwise: {verdict.reason}", verdict.statistic, verdict.p_value
        )
    numbers: dict[str, Any] = {"window": window, "verdict": verdict}
    expected = (rollout.percent, rollout.step_started_at, rollout.state)
    with transaction.atomic():
        # Act only on the state the verdict was computed for: a person (or a second
        # evaluator) who moved the rollout meanwhile wins.
        locked = _lock(rollout.pk)
        if (
            not locked.is_open
            or (
                locked.percent,
                locked.step_started_at,
                locked.state,
            )
            != expected
        ):
            return None
        if verdict.action == "rollback":
            rollout_rollback(rollout=locked, actor=EVALUATOR, reason=verdict.reason, **numbers)
        elif verdict.action == "promote":
            rollout_promote(rollout=locked, actor=EVALUATOR, reason=verdict.reason, **numbers)
        else:
            last = locked.decisions.order_by("-at", "-pk").first()
            due = (
                last is None
                or last.action != RolloutDecision.Action.HOLD
                or last.details.get("verdict") != verdict.action
                or (window.end - last.at).total_seconds() >= HOLD_RECORD_SECONDS
            )
            if not due:
                return None
            decision = _decide(
                locked,
                action=RolloutDecision.Action.HOLD,
                actor=EVALUATOR,
                from_percent=locked.percent,
                reason=verdict.reason,
                **numbers,
            )
            decision.details = {**decision.details, "verdict": verdict.action}
            decision.save(update_fields=["details"])
            return decision
    return locked.decisions.order_by("-at", "-pk").first()
