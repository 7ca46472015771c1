"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from traces.models import Step, Trace

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
