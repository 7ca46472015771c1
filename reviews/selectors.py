"""Reads of the review queue."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from policies.selectors import source_traces_prefetch
from reviews.models import ReviewItem

REVIEW_STRATEGIES = "reviews.review_strategies"


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
