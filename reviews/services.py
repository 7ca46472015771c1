"""Decisions on review items. Policy changes go through ``policies.services``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.branches import branch_errors, branch_signature
from policies.models import Strategy
from policies.services import audit, strategy_activate, strategy_reject
from reviews.models import ReviewItem
from reviews.selectors import LOCK_MINUTES, user_can_review
from traces.models import Feedback, Trace
from traces.redaction import redact_text, redact_value
from traces.services import trace_feedback_record

UNDECIDED = (ReviewItem.Status.OPEN, ReviewItem.Status.NEEDS_EVIDENCE)
ROOT_CAUSE_MAX = 200
STRATEGY_UPDATE_MAX = 250


class ReviewConflict(Exception):
    """The item was decided or is locked by someone else."""


class StrategyEditInvalid(Exception):
    """An edited strategy does not validate or does not pass its replay; nothing changed."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class StrategyEdit:
    """What a reviewer may change before approving: the words and the rule itself."""

    root_cause: str
    strategy_update: str
    branch: dict[str, Any]


def _open_item_for_update(item_id: int, user: Any) -> ReviewItem:
    item = ReviewItem.objects.select_for_update().get(pk=item_id)
    if item.status == ReviewItem.Status.NEEDS_EVIDENCE:
        raise ReviewConflict(f"review {item.pk} waits for more evidence: reopen it first")
    if item.status != ReviewItem.Status.OPEN:
        raise ReviewConflict(f"review {item.pk} was already {item.status}")
    stale = timezone.now() - timedelta(minutes=LOCK_MINUTES)
    if (
        item.locked_by_id
        and user is not None
        and item.locked_by_id != user.pk
        and item.locked_at
        and item.locked_at > stale
    ):
        raise ReviewConflict(f"review {item.pk} is being decided by {item.locked_by}")
    return item


def review_item_lock(*, item_id: int, user: Any) -> ReviewItem:
    """Claim an item so two reviewers don't decide it at once (expires after 15 minutes)."""
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        item.locked_by = user
        item.locked_at = timezone.now()
        item.save(update_fields=["locked_by", "locked_at"])
    return item


def _close(item: ReviewItem, *, status: str, user: Any, note: str, published: str = "") -> None:
    item.status = status
    item.decided_by = user if getattr(user, "pk", None) else None
    item.decided_at = timezone.now()
    item.decision_note = redact_text(note)
    item.published = published[:120]
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note", "published"])


def published_label(result: Any) -> str:
    """What ``strategy_activate`` answered, in words: a version, a rollout of one, or
    nothing yet (a rollout is already open for the policy: the change waits for it)."""
    if result is None:
        return "approved; not published yet: a rollout is already open"
    version = getattr(result, "version", result)
    number = getattr(version, "number", None)
    label = f"published as version v{number}" if number is not None else f"published: {result}"
    rollout: Any = result if version is not result else getattr(version, "rollout", None)
    if getattr(rollout, "pk", None) is not None and not getattr(version, "is_active", False):
        label += f", a canary on {rollout.percent}% (rollout {rollout.pk})"
    return label


def _approve(item: ReviewItem, *, user: Any, note: str, details: dict[str, Any]) -> None:
    strategy = item.strategy
    published = ""
    if item.reason == ReviewItem.Reason.LOW_CONFIDENCE and strategy is not None:
        result = strategy_activate(strategy=strategy, actor=user, author_kind="reviewer")
        published = published_label(result)
    elif item.reason == ReviewItem.Reason.CONSECUTIVE_FAILURES and strategy is not None:
        Strategy.objects.filter(pk=strategy.pk).update(needs_review=False, consecutive_failures=0)
    _close(item, status=ReviewItem.Status.APPROVED, user=user, note=note, published=published)
    audit(
        action="review.approve",
        target=f"review {item.pk}",
        actor=user,
        details={"reason": item.reason, "note": note, **details, "published": published},
    )


def review_item_approve(*, item_id: int, user: Any = None, note: str = "") -> ReviewItem:
    """Approve: publish a proposed strategy, keep a failing one, or resume automation."""
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        _approve(item, user=user, note=note, details={})
    return item


def strategy_edit_errors(*, strategy: Strategy, edit: StrategyEdit) -> list[str]:
    """Why ``edit`` cannot replace the strategy's rule and words; empty when it can."""
    errors = [f"branch: {error}" for error in branch_errors(strategy.kind, edit.branch)]
    for name, value, limit in (
        ("root cause", edit.root_cause, ROOT_CAUSE_MAX),
        ("update", edit.strategy_update, STRATEGY_UPDATE_MAX),
    ):
        if not value.strip():
            errors.append(f"{name}: say it in a few words")
        elif len(value) > limit:
            errors.append(f"{name}: at most {limit} characters")
    return errors


def strategy_edit_replay(*, strategy: Strategy, edit: StrategyEdit) -> tuple[bool, str]:
    """Replay the edited rule against the newest recorded failure it was learned from."""
    from policies.reflexion import Proposal, failures_of_trace
    from policies.replay import strategy_replay

    tool = edit.branch.get("tool", "") if isinstance(edit.branch, dict) else ""
    for trace in strategy.source_traces.order_by("-created_at")[:20]:
        for facts in failures_of_trace(trace):
            if facts.error_type == strategy.error_type and (not tool or facts.tool == tool):
                proposal = Proposal(
                    kind=strategy.kind,
                    branch=edit.branch,
                    root_cause=edit.root_cause,
                    strategy_update=edit.strategy_update,
                    origin="human",
                )
                passed, detail = strategy_replay(proposal=proposal, facts=facts)
                return passed, redact_text(detail)
    return False, (
        f"no recorded {strategy.error_type or 'failure'} of {tool or 'its tool'} among the "
        "runs it was learned from, so the edit cannot be replayed"
    )


def review_item_edit_approve(
    *, item_id: int, user: Any, edit: StrategyEdit, note: str = ""
) -> ReviewItem:
    """Edit a proposed strategy, replay it again, and approve it if the replay passes.

    An edit that does not validate or fails its replay raises ``StrategyEditInvalid`` and
    changes nothing. The replay runs outside the transaction: it calls the real tools.
    """
    # People paste what they see; a token in a log line must not be stored. The rule is
    # redacted before it is checked and replayed, so what is stored is what was replayed.
    edit = replace(edit, branch=redact_value(edit.branch))
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
    strategy = item.strategy
    if strategy is None or item.reason != ReviewItem.Reason.LOW_CONFIDENCE:
        raise ReviewConflict(f"review {item.pk} has no proposed strategy to edit")
    errors = strategy_edit_errors(strategy=strategy, edit=edit)
    if errors:
        raise StrategyEditInvalid(errors)
    passed, detail = strategy_edit_replay(strategy=strategy, edit=edit)
    if not passed:
        raise StrategyEditInvalid([f"the edited strategy failed its replay: {detail}"])
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        before: dict[str, Any] = {
            "root_cause": strategy.root_cause,
            "strategy_update": strategy.strategy_update,
            "branch": strategy.branch,
        }
        after: dict[str, Any] = {
            # People paste what they see; a token in a log line must not be stored.
            "root_cause": redact_text(edit.root_cause.strip()),
            "strategy_update": redact_text(edit.strategy_update.strip()),
            "branch": edit.branch,
        }
        changed = {
            name: [before[name], after[name]] for name in before if before[name] != after[name]
        }
        strategy.root_cause = after["root_cause"]
        strategy.strategy_update = after["strategy_update"]
        strategy.branch = edit.branch
        strategy.signature = branch_signature(strategy.kind, edit.branch)
        strategy.tool_name = edit.branch.get("tool", "")
        strategy.intent = edit.branch.get("intent", "")
        strategy.replay_status = Strategy.Replay.PASSED
        strategy.replay_detail = detail
        strategy.save()
        audit(
            action="strategy.edit",
            target=strategy.label,
            actor=user,
            details={"review": item.pk, "changed": changed, "replay": detail},
        )
        item.strategy = strategy
        _approve(
            item,
            user=user,
            note=note,
            details={"edited": sorted(changed), "changes": redact_value(changed)},
        )
    return item


def review_item_reject(*, item_id: int, user: Any = None, note: str = "") -> ReviewItem:
    """Reject with a reason: the strategy stops being applied (kept for audit)."""
    if not note.strip():
        raise ValueError("a rejection needs a reason")
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        if item.strategy is not None:
            strategy_reject(strategy=item.strategy, actor=user, reason=note or item.reason)
        _close(item, status=ReviewItem.Status.REJECTED, user=user, note=note)
        audit(
            action="review.reject",
            target=f"review {item.pk}",
            actor=user,
            details={"reason": item.reason, "note": note},
        )
    return item


def review_item_request_evidence(*, item_id: int, user: Any, note: str) -> ReviewItem:
    """Send an item back for more evidence; new evidence (or a person) reopens it."""
    if not note.strip():
        raise ValueError("say what evidence is missing")
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        item.status = ReviewItem.Status.NEEDS_EVIDENCE
        item.evidence_request = redact_text(note)
        item.evidence_requested_at = timezone.now()
        item.locked_by = None
        item.locked_at = None
        item.save(
            update_fields=[
                "status",
                "evidence_request",
                "evidence_requested_at",
                "locked_by",
                "locked_at",
            ]
        )
        audit(
            action="review.request_evidence",
            target=f"review {item.pk}",
            actor=user,
            details={"reason": item.reason, "note": note},
        )
    return item


def review_item_reopen(*, item_id: int, user: Any, why: str = "manual") -> ReviewItem:
    """Put an item that waits for evidence back in the queue."""
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().get(pk=item_id)
        if item.status != ReviewItem.Status.NEEDS_EVIDENCE:
            raise ReviewConflict(f"review {item.pk} is {item.status}, not waiting for evidence")
        item.status = ReviewItem.Status.OPEN
        item.save(update_fields=["status"])
        audit(action="review.reopen", target=f"review {item.pk}", actor=user, details={"why": why})
    return item


def review_item_assign(*, item_id: int, user: Any, assignee: Any) -> ReviewItem:
    """Assign an undecided item to a reviewer (``None`` clears the assignment)."""
    if assignee is not None and not user_can_review(assignee):
        raise ValueError(f"{assignee} does not review strategies")
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().get(pk=item_id)
        if item.status not in UNDECIDED:
            raise ReviewConflict(f"review {item.pk} was already {item.status}")
        previous = item.assigned_to.get_username() if item.assigned_to else None
        item.assigned_to = assignee
        item.save(update_fields=["assigned_to"])
        audit(
            action="review.assign",
            target=f"review {item.pk}",
            actor=user,
            details={
                "assignee": assignee.get_username() if assignee else None,
                "previous": previous,
            },
        )
    return item


def feedback_submit(*, trace_id: str, user: Any, rating: str, comment: str = "") -> Feedback:
    """Store a thumbs up/down on a run; a new thumbs-down opens a review item for the run.

    One open item per run, however many people vote it down.
    """
    with transaction.atomic():
        # Votes on one run queue up here, so two thumbs-down open one item, not two.
        Trace.objects.select_for_update().filter(pk=trace_id).first()
        feedback, turned_down = trace_feedback_record(
            trace_id=trace_id, user_id=user.pk, rating=rating, comment=comment
        )
        if turned_down:
            waiting = ReviewItem.objects.filter(
                trace_id=trace_id,
                reason=ReviewItem.Reason.THUMBS_DOWN,
                status=ReviewItem.Status.NEEDS_EVIDENCE,
            ).first()
            if waiting is not None:
                # Another person found the answer wrong: the evidence asked for arrived.
                review_item_reopen(item_id=waiting.pk, user=user, why="another thumbs-down")
                return feedback
            item, created = ReviewItem.objects.get_or_create(
                trace_id=trace_id,
                reason=ReviewItem.Reason.THUMBS_DOWN,
                status=ReviewItem.Status.OPEN,
                defaults={"detail": feedback.comment or f"Thumbs down from {user}."},
            )
            if created:
                audit(
                    action="review.open",
                    target=f"review {item.pk}",
                    actor=user,
                    details={"reason": item.reason, "trace": str(trace_id)},
                )
    return feedback
