"""A process-wide asyncio event loop on a daemon thread.

Runs are coroutines; submitting them here lets one process hold many runs in flight while
they wait on the model or a tool. The embedded deployment submits fire-and-forget; Celery
tasks submit and wait, so acks_late still covers the whole run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any


class LoopRunner:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="agent-loop-runner", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


_runner: LoopRunner | None = None
_lock = threading.Lock()


def loop_runner() -> LoopRunner:
    """The runner of this process (a forked child gets its own)."""
    global _runner
    with _lock:
        if _runner is None or _runner.pid != os.getpid():
            _runner = LoopRunner()
        return _runner
