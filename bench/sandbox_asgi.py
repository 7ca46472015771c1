"""The sandbox shop's ASGI application as the runtime benchmark serves it: the product's
``config.asgi_sandbox`` behind a semaphore that admits ``BENCH_SANDBOX_CONCURRENCY``
requests (16) into Django at once; the others wait on the event loop.

Served as the product serves it, each request in flight runs on a thread of its own with a
PostgreSQL connection of its own (``config.shape.asgi_settings_select``: no persistent
connections, nothing bounds them). 200 tool calls at once then opened more connections than
the server's ``max_connections`` (100), and the sandbox answered 500 to the rest. The
benchmark measures the agents, not the tool server, so it bounds the tool server the same way
for every implementation.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from config.asgi_sandbox import application as sandbox_application

LIMIT = int(os.environ.get("BENCH_SANDBOX_CONCURRENCY", "16"))
_semaphore: asyncio.Semaphore | None = None


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _semaphore
    if scope["type"] != "http":
        await sandbox_application(scope, receive, send)
        return
    if _semaphore is None:  # created on the server's event loop
        _semaphore = asyncio.Semaphore(LIMIT)
    async with _semaphore:
        await sandbox_application(scope, receive, send)
