"""Celery tasks of the runtime: thin, take ids, call one service."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError

from agents.services import run_enqueue, run_execute_blocking
from config.db_unavailable import is_connection_failure
from traces.db_threads import db_call
from traces.services import jobs_abandon_stale, trace_abort, traces_stuck

logger = logging.getLogger(__name__)


def celery_soft_time_limit(*, run_soft: float, run_hard: float) -> float:
    """The task's soft limit: 10 s after the run's own deadline (a backstop for a run that
    overruns it), but never past the hard limit, which Celery refuses at every enqueue."""
    return min(run_soft + 10, run_hard)


# A run whose database went away (a PostgreSQL restart) is tried again this often, this
# many times (2 minutes), then left to the stuck-run sweeper.
RUN_DB_RETRY_SECONDS = 5
RUN_DB_MAX_RETRIES = 24


@shared_task(
    bind=True,
    name="agents.run_agent",
    acks_late=True,  # safe: the run is idempotent per trace id
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=celery_soft_time_limit(
        run_soft=settings.AGENT_RUN_SOFT_TIME_LIMIT, run_hard=settings.AGENT_RUN_HARD_TIME_LIMIT
    ),
    time_limit=settings.AGENT_RUN_HARD_TIME_LIMIT,
)
def run_agent(self: Task, trace_id: str) -> None:
    """Execute or resume one agent run.

    When the database cannot be reached (PostgreSQL restarting) the run could record
    neither its next step nor its end: it is still queued or running in the database, and
    the task is tried again in ``RUN_DB_RETRY_SECONDS``, to resume from its recorded steps
    once the database is back, instead of waiting for the sweeper (twice the hard time
    limit). Any other database error fails the task as before."""
    try:
        run_execute_blocking(trace_id=trace_id, timeout=settings.AGENT_RUN_HARD_TIME_LIMIT)
    except (SoftTimeLimitExceeded, TimeoutError):
        logger.warning("run.time_limit", extra={"trace_id": trace_id})
        # On the run loop's connection pool: when a limit strikes hundreds of task threads at
        # once, their aborts queue there instead of each opening a connection of its own.
        db_call(
            trace_abort, trace_id=trace_id, error_type="RUN_TIME_LIMIT", detail="task time limit"
        )
    except DatabaseError as exc:
        if not is_connection_failure(exc):
            raise
        logger.warning(
            "run.database_unavailable",
            extra={"trace_id": trace_id, "retry_in_s": RUN_DB_RETRY_SECONDS},
        )
        # Past the last retry, Celery raises ``exc`` itself: the sweeper's turn.
        raise self.retry(
            countdown=RUN_DB_RETRY_SECONDS, max_retries=RUN_DB_MAX_RETRIES, exc=exc
        ) from exc


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
