"""Celery tasks of the trace store (Celery beat schedules them: CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from traces.retention import traces_prune_due


@shared_task(name="traces.prune", ignore_result=True)
def prune() -> int:
    """Delete ended runs past ``TRACE_RETENTION_DAYS`` (a no-op at 0); how many went."""
    result = traces_prune_due()
    return result.traces if result is not None else 0
