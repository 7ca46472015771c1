"""The embedded shape's channel layer: Channels' in-memory layer, safe across event loops.

In the embedded shape the in-process worker runs on its own event-loop thread inside the
web process, while WebSocket consumers wait on daphne's loop. The stock in-memory layer
keeps ``asyncio.Queue`` objects of the consumers' loop: putting into one from the worker's
thread neither wakes that loop nor is thread-safe. This layer runs every operation on the
loop its consumers live on (the loop that last received), handing calls from other loops
over with ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from channels.layers import InMemoryChannelLayer

T = TypeVar("T")


class LoopSafeInMemoryChannelLayer(InMemoryChannelLayer):
    """In-memory layer whose queues are only ever touched on their owner loop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._owner: asyncio.AbstractEventLoop | None = None
        self._owner_lock = threading.Lock()

    def _claim(self) -> None:
        # The loop consumers receive on owns the queues. When that loop has closed (a test's
        # loop, a restarted server loop), the current one takes over; queues already bound
        # to another loop cannot be awaited here and are dropped, unread messages kept.
        loop = asyncio.get_running_loop()
        with self._owner_lock:
            if self._owner is loop:
                return
            if self._owner is not None and not self._owner.is_closed():
                return
            self._owner = loop
            for name, queue in list(self.channels.items()):
                if getattr(queue, "_loop", None) not in (None, loop):
                    del self.channels[name]

    async def _on_owner(self, call: Callable[[], Awaitable[T]]) -> T:
        owner = self._owner
        current = asyncio.get_running_loop()
        if owner is None or owner is current or owner.is_closed():
            return await call()
        future = asyncio.run_coroutine_threadsafe(_awaited(call), owner)
        return await asyncio.wrap_future(future)

    async def receive(self, channel: str) -> dict[str, Any]:
        self._claim()
        return await super().receive(channel)

    async def group_add(self, group: str, channel: str) -> None:
        self._claim()
        await super().group_add(group, channel)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        parent = super().send
        await self._on_owner(lambda: parent(channel, message))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        parent = super().group_send
        await self._on_owner(lambda: parent(group, message))

    async def group_discard(self, group: str, channel: str) -> None:
        parent = super().group_discard
        await self._on_owner(lambda: parent(group, channel))


async def _awaited(call: Callable[[], Awaitable[T]]) -> T:
    return await call()
