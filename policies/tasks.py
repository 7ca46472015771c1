"""Reflexion jobs: thin tasks on the ``reflexion`` queue, debounced per error signature."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections
from django.utils import timezone

from policies.models import Experiment
from traces.models import Trace

logger = logging.getLogger(__name__)

# Embedded shape: one background thread runs Reflexion jobs in order, off the run's path.
_inprocess = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reflexion")
_pending: list[Future[None]] = []


def reflexion_inprocess_drain(*, timeout: float = 120.0) -> int:
    """Wait for the in-process Reflexion jobs queued so far (a CLI must not exit under
    them); return how many finished. Raises TimeoutError when ``timeout`` seconds pass
    first (the jobs go on; a job not waited for stays queued for the next drain)."""
    done = 0
    deadline = time.monotonic() + timeout
    while _pending:
        _pending[0].result(timeout=max(0.0, deadline - time.monotonic()))
        _pending.pop(0)
        done += 1
    return done


def external_runs_hand_off(*, trace_ids: list[str]) -> None:
    """Runs ingested over OTLP have ended: score and reflect on them off the ingest request,
    on a worker (the ``reflexion`` queue) or, embedded, on the background thread."""
    if not trace_ids:
        return
    if settings.AGENT_EXECUTOR == "celery":
        # argsrepr: the message's summary of its arguments, for monitoring; Celery would
        # otherwise render every id of the request, a quarter of the hand-off's cost.
        external_runs_learn.apply_async(
            (list(trace_ids),), argsrepr=f"[{len(trace_ids)} trace ids]"
        )
    else:
        _pending.append(_inprocess.submit(_external_runs_learn_inprocess, list(trace_ids)))


def _external_runs_learn_inprocess(trace_ids: list[str]) -> None:
    close_old_connections()
    try:
        external_runs_learn(trace_ids)
    finally:
        close_old_connections()


@shared_task(name="policies.external_runs_learn", ignore_result=True, acks_late=True)
def external_runs_learn(trace_ids: list[str]) -> None:
    """After each ingested run, what a native run's end does: score the strategies it
    applied, then queue Reflexion if it failed. One run's failure does not stop the rest."""
    from policies.services import run_ended

    for trace_id in trace_ids:
        try:
            run_ended(trace_id=trace_id)
        except Exception:
            logger.exception("external_run.learn_failed", extra={"trace_id": trace_id})


def _signatures(trace: Trace) -> list[str]:
    from policies.reflexion import failures_of_trace

    return [facts.signature for facts in failures_of_trace(trace)]


def reflexion_enqueue(
    *, trace_id: str, trace: Trace | None = None, steps: list[Any] | None = None
) -> bool:
    """Queue Reflexion for a failed run unless its error signatures were just handled.
    ``trace`` is the run's row and ``steps`` every step's ``ok`` and ``error_type`` when the
    caller has read them already."""
    if trace is None:
        trace = Trace.objects.filter(pk=trace_id).first()
    if trace is None or not reflexion_wanted(trace, steps):
        return False
    return reflexion_queue(trace_id=trace_id, trace=trace)


def reflexion_wanted(trace: Trace, steps: list[Any] | None = None) -> bool:
    """Whether the ended run is one Reflexion learns from: it failed in a way Reflexion can
    learn from, Reflexion is on, and the run is not an A/B experiment's control arm (the
    loop switched off: it must not learn either)."""
    from policies.reflexion import trace_needs_reflexion

    return (
        settings.REFLEXION_ENABLED
        and trace.experiment_arm != Experiment.Arm.CONTROL
        and trace_needs_reflexion(trace, steps=steps)
    )


def reflexion_queue(*, trace_id: str, trace: Trace) -> bool:
    """Queue Reflexion for the run unless all its error signatures were handled within
    ``REFLEXION_DEBOUNCE_SECONDS``. If the broker refuses the job, the signatures claimed
    here are released before the error propagates, so that a retry is not debounced."""
    window = settings.REFLEXION_DEBOUNCE_SECONDS
    # Runs ingested over OTLP debounce apart: an outside agent exporting a failure every
    # few seconds must not hold back the learning of this installation's own runs.
    space = "reflexion:external:" if trace.origin == Trace.Origin.EXTERNAL else "reflexion:"
    fresh = [
        f"{space}{sig}"
        for sig in _signatures(trace)
        if window <= 0 or cache.add(f"{space}{sig}", 1, window)
    ]
    if not fresh:
        return False
    try:
        if settings.AGENT_EXECUTOR == "celery":
            reflect_trace.delay(trace_id)
        else:
            _pending.append(_inprocess.submit(_reflect_inprocess, trace_id))
    except Exception:
        if window > 0:
            cache.delete_many(fresh)
        raise
    return True


# Hand-offs failing in a row after which a sweep pass gives up until the next one.
SWEEP_FAILURES_IN_A_ROW = 3


def runs_learning_sweep(*, limit: int = 200) -> int:
    """Hand again to the learning loop the ended runs whose hand-off never finished (still
    marked in ``Trace.learning`` ``LEARNING_SWEEP_GRACE_SECONDS`` after they ended), oldest
    first, at most ``limit``; return how many were handed off without an error. A run that
    fails stays marked for the next pass; after ``SWEEP_FAILURES_IN_A_ROW`` failures in a
    row (the broker still away: each refusal takes its publish retries) the pass stops, so
    that it never runs into its time limit."""
    from policies.services import run_ended

    horizon = timezone.now() - timedelta(seconds=settings.LEARNING_SWEEP_GRACE_SECONDS)
    owed = list(
        Trace.objects.exclude(learning="")
        .filter(finished_at__lt=horizon)
        .order_by("finished_at")[:limit]
    )
    done = failed = 0
    for trace in owed:
        try:
            run_ended(trace_id=str(trace.pk), trace=trace)
        except Exception:
            logger.warning(
                "learning.sweep_deferred", exc_info=True, extra={"trace_id": str(trace.pk)}
            )
            failed += 1
            if failed >= SWEEP_FAILURES_IN_A_ROW:
                break
            continue
        done += 1
        failed = 0
    if owed:
        logger.info("learning.swept", extra={"owed": len(owed), "handed_off": done})
    return done


@shared_task(name="policies.learning_sweep", ignore_result=True, soft_time_limit=50)
def learning_sweep() -> int:
    """Finish the learning hand-offs that were cut short (Celery beat runs this every
    ``LEARNING_SWEEP_INTERVAL_SECONDS``; the embedded shape's worker loop does too)."""
    return runs_learning_sweep()


def _reflect_inprocess(trace_id: str) -> None:
    close_old_connections()
    try:
        reflect_trace(trace_id)
    except Exception:
        logger.exception("reflexion.crashed", extra={"trace_id": trace_id})
    finally:
        close_old_connections()


@shared_task(
    name="policies.reflect_trace",
    ignore_result=True,
    acks_late=True,
    soft_time_limit=settings.REFLEXION_SOFT_TIME_LIMIT,
    time_limit=settings.REFLEXION_SOFT_TIME_LIMIT + 30,
)
def reflect_trace(trace_id: str) -> None:
    """Turn a failed trace's classified errors into proposed strategies."""
    from policies.reflexion import reflexion_run

    proposals = reflexion_run(trace_id=trace_id)
    logger.info(
        "reflexion.done",
        extra={"trace_id": trace_id, "outcomes": [p.outcome for p in proposals]},
    )


@shared_task(name="policies.evaluate_rollouts", ignore_result=True, soft_time_limit=50)
def evaluate_rollouts() -> str:
    """Judge the open canary rollout (Celery beat runs this every
    ``ROLLOUT_EVALUATE_INTERVAL_SECONDS``; the embedded shape's worker loop does too)."""
    from policies.rollouts import rollouts_evaluate

    decision = rollouts_evaluate()
    return decision.action if decision is not None else ""
