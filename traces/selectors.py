"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from traces.models import Job, Step, Trace

VIEW_ALL_TRACES = "traces.view_all_traces"
VIEW_JOBS = "traces.view_job"


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


def user_can_view_jobs(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(VIEW_JOBS))  # type: ignore[union-attr]


def jobs_running(*, limit: int = 50) -> QuerySet[Job]:
    """Running jobs, oldest first: the ones someone is waiting on longest lead."""
    return Job.objects.filter(status=Job.Status.RUNNING).order_by("started_at", "id")[:limit]


def jobs_ended(*, kind: str = "", limit: int = 50) -> QuerySet[Job]:
    """The most recent ended jobs (bounded: the table only grows)."""
    qs = Job.objects.exclude(status=Job.Status.RUNNING)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-started_at", "-id")[:limit]
