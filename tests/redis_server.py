"""A redis-server of a test's own: a free port, nothing on disk, restartable on that port.

Made visible to a test module as the ``own_redis`` fixture with
``from tests.redis_server import own_redis_fixture  # noqa: F401``.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

DEADLINE_SECONDS = 180.0  # overall bound on each wait; the waits end on conditions


def _tail(log: Path | None) -> str:
    return log.read_text()[-6000:] if log is not None and log.exists() else ""


def wait_for(
    condition: Callable[[], Any],
    *,
    what: str,
    log: Path | None = None,
    alive: subprocess.Popen[bytes] | None = None,
) -> Any:
    """Poll ``condition`` until it holds; fail at once if the ``alive`` process exits."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the worker exited ({alive.returncode}) {what}\n{_tail(log)}")
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling state that other processes write
    raise AssertionError(f"gave up waiting for {what}\n{_tail(log)}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server of this test's own, restartable on the same port."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        wait_for(lambda: self._answers(client), what="redis-server to answer", log=self.log)

    def stop(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(timeout=30)
        self.process = None

    def _answers(self, client: redis.Redis) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, "redis-server exited"
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False


@pytest.fixture(name="own_redis")
def own_redis_fixture(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path / "redis.log")
    server.start()
    yield server
    if server.process is not None:
        server.stop(signal.SIGKILL)
