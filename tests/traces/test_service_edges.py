"""Edges of the trace and job services: an ended run is not restarted, and a job's total
may be corrected while it runs (never below zero)."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from django.utils import timezone

from traces.models import Job, Step, Trace
from traces.services import (
    job_finish,
    job_progress,
    job_start,
    query_hash,
    trace_create,
    trace_feedback_record,
    trace_finish,
    trace_mark_running,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("status", ["finished", "failed", "fallback"])
def test_an_ended_run_is_not_marked_running_again(support_agent: Any, status: str) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    assert trace_mark_running(trace_id=str(trace.pk)) is True
    Trace.objects.filter(pk=trace.pk).update(status=status)

    assert trace_mark_running(trace_id=str(trace.pk)) is False

    trace.refresh_from_db()
    assert trace.status == status and trace.attempts == 1


def test_a_redelivered_run_counts_its_attempts_and_keeps_its_first_start(
    support_agent: Any,
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    assert trace_mark_running(trace_id=str(trace.pk)) is True
    trace.refresh_from_db()
    first_start = trace.started_at
    assert first_start is not None and trace.attempts == 1

    assert trace_mark_running(trace_id=str(trace.pk)) is True

    trace.refresh_from_db()
    assert (trace.attempts, trace.started_at) == (2, first_start)


def test_a_feedback_comment_is_kept_to_its_first_2000_characters(support_agent: Any) -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="rater", password="pw-rater-123")
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")

    feedback, _ = trace_feedback_record(
        trace_id=str(trace.pk), user_id=user.pk, rating="down", comment="a" * 1999 + "bc" * 500
    )

    feedback.refresh_from_db()
    assert feedback.comment == "a" * 1999 + "b"


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


def _tool_step(trace: Trace, number: int, *, ok: bool) -> None:
    Step.objects.create(
        trace=trace,
        step_number=number,
        phase=Step.Phase.ACTION,
        action_type=Step.ActionType.TOOL,
        tool_name="get_order",
        ok=ok,
        error_type="" if ok else "INTERNAL_SERVER_ERROR",
        started_at=timezone.now(),
    )


def test_two_failed_calls_then_a_good_one_are_two_retries_and_answer_from_data(
    support_agent: Any,
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _tool_step(trace, 1, ok=False)
    _tool_step(trace, 2, ok=False)
    _tool_step(trace, 3, ok=True)

    finished = trace_finish(trace_id=str(trace.pk), status="finished", final_answer="a")

    assert (finished.retries, finished.failed_steps, finished.total_steps) == (2, 2, 3)
    assert finished.outcome == Trace.Outcome.ANSWERED_FROM_DATA


def test_the_query_hash_is_stable_across_case_and_spacing() -> None:
    # Stored on every trace and compared across releases: the normalisation is a contract.
    expected = hashlib.md5(b"where is my order", usedforsecurity=False).hexdigest()
    assert query_hash("  Where is\tmy   ORDER ") == expected


def test_a_new_trace_has_no_locale_unless_given_and_a_bucket_from_its_id(
    support_agent: Any,
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    trace.refresh_from_db()
    assert trace.locale == "" and trace.time_zone == ""
    assert trace.policy_bucket == trace.pk.int % 100


def test_finishing_a_run_logs_its_id_status_and_outcome(
    support_agent: Any, caplog: pytest.LogCaptureFixture
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    caplog.set_level(logging.INFO, logger="traces.services")

    trace_finish(trace_id=str(trace.pk), status="finished", final_answer="a", outcome="failed")

    by_event = {record.getMessage(): record for record in caplog.records}
    corrected = by_event["trace.status_follows_outcome"]
    assert (corrected.trace_id, corrected.status, corrected.outcome) == (  # type: ignore[attr-defined]
        str(trace.pk),
        "finished",
        "failed",
    )
    finished = by_event["trace.finished"]
    assert (finished.trace_id, finished.status, finished.outcome) == (  # type: ignore[attr-defined]
        str(trace.pk),
        "failed",
        "failed",
    )
