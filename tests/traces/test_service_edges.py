"""Edges of the trace and job services: an ended run is not restarted, and a job's total
may be corrected while it runs (never below zero)."""

from __future__ import annotations

from typing import Any

import pytest

from traces.models import Job, Trace
from traces.services import job_finish, job_progress, job_start, trace_create, trace_mark_running

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("status", ["finished", "failed", "fallback"])
def test_an_ended_run_is_not_marked_running_again(support_agent: Any, status: str) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    assert trace_mark_running(trace_id=str(trace.pk)) is True
    Trace.objects.filter(pk=trace.pk).update(status=status)

    assert trace_mark_running(trace_id=str(trace.pk)) is False

    trace.refresh_from_db()
    assert trace.status == status and trace.attempts == 1


def test_progress_may_correct_the_total_but_not_below_zero() -> None:
    job = job_start(kind=Job.Kind.REPLAY, name="replay S1", total=3)

    assert job_progress(job_id=job.pk, total=10) is True
    job.refresh_from_db()
    assert (job.done, job.total) == (1, 10)

    assert job_progress(job_id=job.pk, advance=0, total=-4) is True
    job.refresh_from_db()
    assert (job.done, job.total) == (1, 0)

    job_finish(job_id=job.pk)
    assert job_progress(job_id=job.pk, total=99) is False
    job.refresh_from_db()
    assert job.total == 0
