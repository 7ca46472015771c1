"""Reads of the review queue."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from reviews.models import ReviewItem
from traces.selectors import user_sees_all_traces


def user_can_review(user: Any) -> bool:
    """Ops staff and admins decide on strategies; support agents do not."""
    return user_sees_all_traces(user)


def review_items_open() -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.filter(status=ReviewItem.Status.OPEN)
        .select_related("strategy", "locked_by", "trace")
        .order_by("created_at")
    )


def review_items_decided(*, limit: int = 20) -> QuerySet[ReviewItem]:
    return (
        ReviewItem.objects.exclude(status=ReviewItem.Status.OPEN)
        .select_related("strategy", "decided_by", "trace")
        .order_by("-decided_at")[:limit]
    )
