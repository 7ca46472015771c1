"""Celery tasks of the runtime: thin, take ids, call one service."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache

from agents.services import run_enqueue, run_execute_blocking
from traces.db_threads import db_call
from traces.services import jobs_abandon_stale, trace_abort, traces_stuck

logger = logging.getLogger(__name__)


def celery_soft_time_limit(*, run_soft: float, run_hard: float) -> float:
    """The task's soft limit: 10 s after the run's own deadline (a backstop for a run that
    overruns it), but never past the hard limit, which Celery refuses at every enqueue."""
    return min(run_soft + 10, run_hard)


@shared_task(
    name="agents.run_agent",
    acks_late=True,  # safe: the run is idempotent per trace id
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=celery_soft_time_limit(
        run_soft=settings.AGENT_RUN_SOFT_TIME_LIMIT, run_hard=settings.AGENT_RUN_HARD_TIME_LIMIT
    ),
    time_limit=settings.AGENT_RUN_HARD_TIME_LIMIT,
)
def run_agent(trace_id: str) -> None:
    """Execute or resume one agent run."""
    try:
        run_execute_blocking(trace_id=trace_id, timeout=settings.AGENT_RUN_HARD_TIME_LIMIT)
    except (SoftTimeLimitExceeded, TimeoutError):
        logger.warning("run.time_limit", extra={"trace_id": trace_id})
        # On the run loop's connection pool: when a limit strikes hundreds of task threads at
        # once, their aborts queue there instead of each opening a connection of its own.
        db_call(
            trace_abort, trace_id=trace_id, error_type="RUN_TIME_LIMIT", detail="task time limit"
        )


@shared_task(name="agents.sweep_stuck_runs", ignore_result=True)
def sweep_stuck_runs() -> int:
    """Re-enqueue runs stuck in queued/running past the hard time limit (lost messages).

    Each run is handed over at most once per window: a handed-over run that still waits in a
    backlog, or for a worker, is not queued again at every beat. Running it twice would still
    be safe (idempotent per trace id), but every copy costs a model call.

    The same beat also fails Jobs that stopped reporting (their process died), so the Jobs
    page does not show them running forever.
    """
    jobs_abandon_stale()
    window = timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 2)
    stuck = [
        trace_id
        for trace_id in traces_stuck(older_than=window)
        if cache.add(f"traces:swept:{trace_id}", 1, window.total_seconds())
    ]
    for trace_id in stuck:
        run_enqueue(trace_id=trace_id)
    if stuck:
        logger.warning("runs.sweep", extra={"requeued": len(stuck)})
    return len(stuck)
