"""Celery tasks of the runtime: thin, take ids, call one service."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from agents.services import run_execute_blocking
from traces.services import trace_abort

logger = logging.getLogger(__name__)


@shared_task(
    name="agents.run_agent",
    acks_late=True,  # safe: the run is idempotent per trace id
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=settings.AGENT_RUN_SOFT_TIME_LIMIT + 10,
    time_limit=settings.AGENT_RUN_HARD_TIME_LIMIT,
)
def run_agent(trace_id: str) -> None:
    """Execute or resume one agent run."""
    try:
        run_execute_blocking(trace_id=trace_id, timeout=settings.AGENT_RUN_HARD_TIME_LIMIT)
    except (SoftTimeLimitExceeded, TimeoutError):
        logger.warning("run.time_limit", extra={"trace_id": trace_id})
        trace_abort(trace_id=trace_id, error_type="RUN_TIME_LIMIT", detail="task time limit")
