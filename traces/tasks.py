"""Periodic upkeep of the trace store."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from traces.services import traces_stuck

logger = logging.getLogger(__name__)


@shared_task(name="traces.sweep_stuck_runs", ignore_result=True)
def sweep_stuck_runs() -> int:
    """Re-enqueue runs stuck in queued/running past the hard time limit (lost messages)."""
    from agents.services import run_enqueue

    stuck = traces_stuck(older_than=timedelta(seconds=settings.AGENT_RUN_HARD_TIME_LIMIT * 2))
    for trace_id in stuck:
        run_enqueue(trace_id=trace_id)
    if stuck:
        logger.warning("traces.sweep", extra={"requeued": len(stuck)})
    return len(stuck)
