"""A process-wide asyncio event loop on a daemon thread.

Runs are coroutines; submitting them here lets one process hold many runs in flight while
they wait on the model or a tool. The embedded deployment submits fire-and-forget; Celery
tasks submit and wait, so acks_late still covers the whole run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Coroutine
from typing import Any

from traces.db_threads import db_threads_bind


class LoopRunner:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # Its runs' database calls go to the bounded pool of connection-holding threads.
        db_threads_bind(self.loop)
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="agent-loop-runner", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Schedule ``coro`` on the loop in a fresh, empty context.

        ``run_coroutine_threadsafe`` copies the caller's contextvars into the new task. A
        caller inside an ASGI request carries asgiref's per-request thread-sensitive
        executor, which is shut down when the response is sent; a run that inherited it
        would send every later ``sync_to_async`` call to a dead executor ("CurrentThread
        Executor already quit or is broken"). A run outlives the request that started it, so
        it must own its context.
        """
        return contextvars.Context().run(asyncio.run_coroutine_threadsafe, coro, self.loop)


_runner: LoopRunner | None = None
_lock = threading.Lock()


def loop_runner() -> LoopRunner:
    """The runner of this process (a forked child gets its own)."""
    global _runner
    with _lock:
        if _runner is None or _runner.pid != os.getpid():
            _runner = LoopRunner()
        return _runner
