"""The embedded worker: runs execute on this process's event loop (no broker); a stuck-run
sweeper and the periodic jobs the layers above register (``agents.hooks``: the rollout
evaluator) do for it what Celery beat's ``agents.sweep_stuck_runs`` and
``policies.evaluate_rollouts`` do for the production shape."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

from asgiref.sync import sync_to_async
from django.conf import settings

from agents.hooks import PeriodicJob, periodic_jobs
from agents.loop_runner import loop_runner

logger = logging.getLogger(__name__)

_started = False
_lock = threading.Lock()
_loops: list[concurrent.futures.Future[None]] = []


def embedded_worker_start() -> bool:
    """Start the sweeper on this process's loop once; a no-op unless runs execute in-process.

    Called by the web process at start-up (``config/asgi.py``), so runs left queued or
    running by a crash or a restart are recovered even if nobody starts a new run.
    """
    global _started
    if settings.AGENT_EXECUTOR != "inprocess":
        return False
    with _lock:
        if _started:
            return False
        _started = True
        _loops.append(
            loop_runner().submit(
                stuck_runs_sweep_forever(interval=settings.AGENT_SWEEP_INTERVAL_SECONDS)
            )
        )
        jobs = periodic_jobs()
        _loops.extend(loop_runner().submit(periodic_job_forever(job)) for job in jobs)
    logger.info(
        "embedded_worker.started",
        extra={
            "sweep_interval": settings.AGENT_SWEEP_INTERVAL_SECONDS,
            "periodic_jobs": {job.name: job.interval_seconds for job in jobs},
        },
    )
    return True


def embedded_worker_stop() -> None:
    """Cancel the sweeper and the periodic jobs; a later start begins them again. For an
    orderly shutdown, and for tests: a loop left running would sweep another test's runs."""
    global _started
    with _lock:
        for future in _loops:
            future.cancel()
        _loops.clear()
        _started = False


async def stuck_runs_sweep_forever(*, interval: float) -> None:
    """Re-enqueue stuck runs every ``interval`` seconds, for as long as the loop runs."""
    from agents.tasks import sweep_stuck_runs

    while True:
        try:
            await sync_to_async(sweep_stuck_runs)()
        except Exception:
            # A failed sweep (database briefly away) must not end the sweeper.
            logger.exception("embedded_worker.sweep_failed")
        await asyncio.sleep(interval)


async def periodic_job_forever(job: PeriodicJob) -> None:
    """Run a job a layer above registered (``agents.hooks``; e.g. judging canary rollouts)
    every ``job.interval_seconds``, first after one interval, for as long as the loop runs."""
    while True:
        await asyncio.sleep(job.interval_seconds)
        try:
            await sync_to_async(job.run)()
        except Exception:
            logger.exception("embedded_worker.job_failed", extra={"job": job.name})
