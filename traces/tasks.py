"""Periodic upkeep of the trace store."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from traces.services import jobs_abandon_stale, traces_stuck

logger = logging.getLogger(__name__)


@shared_task(name="traces.sweep_stuck_runs", ignore_result=True)
def sweep_stuck_runs() -> int:
    """Re-enqueue runs stuck in queued/running past the hard time limit (lost messages).

    Each run is handed over at most once per window: a handed-over run that still waits in a
    backlog, or for a worker, is not queued again at every beat. Running it twice would still
    be safe (idempotent per trace id), but every copy costs a model call.

    The same beat also fails Jobs that stopped reporting (their process died), so the Jobs
    page does not show them running forever.
    """
    jobs_abandon_stale()
    from agents.services import run_enqueue

    window = timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 2)
    stuck = [
        trace_id
        for trace_id in traces_stuck(older_than=window)
        if cache.add(f"traces:swept:{trace_id}", 1, window.total_seconds())
    ]
    for trace_id in stuck:
        run_enqueue(trace_id=trace_id)
    if stuck:
        logger.warning("traces.sweep", extra={"requeued": len(stuck)})
    return len(stuck)
