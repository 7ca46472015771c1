"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from traces.models import Step, Trace

VIEW_ALL_TRACES = "traces.view_all_traces"


def user_sees_all_traces(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(VIEW_ALL_TRACES))  # type: ignore[union-attr]


def traces_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Trace]:
    """Holders of ``traces.view_all_traces`` (ops, admins) see every trace; anyone else
    signed in sees only the runs they started, so another user's trace id is a 404."""
    qs = Trace.objects.select_related("agent")
    if not user.is_authenticated:
        return qs.none()
    if user_sees_all_traces(user):
        return qs
    return qs.filter(created_by_id=user.pk)


def steps_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Step]:
    return Step.objects.filter(trace__in=traces_visible_to(user=user).values("pk"))
