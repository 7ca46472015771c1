"""Live events of a run, pushed to the browser through the channel layer.

One group per run (``run_group``); events are sent only after the rows they describe are
committed, so a listener that reads the database on receipt always finds them. Event types
are prefixed ``run.``: ``run.step`` carries one Step, ``run.status`` says the run's status
moved (started, ended, handed over). Delivery is best effort: a listener that misses an
event (a reconnect, a dropped Redis message) recovers from the Step table, which stays the
source of truth.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from traces.models import Step

logger = logging.getLogger(__name__)

STEP_EVENT = "run.step"
STATUS_EVENT = "run.status"
# What a live view needs of a step; long texts are cut like the chat page cuts them.
TEXT_LIMITS = {"thought": 2000, "error_detail": 1000, "response_summary": 2000}


def run_group(trace_id: Any) -> str:
    """The channel-layer group of one run (group names allow only ASCII, ``.``, ``-``, ``_``)."""
    return f"run.{uuid.UUID(str(trace_id)).hex}"


def step_payload(step: Step) -> dict[str, Any]:
    """The JSON-safe fields of a step that the chat renders."""
    payload: dict[str, Any] = {
        "step_number": step.step_number,
        "round_number": step.round_number,
        "phase": step.phase,
        "action_type": step.action_type,
        "tool_name": step.tool_name,
        "action_input": step.action_input,
        "status_code": step.status_code,
        "ok": step.ok,
        "error_type": step.error_type,
        "latency_ms": step.latency_ms,
        "adapters_fired": step.adapters_fired,
    }
    for name, limit in TEXT_LIMITS.items():
        payload[name] = (getattr(step, name) or "")[:limit]
    return payload


def _enabled() -> bool:
    return bool(getattr(settings, "LIVE_RUN_EVENTS", True))


async def steps_publish(steps: list[Step]) -> None:
    """Send committed steps to their runs' groups, in order; failures are logged, not raised
    (a run must never fail because nobody could be told about it)."""
    if not steps or not _enabled():
        return
    layer = get_channel_layer()
    if layer is None:
        return
    for step in steps:
        try:
            await layer.group_send(
                run_group(step.trace_id),
                {
                    "type": STEP_EVENT,
                    "trace_id": str(step.trace_id),
                    "step": step_payload(step),
                },
            )
        except Exception:
            logger.warning(
                "live.publish_failed",
                exc_info=True,
                extra={"trace_id": str(step.trace_id), "step": step.step_number},
            )


def _send_now(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.warning("live.publish_failed", exc_info=True, extra={"group": group})


def status_publish_on_commit(*, trace_id: Any, status: str) -> None:
    """After the current transaction commits, tell the run's listeners its status moved."""
    if not _enabled():
        return
    message = {"type": STATUS_EVENT, "trace_id": str(trace_id), "status": status}
    group = run_group(trace_id)
    transaction.on_commit(lambda: _send_now(group, message))


def step_publish_on_commit(*, step: Step) -> None:
    """After the current transaction commits, push one step written outside the recorder."""
    if not _enabled():
        return
    message = {"type": STEP_EVENT, "trace_id": str(step.trace_id), "step": step_payload(step)}
    group = run_group(step.trace_id)
    transaction.on_commit(lambda: _send_now(group, message))
