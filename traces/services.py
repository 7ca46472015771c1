"""Writes to the trace store: create, start, finish, abort, sweep, handover, feedback."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from traces.live import status_publish_on_commit, step_publish_on_commit
from traces.models import Feedback, Job, Step, Trace
from traces.redaction import redact_text
from traces.rollups import (
    rollups_forget_trace,
    rollups_record_handover,
    rollups_record_run,
    rollups_record_steps,
)
from traces.selectors import tool_call_retries

logger = logging.getLogger(__name__)


def query_hash(query: str) -> str:
    """MD5 of the normalised query, to cluster similar requests (not for security)."""
    normalised = " ".join(query.lower().split())
    return hashlib.md5(normalised.encode(), usedforsecurity=False).hexdigest()


def trace_create(
    *,
    agent_id: int,
    query: str,
    llm_backend: str,
    llm_model: str = "",
    customer_id: str = "",
    session_id: str = "",
    created_by_id: int | None = None,
    source: str = "api",
    origin: str = Trace.Origin.CUSTOMER,
    locale: str = "",
    time_zone: str = "",
) -> Trace:
    """A queued trace. ``origin`` marks runs the learning loop makes itself (replays,
    experiments): they stay out of customer metrics and the default trace list."""
    # A customer may paste a card number or a password; the run never needs it verbatim.
    query = redact_text(query)
    trace = Trace(
        agent_id=agent_id,
        query=query,
        query_hash=query_hash(query),
        llm_backend=llm_backend,
        llm_model=llm_model,
        customer_id=customer_id,
        session_id=session_id,
        created_by_id=created_by_id,
        source=source,
        origin=origin,
        locale=locale,
        time_zone=time_zone,
    )
    # A stable bucket 0..99 per run: canary rollouts route by it.
    trace.policy_bucket = trace.id.int % 100
    trace.save(force_insert=True)
    return trace


def trace_set_policy(*, trace_id: str, version: str) -> None:
    rollups_forget_trace(trace_id=trace_id)
    Trace.objects.filter(pk=trace_id).update(policy_version=version)


def trace_mark_running(*, trace_id: str) -> bool:
    """queued/running -> running, counting the attempt. False when already terminal."""
    return trace_start_running(trace_id=trace_id) is not None


def trace_start_running(*, trace_id: str) -> Trace | None:
    """``trace_mark_running`` that returns the run's row as saved, with its agent (the row
    the runtime executes, read once); None when already terminal."""
    with transaction.atomic():
        # Locks the trace's row only, not its agent's.
        trace = (
            Trace.objects.select_related("agent").select_for_update(of=("self",)).get(pk=trace_id)
        )
        if trace.is_terminal:
            return None
        trace.status = Trace.Status.RUNNING
        trace.attempts += 1
        trace.started_at = trace.started_at or timezone.now()
        trace.save(update_fields=["status", "attempts", "started_at"])
        status_publish_on_commit(trace_id=trace_id, status=trace.status)
    return trace


def _outcome_for_status(status: str, tool_successes: int) -> str:
    """The outcome of a run whose runtime did not say (a crash, an older runtime)."""
    if status == Trace.Status.FALLBACK:
        return Trace.Outcome.HANDED_OVER
    if status == Trace.Status.FAILED:
        return Trace.Outcome.FAILED
    if tool_successes:
        return Trace.Outcome.ANSWERED_FROM_DATA
    return Trace.Outcome.ANSWERED_WITHOUT_DATA


def _has_key(value: Any, key: str) -> bool:
    """PostgreSQL's ``jsonb ? key`` on a stored value: an object's key, or an array's
    string element (what ``details__has_key`` filters on)."""
    if isinstance(value, dict | list):
        return key in value
    return False


def _step_totals(trace_id: str) -> dict[str, Any]:
    """The totals a finished run stores, from one plain read of its steps' few columns.

    The same figures as the aggregates a rebuild computes (count, sums, the failed steps,
    the successful and all tool calls, and what ``tool_call_retries`` needs: the tool calls
    that failed, the number of the last failed one and of the last), summed here instead of
    compiling ten filtered aggregates per run: a run has tens of steps at most. A
    pre-condition's lookup (``details`` has the key ``auxiliary``) is made on the call's
    behalf, never as a retry of it.
    """
    rows = Step.objects.filter(trace_id=trace_id).values_list(
        "step_number",
        "latency_ms",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "ok",
        "phase",
        "action_type",
        "details",
    )
    totals: dict[str, Any] = {
        "steps": 0,
        "latency": 0,
        "tokens": 0,
        "cost": Decimal(0),
        "failed": 0,
        "tool_successes": 0,
        "action_steps": 0,
        "failed_calls": 0,
        "last_failed_call": None,
        "last_call": None,
    }
    for number, latency, prompt, completion, cost, ok, phase, action_type, details in rows:
        totals["steps"] += 1
        totals["latency"] += latency
        totals["tokens"] += prompt + completion
        totals["cost"] += cost
        if not ok:
            totals["failed"] += 1
        if phase != Step.Phase.ACTION or action_type != Step.ActionType.TOOL:
            continue
        totals["action_steps"] += 1
        if ok:
            totals["tool_successes"] += 1
        if _has_key(details, "auxiliary"):
            continue
        totals["last_call"] = max(number, totals["last_call"] or number)
        if not ok:
            totals["failed_calls"] += 1
            totals["last_failed_call"] = max(number, totals["last_failed_call"] or number)
    return totals


def trace_finish(
    *,
    trace_id: str,
    status: str,
    final_answer: str,
    error_type: str = "",
    outcome: str = "",
    learn: bool = False,
) -> Trace:
    """Set the terminal status, the outcome and the totals computed from the trace's steps.

    With ``learn``, the same UPDATE marks the run as owed to the learning loop
    (``Trace.Learning.PENDING``): the hand-off that follows clears the mark, and the
    learning sweep retries it if the hand-off never happens.

    The outcome decides the status (``Trace.OUTCOME_STATUS``): a run that ends by telling
    the customer a lookup failed is ``failed`` even though the model wrote a final answer.
    Without an outcome, one is derived from the status and the steps.
    """
    if outcome:
        implied = Trace.OUTCOME_STATUS[Trace.Outcome(outcome)]
        if implied != status:
            logger.warning(
                "trace.status_follows_outcome",
                extra={"trace_id": str(trace_id), "status": status, "outcome": outcome},
            )
        status = implied
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace_id)
        if trace.is_terminal:
            return trace
        totals = _step_totals(trace_id)
        trace.status = status
        trace.outcome = outcome or _outcome_for_status(status, totals["tool_successes"])
        trace.final_answer = redact_text(final_answer)
        trace.error_type = error_type
        trace.total_steps = totals["steps"]
        trace.total_latency_ms = totals["latency"]
        trace.total_tokens = totals["tokens"]
        trace.total_cost_usd = totals["cost"]
        trace.failed_steps = totals["failed"]
        trace.retries = tool_call_retries(
            failed_calls=totals["failed_calls"],
            last_failed=totals["last_failed_call"],
            last_call=totals["last_call"],
        )
        trace.finished_at = timezone.now()
        fields = ["learning"] if learn else []
        if learn:
            trace.learning = Trace.Learning.PENDING
        trace.save(
            update_fields=[
                *fields,
                "status",
                "outcome",
                "final_answer",
                "error_type",
                "total_steps",
                "total_latency_ms",
                "total_tokens",
                "total_cost_usd",
                "failed_steps",
                "retries",
                "finished_at",
            ]
        )
        rollups_record_run(
            trace=trace, failed_steps=totals["failed"], action_steps=totals["action_steps"]
        )
        status_publish_on_commit(trace_id=trace_id, status=status)
    logger.info(
        "trace.finished",
        extra={
            "trace_id": str(trace_id),
            "status": status,
            "outcome": trace.outcome,
            "error_type": error_type,
        },
    )
    return trace


def trace_abort(*, trace_id: str, error_type: str, detail: str) -> Trace:
    """End a run that cannot go on (time limit, crash) with a final STOPPED step."""
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace_id)
        if trace.is_terminal:
            return trace
        last = trace.steps.order_by("-step_number").values_list("step_number", flat=True).first()
        stopped = Step.objects.create(
            trace=trace,
            step_number=(last or 0) + 1,
            phase=Step.Phase.STOPPED,
            ok=False,
            error_type=error_type,
            error_detail=redact_text(detail)[:2000],
            started_at=timezone.now(),
        )
        rollups_record_steps(steps=[stopped])
        step_publish_on_commit(step=stopped)
    return trace_finish(
        trace_id=trace_id,
        status=Trace.Status.FAILED,
        final_answer="",
        error_type=error_type,
        outcome=Trace.Outcome.FAILED,
    )


def traces_stuck(*, older_than: timedelta) -> list[str]:
    """Queued or running traces not touched for ``older_than``: candidates to re-enqueue."""
    cutoff = timezone.now() - older_than
    return [
        str(pk)
        for pk in Trace.objects.filter(
            status__in=[Trace.Status.QUEUED, Trace.Status.RUNNING], created_at__lt=cutoff
        )
        .exclude(steps__created_at__gte=cutoff)
        .values_list("pk", flat=True)
        .distinct()[:500]
    ]


def trace_handover(*, trace_id: str, user_id: int | None) -> Trace:
    """Record that a person took the conversation over; the first handover counts.

    It counts toward the takeover KPI: the run rollups get one more handover in the run's
    hour and day (unless the run itself ended handed over), and a rebuild counts every
    trace with ``handed_over_at`` set.
    """
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace_id)
        if trace.handed_over_at is not None:
            return trace
        trace.handed_over_at = timezone.now()
        trace.handed_over_by_id = user_id
        trace.save(update_fields=["handed_over_at", "handed_over_by"])
        # A run that ended handed over was counted as a takeover when it ended.
        if trace.finished_at is not None and trace.outcome != Trace.Outcome.HANDED_OVER:
            rollups_record_handover(trace=trace)
        status_publish_on_commit(trace_id=trace_id, status=trace.status)
    logger.info("trace.handed_over", extra={"trace_id": str(trace_id), "user_id": user_id})
    return trace


def trace_feedback_record(
    *, trace_id: str, user_id: int, rating: str, comment: str = ""
) -> tuple[Feedback, bool]:
    """Store a person's thumbs up/down on a run (their latest vote wins).

    Returns the row and whether it turned negative with this call, so the caller can
    feed a new thumbs-down (and only a new one) to the review queue.
    """
    if rating not in Feedback.Rating.values:
        raise ValueError(f"unknown rating {rating!r}")
    with transaction.atomic():
        previous = (
            Feedback.objects.select_for_update()
            .filter(trace_id=trace_id, user_id=user_id)
            .values_list("rating", flat=True)
            .first()
        )
        feedback, _ = Feedback.objects.update_or_create(
            trace_id=trace_id,
            user_id=user_id,
            defaults={"rating": rating, "comment": redact_text(comment)[:2000]},
        )
    turned_down = rating == Feedback.Rating.DOWN and previous != Feedback.Rating.DOWN
    logger.info(
        "trace.feedback", extra={"trace_id": str(trace_id), "user_id": user_id, "rating": rating}
    )
    return feedback, turned_down


# --- long jobs ----------------------------------------------------------------------------
# Progress is written with single conditional UPDATEs (F() increments, filtered on status):
# several workers may report on one job, and a finished job never moves again.


def _job_message(message: str) -> str:
    """A job's progress line, as shown on /traces/jobs/: it may quote a tool's response or
    an exception's text (a replay's found values, a failure), so it is redacted, then cut."""
    return redact_text(message)[:300]


def job_start(*, kind: str, name: str, total: int = 0, message: str = "") -> Job:
    """Record that a long job began; ``total`` is 0 while its size is unknown."""
    if kind not in Job.Kind.values:
        raise ValueError(f"unknown job kind {kind!r}")
    job = Job.objects.create(
        kind=kind, name=name[:120], total=max(0, total), message=_job_message(message)
    )
    logger.info("job.start", extra={"job_id": job.pk, "kind": kind, "total": total})
    return job


def job_progress(
    *, job_id: int, advance: int = 1, total: int | None = None, message: str | None = None
) -> bool:
    """Count ``advance`` more units done; False when the job already ended."""
    updates: dict[str, object] = {"done": F("done") + advance, "updated_at": timezone.now()}
    if total is not None:
        updates["total"] = max(0, total)
    if message is not None:
        updates["message"] = _job_message(message)
    return bool(Job.objects.filter(pk=job_id, status=Job.Status.RUNNING).update(**updates))


def job_finish(
    *, job_id: int, ok: bool = True, message: str | None = None, result_url: str = ""
) -> bool:
    """End a running job; a finished one stays as it ended (False)."""
    now = timezone.now()
    updates: dict[str, object] = {
        "status": Job.Status.FINISHED if ok else Job.Status.FAILED,
        "finished_at": now,
        "updated_at": now,
    }
    if message is not None:
        updates["message"] = _job_message(message)
    if result_url:
        updates["result_url"] = result_url[:300]
    ended = bool(Job.objects.filter(pk=job_id, status=Job.Status.RUNNING).update(**updates))
    if ended:
        logger.info("job.finish", extra={"job_id": job_id, "ok": ok})
    return ended


@contextlib.contextmanager
def job_running(*, kind: str, name: str, total: int = 0, message: str = "") -> Iterator[Job]:
    """A job around a block: finished when the block ends, failed when it raises."""
    job = job_start(kind=kind, name=name, total=total, message=message)
    try:
        yield job
    except BaseException as exc:
        job_finish(job_id=job.pk, ok=False, message=f"{type(exc).__name__}: {exc}")
        raise
    job_finish(job_id=job.pk)


# A job that has not reported for this long lost the process running it (a killed command,
# a worker restart): no phase of the reflexion, replay or benchmark work takes this long.
JOB_STALE_AFTER = timedelta(minutes=30)


def jobs_abandon_stale(*, older_than: timedelta = JOB_STALE_AFTER) -> int:
    """Fail running jobs that stopped reporting ``older_than`` ago; how many there were."""
    now = timezone.now()
    minutes = int(older_than.total_seconds() // 60)
    count = Job.objects.filter(status=Job.Status.RUNNING, updated_at__lt=now - older_than).update(
        status=Job.Status.FAILED,
        finished_at=now,
        updated_at=now,
        message=f"no progress for {minutes} min: the process running it has likely ended",
    )
    if count:
        logger.warning("job.abandoned", extra={"count": count})
    return count
