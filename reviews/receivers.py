"""Audit rows and review items for changes announced by the lower layers, which may not
import ``reviews`` (``agents.signals``, ``policies.signals``), and the review state the
learning loop reads (``policies.hooks``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.hooks import Approval, SignatureHold
from policies.services import audit
from reviews.models import AuditLog, ReviewItem


def tool_admin_changed_audit(
    sender: Any, *, actor: Any, action: str, target: str, details: dict[str, Any], **_: Any
) -> None:
    """Write the audit row of an admin's change to the tool whitelist."""
    AuditLog.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_kind="user" if getattr(actor, "pk", None) else "system",
        action=action,
        target=target,
        details=details,
    )


# --- the learning loop's events (policies.signals) ---------------------------------------
# Statuses of an item no person has decided yet.
REVIEW_UNDECIDED = (ReviewItem.Status.OPEN, ReviewItem.Status.NEEDS_EVIDENCE)


def audit_record(
    sender: Any,
    *,
    actor: Any,
    actor_kind: str,
    action: str,
    target: str,
    details: dict[str, Any],
    **_: Any,
) -> None:
    """Write an audit row the learning loop announced (``policies.signals.audit_event``)."""
    AuditLog.objects.create(
        actor=actor, actor_kind=actor_kind, action=action, target=target, details=details
    )


def review_item_open(
    sender: Any,
    *,
    strategy: Any = None,
    error_signature: str = "",
    reason: str,
    detail: str,
    **_: Any,
) -> None:
    """Queue a review item (``policies.signals.review_requested``)."""
    fields: dict[str, Any] = {"reason": ReviewItem.Reason(reason), "detail": detail}
    if strategy is not None:
        fields["strategy"] = strategy
    if error_signature:
        fields["error_signature"] = error_signature
    ReviewItem.objects.create(**fields)


def review_items_close_auto_merged(
    sender: Any, *, strategy: Any, details: dict[str, Any], **_: Any
) -> None:
    """The automation published ``strategy``: its undecided items are closed as approved
    by it, and the merge is audited with the items it closed."""
    with transaction.atomic():
        closed = list(
            ReviewItem.objects.select_for_update()
            .filter(strategy=strategy, status__in=REVIEW_UNDECIDED)
            .values_list("pk", flat=True)
        )
        ReviewItem.objects.filter(pk__in=closed).update(
            status=ReviewItem.Status.APPROVED,
            decided_by=None,
            decided_at=timezone.now(),
            decision_note="auto-merged: replay passed, confidence above the minimum",
        )
        audit(
            action="review.auto_merge",
            target=strategy.label,
            actor="auto_merge",
            details={**details, "closed_reviews": closed},
        )


def review_items_reopen_on_evidence(sender: Any, *, strategy: Any, trace_id: str, **_: Any) -> None:
    """New evidence for ``strategy`` arrived: items a reviewer sent back for more evidence
    go back to the queue (the item page lists the new trace among the evidence)."""
    reopened = list(
        ReviewItem.objects.select_for_update()
        .filter(strategy=strategy, status=ReviewItem.Status.NEEDS_EVIDENCE)
        .values_list("pk", flat=True)
    )
    if reopened:
        ReviewItem.objects.filter(pk__in=reopened).update(status=ReviewItem.Status.OPEN)
        for pk in reopened:
            audit(
                action="review.reopen",
                target=f"review {pk}",
                details={"why": "new evidence", "trace": str(trace_id)},
            )


class DatabaseReviewRecords:
    """What the learning loop reads from the queue and the audit log (``policies.hooks``)."""

    def signature_hold(self, signature: str) -> SignatureHold:
        items = ReviewItem.objects.filter(
            error_signature=signature, reason=ReviewItem.Reason.NEGATIVE_FEEDBACK
        )
        held = items.filter(status=ReviewItem.Status.OPEN).exists()
        if held:
            return SignatureHold(held=True, decided_at=None)
        decided_at = (
            items.exclude(decided_at=None)
            .order_by("-decided_at")
            .values_list("decided_at", flat=True)
            .first()
        )
        return SignatureHold(held=False, decided_at=decided_at)

    def approval_last(self, target: str) -> Approval | None:
        approval = (
            AuditLog.objects.filter(action="strategy.approve", target=target)
            .order_by("-pk")
            .first()
        )
        if approval is None:
            return None
        return Approval(
            actor=approval.actor,
            author_kind=(approval.details or {}).get("author_kind", "reviewer"),
        )
