"""Decisions on review items. Policy changes go through ``policies.services``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.models import Strategy
from policies.services import audit, strategy_activate, strategy_reject
from reviews.models import ReviewItem
from traces.models import Feedback, Trace
from traces.redaction import redact_text
from traces.services import trace_feedback_record

LOCK_MINUTES = 15


class ReviewConflict(Exception):
    """The item was decided or is locked by someone else."""


def _open_item_for_update(item_id: int, user: Any) -> ReviewItem:
    item = ReviewItem.objects.select_for_update().get(pk=item_id)
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


def _close(item: ReviewItem, *, status: str, user: Any, note: str) -> None:
    item.status = status
    item.decided_by = user if getattr(user, "pk", None) else None
    item.decided_at = timezone.now()
    item.decision_note = redact_text(note)
    item.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])


def review_item_approve(*, item_id: int, user: Any = None, note: str = "") -> ReviewItem:
    """Approve: publish a proposed strategy, keep a failing one, or resume automation."""
    with transaction.atomic():
        item = _open_item_for_update(item_id, user)
        strategy = item.strategy
        if item.reason == ReviewItem.Reason.LOW_CONFIDENCE and strategy is not None:
            strategy_activate(strategy=strategy, actor=user, author_kind="reviewer")
        elif item.reason == ReviewItem.Reason.CONSECUTIVE_FAILURES and strategy is not None:
            Strategy.objects.filter(pk=strategy.pk).update(
                needs_review=False, consecutive_failures=0
            )
        _close(item, status=ReviewItem.Status.APPROVED, user=user, note=note)
        audit(
            action="review.approve",
            target=f"review {item.pk}",
            actor=user,
            details={"reason": item.reason, "note": note},
        )
    return item


def review_item_reject(*, item_id: int, user: Any = None, note: str = "") -> ReviewItem:
    """Reject: the strategy stops being applied (kept for audit)."""
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
            item, created = ReviewItem.objects.get_or_create(
                trace_id=trace_id,
                reason=ReviewItem.Reason.THUMBS_DOWN,
                status=ReviewItem.Status.OPEN,
                defaults={"detail": comment[:2000] or f"Thumbs down from {user}."},
            )
            if created:
                audit(
                    action="review.open",
                    target=f"review {item.pk}",
                    actor=user,
                    details={"reason": item.reason, "trace": str(trace_id)},
                )
    return feedback
