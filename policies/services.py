"""Writes of the policy tree: confidence bookkeeping, approval, deprecation, review hand-off.

Thresholds follow the production notes (seeds/000 §4.4): confidence starts at 0.7, moves
+0.05 per successful application and -0.15 per failed one; below 0.5 a strategy is never
cited as history, below 0.3 it is deprecated (kept for audit), and two consecutive failures
send it to review.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction

from policies.branches import branch_slot
from policies.models import PolicyVersion, Strategy, StrategyConfidenceEvent
from policies.selectors import policy_version_active, runtime_policy_cache_clear
from policies.signals import (
    REVIEW_CONSECUTIVE_FAILURES,
    REVIEW_LOW_CONFIDENCE,
    audit_event,
    review_requested,
)
from traces.models import Step, Trace
from traces.redaction import redact_value

logger = logging.getLogger(__name__)

CONFIDENCE_START = 0.7
CONFIDENCE_SUCCESS_DELTA = 0.05
CONFIDENCE_FAILURE_DELTA = 0.15
CONFIDENCE_CITE_MIN = 0.5
CONFIDENCE_DEPRECATE_BELOW = 0.3
REVIEW_AFTER_CONSECUTIVE_FAILURES = 2

# Strategies judged on the step they touched vs on the whole run.
STEP_LEVEL_KINDS = frozenset({"adapter", "pre_condition", "error_handler"})
# Errors that say the call itself was wrong: whatever a strategy targets, a call it shaped
# that fails this way counts against it. UNKNOWN is counted too: nothing says it is not.
CALLER_ERROR_TYPES = frozenset(
    {
        "INVALID_PARAMETER",
        "MISSING_REQUIRED_FIELD",
        "TYPE_MISMATCH",
        "INVALID_ENDPOINT",
        "TOOL_NOT_ALLOWED",
        "UNKNOWN",
    }
)


def failure_unrelated(error_types: set[str] | frozenset[str], *, target: str) -> bool:
    """Whether failures of these types say nothing about a strategy that targets ``target``:
    each is another class (the order does not exist, the upstream is down), none is the
    target or a sign that the call was malformed. A strategy that turned a TYPE_MISMATCH
    into a well-formed request for an order that does not exist did its job; the missing
    order is not its failure, and no strategy could have found the order."""
    return bool(error_types) and not (error_types & (CALLER_ERROR_TYPES | {target}))


def confidence_next(confidence: float, *, success: bool) -> float:
    delta = CONFIDENCE_SUCCESS_DELTA if success else -CONFIDENCE_FAILURE_DELTA
    return round(min(1.0, max(0.0, confidence + delta)), 4)


def audit(*, action: str, target: str, actor: Any = None, details: dict | None = None) -> None:
    """Announce an audit row (``reviews`` owns the log and writes it: policies.signals)."""
    audit_event.send(
        sender=Strategy,
        actor=actor if getattr(actor, "pk", None) else None,
        actor_kind="user" if getattr(actor, "pk", None) else (actor or "system"),
        action=action,
        target=target,
        # Details quote notes and proposals that people and models wrote.
        details=redact_value(details or {}),
    )


def strategy_outcome_record(*, strategy_id: int, success: bool, trace_id: str = "") -> Strategy:
    """Count one application and move confidence; deprecate or send to review on the way."""
    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().get(pk=strategy_id)
        strategy.applications += 1
        if success:
            strategy.successes += 1
            strategy.consecutive_failures = 0
        else:
            strategy.consecutive_failures += 1
        before = strategy.confidence
        strategy.confidence = confidence_next(before, success=success)
        fields = ["applications", "successes", "consecutive_failures", "confidence", "updated_at"]
        # The history is appended in the same transaction: no move without its event.
        StrategyConfidenceEvent.objects.create(
            strategy=strategy,
            old=before,
            new=strategy.confidence,
            reason="success" if success else "failure",
            trace_id=trace_id or None,
        )
        if (
            strategy.confidence < CONFIDENCE_DEPRECATE_BELOW
            and strategy.status != Strategy.Status.DEPRECATED
        ):
            strategy.status = Strategy.Status.DEPRECATED
            fields.append("status")
            audit(
                action="strategy.deprecate",
                target=strategy.label,
                details={"confidence": strategy.confidence, "trace": trace_id},
            )
            transaction.on_commit(runtime_policy_cache_clear)
        elif (
            strategy.consecutive_failures >= REVIEW_AFTER_CONSECUTIVE_FAILURES
            and not strategy.needs_review
            and strategy.status != Strategy.Status.DEPRECATED
        ):
            strategy.needs_review = True
            fields.append("needs_review")
            review_requested.send(
                sender=Strategy,
                strategy=strategy,
                reason=REVIEW_CONSECUTIVE_FAILURES,
                detail=(
                    f"{strategy.label} failed {strategy.consecutive_failures} times in a row "
                    f"(confidence {before:.2f} -> {strategy.confidence:.2f})."
                ),
            )
            audit(
                action="strategy.send_to_review", target=strategy.label, details={"trace": trace_id}
            )
        strategy.save(update_fields=fields)
    return strategy


def strategy_revive_for_review(*, strategy: Strategy, trace_id: str = "") -> Strategy:
    """A deprecated strategy that fixed a new, independent failure on replay: back to
    ``proposed`` (not applied by any run) with a review item, so that a person can bring it
    back (approving publishes it as a canary) or reject it for good."""
    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if strategy.status != Strategy.Status.DEPRECATED:
            return strategy
        strategy.status = Strategy.Status.PROPOSED
        strategy.consecutive_failures = 0
        strategy.save(update_fields=["status", "consecutive_failures", "updated_at"])
        audit(
            action="strategy.revive",
            target=strategy.label,
            details={"confidence": strategy.confidence, "trace": trace_id},
        )
        review_requested.send(
            sender=Strategy,
            strategy=strategy,
            reason=REVIEW_LOW_CONFIDENCE,
            detail=(
                f"{strategy.label} was deprecated; a new failure it targets "
                f"({strategy.error_type}) was replayed with it and it fixed it (confidence "
                f"{strategy.confidence:.2f}). Approve to publish it again as a canary, or "
                "reject it for good."
            ),
        )
    return strategy


def strategy_evidence_record(*, strategy_id: int, passed: bool, trace_id: str = "") -> Strategy:
    """A replay of a not-yet-applied strategy against a new failure: move its confidence."""
    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().get(pk=strategy_id)
        before = strategy.confidence
        strategy.confidence = confidence_next(before, success=passed)
        StrategyConfidenceEvent.objects.create(
            strategy=strategy,
            old=before,
            new=strategy.confidence,
            reason="replay passed" if passed else "replay failed",
            trace_id=trace_id or None,
        )
        strategy.save(update_fields=["confidence", "updated_at"])
    return strategy


# A run ended with a grounded answer: its final answer passed the grounding check and
# answers the request (policies.replay uses the same set for its replayed run).
GROUNDED_OUTCOMES = frozenset(
    {Trace.Outcome.ANSWERED_FROM_DATA, Trace.Outcome.ANSWERED_WITHOUT_DATA}
)


def _rule_blocked(step: Any, strategy_id: int) -> bool:
    """Whether validation rule ``strategy_id`` refused this step's call (the runtime's
    rejection names the rule: "policy rule S<id>: ...")."""
    return not step.ok and f"policy rule S{strategy_id}:" in (step.error_detail or "")


class _ScoredStep(NamedTuple):
    """The fields of a step that scoring reads."""

    ok: bool
    error_type: str
    error_detail: str
    strategies_applied: Any


def _scored_steps(trace_id: Any) -> list[_ScoredStep]:
    """Every step of the run, in order, with the few fields scoring and Reflexion read."""
    return [
        _ScoredStep(*row)
        for row in Step.objects.filter(trace_id=trace_id)
        .order_by("step_number")
        .values_list("ok", "error_type", "error_detail", "strategies_applied")
    ]


def run_outcomes_record(
    *, trace_id: str, trace: Trace | None = None, rows: list[_ScoredStep] | None = None
) -> dict[int, bool]:
    """Score every strategy that acted on an ended run, by whether the run answered correctly.

    A success needs the run to end with a grounded answer (``GROUNDED_OUTCOMES``):
    - adapters, pre-conditions and error handlers count once per step they touched: that
      step succeeded *and* the run ended grounded;
    - a prompt hint counts once per run: grounded, without the error type it targets;
    - a validation rule counts once per run in which it blocked a call: grounded (the model
      recovered with a call the rule accepts) or not (the rule stood between the customer
      and an answer: a call it blocked that would have succeeded counts as a failure). A
      rule that checked calls and blocked none did not act and is not scored.

    ``trace`` is the ended run's row, and ``rows`` its steps (``_scored_steps``), when the
    caller has read them already."""
    if trace is None:
        trace = Trace.objects.get(pk=trace_id)
    if not trace.is_terminal:
        return {}
    # One read of the few fields scoring needs, for both the steps a strategy touched and
    # the error types the run met.
    if rows is None:
        rows = _scored_steps(trace.pk)
    return _outcomes_record(_run_outcomes(trace, rows), trace_id=trace_id)


def _run_outcomes(trace: Trace, rows: list[_ScoredStep]) -> list[tuple[int, bool]]:
    """What each strategy that acted on the ended run scores (``run_outcomes_record``),
    strategies deleted since the run left out; one query, none when no strategy acted."""
    applied_ids = {
        applied.get("id")
        for row in rows
        for applied in row.strategies_applied or ()
        if isinstance(applied, dict) and isinstance(applied.get("id"), int)
    }
    if not applied_ids:
        return []
    targets = dict(Strategy.objects.filter(pk__in=applied_ids).values_list("pk", "error_type"))
    return _outcomes_of(trace, rows, targets)


def _outcomes_of(
    trace: Trace, rows: list[_ScoredStep], targets: dict[int, str]
) -> list[tuple[int, bool]]:
    """``_run_outcomes`` given ``targets``: the strategies that still exist, each with the
    error type it targets. A step-level strategy whose step failed for an unrelated reason
    (``failure_unrelated``) is not scored."""
    steps = [row for row in rows if row.strategies_applied != []]
    error_types = {row.error_type for row in rows if row.error_type}
    grounded = trace.outcome in GROUNDED_OUTCOMES
    outcomes: list[tuple[int, bool]] = []
    run_level: dict[int, bool] = {}
    for step in steps:
        for applied in step.strategies_applied:
            strategy_id, kind = applied.get("id"), applied.get("kind")
            if not isinstance(strategy_id, int) or strategy_id not in targets:
                continue
            if kind in STEP_LEVEL_KINDS:
                if not step.ok and failure_unrelated(
                    {step.error_type or "UNKNOWN"}, target=targets[strategy_id]
                ):
                    continue
                outcomes.append((strategy_id, bool(step.ok) and grounded))
            elif kind == "validation_rule":
                if _rule_blocked(step, strategy_id):
                    run_level[strategy_id] = grounded
            else:
                target = applied.get("error_type") or ""
                run_level[strategy_id] = grounded and target not in error_types
    outcomes += list(run_level.items())
    return outcomes


def _outcomes_record(outcomes: list[tuple[int, bool]], *, trace_id: str) -> dict[int, bool]:
    """Record each outcome on its strategy (strategies deleted since the run are left out
    by ``_run_outcomes``)."""
    result: dict[int, bool] = {}
    for strategy_id, success in outcomes:
        strategy_outcome_record(strategy_id=strategy_id, success=success, trace_id=trace_id)
        result[strategy_id] = success
    return result


def policy_members_with(
    *, current: PolicyVersion | None, strategy: Strategy
) -> tuple[list[Strategy], list[Strategy]]:
    """The strategies of ``current`` plus ``strategy``, and the rivals it replaces: one rule
    per slot, so a strategy replaces a live one that sits in the same place."""
    members = (
        list(current.strategies.exclude(status__in=["deprecated", "rejected"])) if current else []
    )
    slot = branch_slot(strategy.kind, strategy.branch)
    replaced = [m for m in members if m.pk != strategy.pk and branch_slot(m.kind, m.branch) == slot]
    members = [m for m in members if m not in replaced]
    if strategy not in members:
        members.append(strategy)
    return members, replaced


def strategy_activate(
    *, strategy: Strategy, actor: Any = None, author_kind: str, at_once: bool | None = None
) -> PolicyVersion | None:
    """Approve ``strategy`` and publish it.

    With ``POLICY_PUBLISH=canary`` (the default) the new version n+1 starts as a canary
    rollout at the first ``ROLLOUT_SCHEDULE`` step and is returned inactive; while another
    rollout is open the strategy stays approved and waits (None), and starts when that
    rollout ends. ``at_once`` (or ``POLICY_PUBLISH=at_once``) makes it active right away.
    """
    if at_once is None:
        at_once = settings.POLICY_PUBLISH == "at_once"
    if not at_once:
        from policies.rollouts import rollout_start

        with transaction.atomic():
            strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
            strategy.status = Strategy.Status.APPROVED
            strategy.save(update_fields=["status", "updated_at"])
            audit(
                action="strategy.approve",
                target=strategy.label,
                actor=actor,
                details={"author_kind": author_kind, "publish": "canary"},
            )
            rollout = rollout_start(strategy=strategy, actor=actor, author_kind=author_kind)
        return rollout.version if rollout is not None else None
    return _strategy_publish_at_once(strategy=strategy, actor=actor, author_kind=author_kind)


def _strategy_publish_at_once(*, strategy: Strategy, actor: Any, author_kind: str) -> PolicyVersion:
    from policies.documents import policy_version_create

    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        strategy.status = Strategy.Status.ACTIVE
        strategy.save(update_fields=["status", "updated_at"])
        members, replaced = policy_members_with(current=policy_version_active(), strategy=strategy)
        for rival in replaced:
            rival.status = Strategy.Status.DEPRECATED
            rival.save(update_fields=["status", "updated_at"])
        version = policy_version_create(
            strategies=members,
            author=actor if getattr(actor, "pk", None) else None,
            author_kind=author_kind,
            note=f"{strategy.label}: {strategy.strategy_update}"[:200],
            source_strategies=[strategy],
        )
        audit(
            action="strategy.activate",
            target=strategy.label,
            actor=actor,
            details={"version": version.number},
        )
        transaction.on_commit(runtime_policy_cache_clear)
    return version


def strategy_reject(*, strategy: Strategy, actor: Any = None, reason: str = "") -> Strategy:
    with transaction.atomic():
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        strategy.status = Strategy.Status.REJECTED
        strategy.save(update_fields=["status", "updated_at"])
        audit(
            action="strategy.reject", target=strategy.label, actor=actor, details={"reason": reason}
        )
        transaction.on_commit(runtime_policy_cache_clear)
    return strategy


def run_ended(*, trace_id: str, trace: Trace | None = None) -> None:
    """After a run: score the strategies it applied, then queue Reflexion if it failed.

    Only a run its end marked as owed (``Trace.learning``) is learned from, and each step
    of the hand-off clears its part of the mark once done, so that a hand-off cut short
    (a worker killed, the broker away) is finished by the learning sweep
    (``policies.tasks.runs_learning_sweep``), and one repeated scores nothing twice:
    - ``pending`` -> ``scored``: the strategies' scores commit with the claim, so exactly
      one caller scores the run;
    - ``scored`` -> blank: once Reflexion is queued (or not wanted). A broker that refuses
      the job leaves the run ``scored`` for the sweep.

    ``trace`` is the finished row the caller holds, or one is read here."""
    from policies.tasks import reflexion_queue, reflexion_wanted

    if trace is None:
        trace = Trace.objects.get(pk=trace_id)
    if not trace.learning or not trace.is_terminal:
        return
    # Scoring and Reflexion's check read the same steps: once (an ended run's steps are
    # all written).
    rows = _scored_steps(trace.pk)
    wanted = reflexion_wanted(trace, rows)
    owed = Trace.objects.filter(pk=trace.pk)
    if trace.learning == Trace.Learning.PENDING:
        outcomes = _run_outcomes(trace, rows)
        then = Trace.Learning.SCORED if wanted else ""
        claim = owed.filter(learning=Trace.Learning.PENDING)
        if outcomes:
            with transaction.atomic():
                claimed = claim.update(learning=then)
                if claimed:
                    _outcomes_record(outcomes, trace_id=trace_id)
        else:  # one statement: no transaction needed
            claimed = claim.update(learning=then)
        if not claimed:  # another hand-off (the sweep, a redelivery) took the run
            return
        trace.learning = then
    if wanted:
        reflexion_queue(trace_id=trace_id, trace=trace)  # raises while the broker is away
    if trace.learning:
        owed.filter(learning=Trace.Learning.SCORED).update(learning="")
        trace.learning = ""
