"""Reads of the review queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from policies.documents import DiffRow, policy_document_render, policy_document_side_by_side
from policies.models import PolicyVersion, Strategy
from policies.selectors import policy_version_active, source_traces_prefetch, strategies_for_trace
from policies.services import policy_members_with
from reviews.models import AuditLog, ReviewItem
from traces.models import Feedback, Trace

REVIEW_STRATEGIES = "reviews.review_strategies"
VIEW_AUDIT_LOG = "reviews.view_auditlog"
# How long a reviewer's claim on an item holds (reviews.services.review_item_lock).
LOCK_MINUTES = 15


def user_can_review(user: Any) -> bool:
    """Ops staff and admins decide on strategies; support agents do not."""
    return bool(user.has_perm(REVIEW_STRATEGIES))


@dataclass(frozen=True)
class ReviewFilter:
    """What the queue page asks for; empty fields do not filter."""

    status: str = ReviewItem.Status.OPEN  # "" for every status
    reason: str = ""
    assigned: str = ""  # "me", "none", or "" (anyone)


QUEUE_PAGE_SIZE = 100


def review_items_list(
    *, filters: ReviewFilter, user: Any, limit: int = QUEUE_PAGE_SIZE, after: int | None = None
) -> tuple[list[ReviewItem], int | None]:
    """Items matching ``filters``, oldest first while undecided, newest decision first after;
    a page of ``limit`` from the one after item ``after`` (a keyset: no count, no offset),
    and the id to pass as ``after`` for the next page (None on the last one)."""
    qs = ReviewItem.objects.select_related(
        "strategy", "locked_by", "trace", "assigned_to", "decided_by"
    ).prefetch_related(source_traces_prefetch(lookup="strategy__source_traces"))
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.reason:
        qs = qs.filter(reason=filters.reason)
    if filters.assigned == "me":
        qs = qs.filter(assigned_to=user)
    elif filters.assigned == "none":
        qs = qs.filter(assigned_to=None)
    undecided = filters.status in (ReviewItem.Status.OPEN, ReviewItem.Status.NEEDS_EVIDENCE)
    order = ("created_at", "id") if undecided else ("-created_at", "-id")
    cursor = (
        ReviewItem.objects.filter(pk=after).values_list("created_at", flat=True).first()
        if after is not None
        else None
    )
    if cursor is not None:
        if undecided:
            qs = qs.filter(Q(created_at__gt=cursor) | Q(created_at=cursor, id__gt=after))
        else:
            qs = qs.filter(Q(created_at__lt=cursor) | Q(created_at=cursor, id__lt=after))
    rows = list(qs.order_by(*order)[: limit + 1])
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)


def reviewers() -> QuerySet[Any]:
    """Active users who may decide review items (to assign an item to)."""
    app_label, codename = REVIEW_STRATEGIES.split(".")
    via_group = Q(
        groups__permissions__codename=codename,
        groups__permissions__content_type__app_label=app_label,
    )
    direct = Q(
        user_permissions__codename=codename,
        user_permissions__content_type__app_label=app_label,
    )
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_superuser=True) | via_group | direct)
        .distinct()
        .order_by("username")
    )


def review_item_for_page(*, item_id: int) -> ReviewItem:
    """One item with everything its page reads in the same query (DoesNotExist if gone)."""
    return (
        ReviewItem.objects.select_related(
            "strategy", "strategy__policy", "trace", "assigned_to", "locked_by", "decided_by"
        )
        .prefetch_related(source_traces_prefetch(lookup="strategy__source_traces"))
        .get(pk=item_id)
    )


def _open_items_for(user: Any, lock_minutes: int) -> QuerySet[ReviewItem]:
    stale = timezone.now() - timedelta(minutes=lock_minutes)
    # Items another reviewer holds a fresh lock on are theirs for now.
    held = Q(locked_at__gt=stale) & ~Q(locked_by=user) & Q(locked_by__isnull=False)
    return ReviewItem.objects.filter(status=ReviewItem.Status.OPEN).exclude(held)


def review_item_neighbours(
    *, item: ReviewItem, user: Any, lock_minutes: int = LOCK_MINUTES
) -> tuple[int | None, int | None]:
    """The open items before and after ``item`` in queue order (j/k on the item page)."""
    open_items = _open_items_for(user, lock_minutes).exclude(pk=item.pk)
    before = Q(created_at__lt=item.created_at) | Q(created_at=item.created_at, id__lt=item.pk)
    after = Q(created_at__gt=item.created_at) | Q(created_at=item.created_at, id__gt=item.pk)
    previous = (
        open_items.filter(before)
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)
        .first()
    )
    following = (
        open_items.filter(after).order_by("created_at", "id").values_list("pk", flat=True).first()
    )
    return previous, following


def review_item_next(
    *, after: ReviewItem, user: Any, lock_minutes: int = LOCK_MINUTES
) -> int | None:
    """The item to open after deciding ``after``: the next open one, else the first."""
    _, following = review_item_neighbours(item=after, user=user, lock_minutes=lock_minutes)
    if following is not None:
        return following
    return (
        _open_items_for(user, lock_minutes)
        .exclude(pk=after.pk)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
        .first()
    )


@dataclass(frozen=True)
class VersionPreview:
    """The policy version approving a strategy would create, against the active one."""

    current: PolicyVersion | None
    number: int
    added: list[Strategy]
    replaced: list[Strategy]
    kept: int
    rows: list[DiffRow] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(1 for row in self.rows if row.tag not in ("equal", "skip"))


def review_item_version_preview(*, strategy: Strategy) -> VersionPreview:
    """Render the would-be next version (the same membership ``strategy_activate`` uses)
    and diff it line by line with the active one; nothing is written."""
    current = policy_version_active()
    members, replaced = policy_members_with(current=current, strategy=strategy)
    current_ids = set(current.strategies.values_list("pk", flat=True)) if current else set()
    highest = PolicyVersion.objects.aggregate(highest=Max("number"))["highest"] or 0
    document = policy_document_render(
        number=highest + 1, parent=current.number if current else None, strategies=members
    )
    return VersionPreview(
        current=current,
        number=highest + 1,
        added=[m for m in members if m.pk not in current_ids],
        replaced=replaced,
        kept=sum(1 for m in members if m.pk in current_ids),
        rows=policy_document_side_by_side(
            old_text=current.document if current else "", new_text=document
        ),
    )


def review_item_similar_strategies(*, strategy: Strategy, limit: int = 5) -> list[Strategy]:
    """Past strategies for the same error on the same tool, or of the same kind there,
    whatever became of them (rejected and deprecated ones teach the most)."""
    same_error = Q(error_type=strategy.error_type) if strategy.error_type else Q(pk__in=[])
    return list(
        Strategy.objects.filter(tool_name=strategy.tool_name)
        .filter(same_error | Q(kind=strategy.kind))
        .exclude(pk=strategy.pk)
        .only(
            "id",
            "kind",
            "tool_name",
            "intent",
            "error_type",
            "root_cause",
            "strategy_update",
            "branch",
            "status",
            "confidence",
            "applications",
            "successes",
            "updated_at",
        )
        .order_by("-updated_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class ThumbsDown:
    """What a thumbs-down item names: the answer's run, the strategies it applied, the votes."""

    trace: Trace
    applied: list[Strategy]
    votes: list[Feedback]


def review_item_thumbs_down(*, trace: Trace) -> ThumbsDown:
    """The strategies the marked-down run applied (from its steps), in step order."""
    applied_ids: list[int] = []
    for applied in trace.steps.exclude(strategies_applied=[]).values_list(
        "strategies_applied", flat=True
    ):
        for entry in applied or []:
            strategy_id = entry.get("id") if isinstance(entry, dict) else None
            if isinstance(strategy_id, int) and strategy_id not in applied_ids:
                applied_ids.append(strategy_id)
    found = strategies_for_trace(trace_id=trace.pk, applied_ids=applied_ids)
    votes = list(
        Feedback.objects.filter(trace=trace, rating=Feedback.Rating.DOWN)
        .select_related("user")
        .order_by("-updated_at")[:20]
    )
    return ThumbsDown(trace=trace, applied=found.applied, votes=votes)


def review_items_decided(*, limit: int = 20) -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.exclude(status=ReviewItem.Status.OPEN)
        .select_related("strategy", "decided_by", "trace")
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
