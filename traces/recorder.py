"""Writes the runtime's steps to the trace store as they happen (the runtime's StepSink)."""

from __future__ import annotations

import logging
from dataclasses import asdict, fields
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from agents.runtime import StepRecord
from traces.models import Step

logger = logging.getLogger(__name__)

_RECORD_FIELDS = {f.name for f in fields(StepRecord)}


class RunConflict(Exception):
    """Another worker is writing this trace's steps: this delivery must stand down."""


def step_to_record(step: Step) -> StepRecord:
    values: dict[str, Any] = {name: getattr(step, name) for name in _RECORD_FIELDS}
    values["cost_usd"] = float(step.cost_usd)
    return StepRecord(**values)


class TraceRecorder:
    """Persists StepRecords of one trace with consecutive step numbers."""

    def __init__(self, *, trace_id: str, next_step_number: int = 1) -> None:
        self.trace_id = trace_id
        self.next_step_number = next_step_number
        self.on_step: Any = None  # optional callback(Step) for live output

    async def write_step(self, record: StepRecord) -> None:
        data = asdict(record)
        data["cost_usd"] = Decimal(str(round(record.cost_usd, 6)))
        try:
            step = await Step.objects.acreate(
                trace_id=self.trace_id,
                step_number=self.next_step_number,
                started_at=timezone.now() - timedelta(milliseconds=record.latency_ms),
                **data,
            )
        except IntegrityError as exc:
            raise RunConflict(
                f"step {self.next_step_number} of trace {self.trace_id} already exists"
            ) from exc
        self.next_step_number += 1
        logger.debug("trace.step", extra={"trace_id": self.trace_id, "step": step.step_number})
        if self.on_step is not None:
            self.on_step(step)

    async def recorded_tool_call(self, idempotency_key: str) -> StepRecord | None:
        step = await Step.objects.filter(idempotency_key=idempotency_key).afirst()
        return step_to_record(step) if step else None

    async def tool_recent_timeouts(self, tool_name: str) -> int:
        since = timezone.now() - timedelta(hours=1)
        return await Step.objects.filter(
            tool_name=tool_name, error_type="TIMEOUT", created_at__gte=since
        ).acount()

    async def cache_store(
        self, signature: str, tool_name: str, arguments: dict[str, Any], body: str
    ) -> None:
        from agents.models import ToolResultCache

        await ToolResultCache.objects.aupdate_or_create(
            signature=signature,
            defaults={"tool_name": tool_name, "arguments": arguments, "body": body[:100_000]},
        )

    async def cache_get(self, signature: str) -> str | None:
        from agents.models import ToolResultCache

        row = await ToolResultCache.objects.filter(signature=signature).afirst()
        return row.body if row else None

    async def tool_suspend(self, tool_name: str, *, minutes: int, timeouts: int) -> None:
        from asgiref.sync import sync_to_async

        from agents.services import tool_suspend

        await sync_to_async(tool_suspend)(name=tool_name, minutes=minutes, timeouts=timeouts)
