"""The embedded worker: runs execute on this process's event loop (no broker); a stuck-run
sweeper and a rollout evaluator do for it what Celery beat's ``traces.sweep_stuck_runs``
and ``policies.evaluate_rollouts`` do for the production shape."""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import sync_to_async
from django.conf import settings

from agents.loop_runner import loop_runner

logger = logging.getLogger(__name__)

_started = False
_lock = threading.Lock()


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
    loop_runner().submit(stuck_runs_sweep_forever(interval=settings.AGENT_SWEEP_INTERVAL_SECONDS))
    loop_runner().submit(
        rollouts_evaluate_forever(interval=settings.ROLLOUT_EVALUATE_INTERVAL_SECONDS)
    )
    logger.info(
        "embedded_worker.started",
        extra={
            "sweep_interval": settings.AGENT_SWEEP_INTERVAL_SECONDS,
            "rollout_interval": settings.ROLLOUT_EVALUATE_INTERVAL_SECONDS,
        },
    )
    return True


async def stuck_runs_sweep_forever(*, interval: float) -> None:
    """Re-enqueue stuck runs every ``interval`` seconds, for as long as the loop runs."""
    from traces.tasks import sweep_stuck_runs

    while True:
        try:
            await sync_to_async(sweep_stuck_runs)()
        except Exception:
            # A failed sweep (database briefly away) must not end the sweeper.
            logger.exception("embedded_worker.sweep_failed")
        await asyncio.sleep(interval)


async def rollouts_evaluate_forever(*, interval: float) -> None:
    """Judge the open canary rollout every ``interval`` seconds (``policies.rollouts``)."""
    from policies.tasks import evaluate_rollouts

    while True:
        await asyncio.sleep(interval)
        try:
            await sync_to_async(evaluate_rollouts)()
        except Exception:
            logger.exception("embedded_worker.rollouts_failed")
