"""The runtime's StepSink: steps go to the trace store (``traces.recorder``), and the tool
result cache and timeout suspensions, which belong to the runtime, are kept here."""

from __future__ import annotations

from typing import Any

from agents.models import ToolResultCache
from traces.db_threads import db_async
from traces.recorder import TraceRecorder
from traces.redaction import redact_text, redact_value


class RunSink(TraceRecorder):
    """Records one run's steps (``TraceRecorder``) and serves the runtime's tool cache and
    breaker writes."""

    async def cache_store(
        self, signature: str, tool_name: str, arguments: dict[str, Any], body: str
    ) -> None:
        # One upsert statement: this runs after every successful call.
        await db_async(ToolResultCache.objects.bulk_create)(
            [
                ToolResultCache(
                    signature=signature,
                    tool_name=tool_name,
                    arguments=redact_value(arguments),
                    body=redact_text(body[:100_000]),
                )
            ],
            update_conflicts=True,
            unique_fields=["signature"],
            update_fields=["tool_name", "arguments", "body", "updated_at"],
        )

    async def cache_get(self, signature: str) -> str | None:
        row = await db_async(ToolResultCache.objects.filter(signature=signature).first)()
        return row.body if row else None

    async def tool_suspend(self, tool_name: str, *, minutes: int, timeouts: int) -> None:
        from agents.services import tool_suspend

        await db_async(tool_suspend)(name=tool_name, minutes=minutes, timeouts=timeouts)
