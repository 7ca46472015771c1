"""The chat's WebSocket: one run's steps as the worker writes them, resumable.

The client connects to ``/ws/runs/<trace id>/?after=<last step it has>``. The consumer
joins the run's group *before* it reads the stored steps, so nothing committed in between
is missed; the channel layer queues live events while the replay is sent, and a step is
sent only if its number is exactly the next one. A live event that is not the next one
(already replayed, or ahead of a lost event) makes the consumer read the Step table from
the last number it sent, which is the source of truth. So every step reaches the client
once and in order, across reconnects, whichever shape delivers the events.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string

from traces.live import run_group
from traces.selectors import run_for_chat, steps_after

logger = logging.getLogger(__name__)

# Application close codes (4000-4999): the client does not retry these.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


def _rendered_steps(trace_id: str, after: int) -> list[tuple[int, str]]:
    return [
        (step.step_number, render_to_string("traces/_step.html", {"step": step}))
        for step in steps_after(trace_id=trace_id, after=after)
    ]


def _rendered_answer(user: Any, trace_id: str) -> tuple[str, bool, str] | None:
    run = run_for_chat(user=user, trace_id=trace_id)
    if run is None:
        return None
    return run.status, run.is_terminal, render_to_string("traces/_answer.html", {"run": run})


class RunStreamConsumer(AsyncJsonWebsocketConsumer):
    """Streams one run's steps and status to a person allowed to see the run."""

    trace_id: str
    group: str
    last_sent: int

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.trace_id = str(self.scope["url_route"]["kwargs"]["trace_id"])
        if not await database_sync_to_async(self._may_watch)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.last_sent = self._after_from_query()
        self.group = run_group(self.trace_id)
        # Join first, then replay: events committed meanwhile wait in this channel.
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._catch_up()
        await self._send_status()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The stream is one-way; the page acts through ordinary POSTs. Whatever a client
        # sends (not JSON, binary) is ignored unread, not decoded into an error per frame.
        return

    # --- group events (handler names follow the event types run.step, run.status) ---
    async def run_step(self, event: dict[str, Any]) -> None:
        number = int(event["step"]["step_number"])
        if number <= self.last_sent:
            return  # already sent by the replay or an earlier catch-up
        if number != self.last_sent + 1:
            await self._catch_up()  # an event went missing: the table has it
            return
        html = render_to_string("traces/_step.html", {"step": event["step"]})
        await self._send_step(number, html)

    async def run_status(self, event: dict[str, Any]) -> None:
        await self._send_status()

    # --- helpers -------------------------------------------------------------------
    def _may_watch(self, user: Any) -> bool:
        return run_for_chat(user=user, trace_id=self.trace_id) is not None

    def _after_from_query(self) -> int:
        raw = parse_qs(self.scope.get("query_string", b"").decode()).get("after", ["0"])[0]
        try:
            return max(0, int(raw))
        except ValueError:
            return 0

    async def _catch_up(self) -> None:
        for number, html in await database_sync_to_async(_rendered_steps)(
            self.trace_id, self.last_sent
        ):
            await self._send_step(number, html)

    async def _send_step(self, number: int, html: str) -> None:
        self.last_sent = number
        await self.send_json({"type": "step", "step": number, "html": html})

    async def _send_status(self) -> None:
        answer = await database_sync_to_async(_rendered_answer)(self.scope["user"], self.trace_id)
        if answer is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        status, terminal, html = answer
        if terminal:
            # A run ends after its last step is committed: send any step still in flight
            # first, so a client that stops listening at the end has every step.
            await self._catch_up()
        await self.send_json(
            {"type": "status", "status": status, "terminal": terminal, "html": html}
        )
