"""Reads of the review queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from policies.selectors import source_traces_prefetch
from reviews.models import AuditLog, ReviewItem

REVIEW_STRATEGIES = "reviews.review_strategies"
VIEW_AUDIT_LOG = "reviews.view_auditlog"


def user_can_review(user: Any) -> bool:
    """Ops staff and admins decide on strategies; support agents do not."""
    return bool(user.has_perm(REVIEW_STRATEGIES))


def review_items_open() -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.filter(status=ReviewItem.Status.OPEN)
        .select_related("strategy", "locked_by")
        # The evidence links, in one query however many items are open.
        .prefetch_related(source_traces_prefetch(lookup="strategy__source_traces"))
        .order_by("created_at")
    )


def review_items_decided(*, limit: int = 20) -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.exclude(status=ReviewItem.Status.OPEN)
        .select_related("strategy", "decided_by")
        .order_by("-decided_at")[:limit]
    )


def user_can_view_audit_log(user: Any) -> bool:
    """The audit log is for admins: only they hold ``reviews.view_auditlog``."""
    return bool(user.has_perm(VIEW_AUDIT_LOG))


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page asks for; empty fields do not filter."""

    actor: str = ""  # a username, or an actor kind (system, auto_merge, import, ...)
    action: str = ""
    target: str = ""
    since: datetime | None = None
    until: datetime | None = None


def audit_log_page(
    *, filters: AuditFilter, cursor: tuple[datetime, int] | None = None, limit: int = 50
) -> list[AuditLog]:
    """Up to ``limit`` + 1 entries, newest first, strictly after ``cursor`` (keyset on
    created_at, id): each page costs one indexed range read, never a COUNT."""
    qs = AuditLog.objects.select_related("actor").only(
        "id", "created_at", "actor_kind", "action", "target", "details", "actor__username"
    )
    if filters.actor:
        qs = qs.filter(Q(actor__username=filters.actor) | Q(actor_kind=filters.actor))
    if filters.action:
        qs = qs.filter(action=filters.action)
    if filters.target:
        qs = qs.filter(target=filters.target)
    if filters.since:
        qs = qs.filter(created_at__gte=filters.since)
    if filters.until:
        qs = qs.filter(created_at__lt=filters.until)
    if cursor is not None:
        at, pk = cursor
        qs = qs.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=pk))
    return list(qs.order_by("-created_at", "-id")[: limit + 1])
