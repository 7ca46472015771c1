"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Max, Min, OuterRef, QuerySet, Subquery

from traces.models import Feedback, Step, Trace

ROLE_SUPPORT = "support"
ROLE_OPS = "ops"
ROLE_ADMIN = "admin"


def user_sees_all_traces(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return bool(user.groups.filter(name__in=[ROLE_OPS, ROLE_ADMIN]).exists())  # type: ignore[attr-defined]


def traces_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Trace]:
    """Ops and admins see every trace; support agents see the runs they started."""
    qs = Trace.objects.select_related("agent")
    if not user.is_authenticated:
        return qs.none()
    if user_sees_all_traces(user):
        return qs
    return qs.filter(created_by_id=user.pk)


def steps_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Step]:
    return Step.objects.filter(trace__in=traces_visible_to(user=user).values("pk"))


def conversations_of(*, user: AbstractBaseUser | AnonymousUser, limit: int = 20) -> list[dict]:
    """The user's own chat conversations, latest activity first: one row per session with
    its first question, its run count and when it started and last moved.

    Scoped to runs the user started, whatever their role: this is a personal history.
    """
    if not user.is_authenticated:
        return []
    own = Trace.objects.filter(created_by_id=user.pk, source="chat").exclude(session_id="")
    first_query = (
        Trace.objects.filter(created_by_id=user.pk, session_id=OuterRef("session_id"))
        .order_by("created_at")
        .values("query")[:1]
    )
    return list(
        own.order_by()
        .values("session_id")
        .annotate(
            started_at=Min("created_at"),
            last_at=Max("created_at"),
            runs=Count("id"),
            first_query=Subquery(first_query),
        )
        .order_by("-last_at")[:limit]
    )


def conversation_exists(*, user: AbstractBaseUser | AnonymousUser, session_id: str) -> bool:
    if not user.is_authenticated or not session_id:
        return False
    return Trace.objects.filter(created_by_id=user.pk, session_id=session_id).exists()


def steps_after(*, trace_id: str, after: int) -> list[Step]:
    """A run's steps numbered above ``after``, in order (a live view catching up)."""
    return list(
        Step.objects.filter(trace_id=trace_id, step_number__gt=after).order_by("step_number")
    )


def runs_for_chat(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Trace]:
    """Runs the user may see, each with ``my_rating``: the user's own thumbs up/down."""
    mine = Feedback.objects.filter(trace_id=OuterRef("pk"), user=user.pk or 0).values("rating")
    return traces_visible_to(user=user).annotate(my_rating=Subquery(mine[:1]))


def run_for_chat(*, user: AbstractBaseUser | AnonymousUser, trace_id: str) -> Trace | None:
    return runs_for_chat(user=user).filter(pk=trace_id).first()
