"""Thin Channels consumer: one group per run, pushes step events to the browser."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer


def run_group_name(trace_id: str) -> str:
    return f"run.{trace_id}"


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Streams ``run.step`` and ``run.status`` events of one trace to staff users."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not user or not user.is_authenticated or not user.is_staff:
            await self.close(code=4403)
            return
        self.group = run_group_name(str(self.scope["url_route"]["kwargs"]["trace_id"]))
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_step(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "run.step", "step": event["step"]})

    async def run_status(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "run.status", "status": event["status"]})
