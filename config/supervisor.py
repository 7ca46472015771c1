"""Keep bin/serve's child processes running: restart the ones that exit, stop all together.

A Celery worker can die for good on a broker restart, and nothing outside would start it
again: the capacity of the installation would stay reduced. The supervisor restarts such
a child with an exponential backoff (so a child that cannot start does not spin), and logs
every exit and start. The web server is the one child whose exit ends the supervisor: then
the whole installation stops, visibly, instead of serving half of itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger("serve")


@dataclass
class Child:
    """One supervised process: its command, and whether an exit is answered by a restart."""

    name: str
    argv: Sequence[str]
    restart: bool = True
    # Variables of this child only (its database application_name, for one).
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0
    # Exits in a row that came soon after a start; they lengthen the backoff.
    quick_exits: int = 0
    restart_at: float | None = None
    pids: list[int] = field(default_factory=list)


def _die_with_parent() -> None:
    """Run in the child before exec: if the supervisor is killed outright (SIGKILL), its
    children get SIGTERM instead of living on as orphans holding the port and the queue."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class Supervisor:
    """Starts children, restarts the restartable ones when they exit, stops them all."""

    def __init__(
        self,
        children: Sequence[Child],
        *,
        env: Mapping[str, str] | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        stable_after: float = 60.0,
        stop_grace: float = 10.0,
        poll_interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.children = list(children)
        self.env = dict(os.environ if env is None else env)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.stop_grace = stop_grace
        self.poll_interval = poll_interval
        self.clock = clock
        self.stop_requested: int | None = None

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        # Its own session: a Ctrl-C in the terminal reaches only the supervisor, which
        # then stops every child once, in order, and can kill a child's whole group.
        child.process = subprocess.Popen(
            list(child.argv),
            env={**self.env, **child.env},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child.started_at = self.clock()
        child.starts += 1
        child.restart_at = None
        child.pids.append(child.process.pid)
        logger.info(
            "child.started name=%s pid=%s start=%s", child.name, child.process.pid, child.starts
        )

    def backoff_for(self, child: Child) -> float:
        """Seconds to wait before restarting ``child``: doubles with each quick exit."""
        if child.quick_exits == 0:
            return 0.0
        return float(min(self.backoff_initial * 2 ** (child.quick_exits - 1), self.backoff_max))

    def poll(self) -> int | None:
        """Look at every child once: schedule or perform restarts. Returns an exit code when
        a child that is not restarted has exited (the installation must stop), else None."""
        now = self.clock()
        for child in self.children:
            if child.process is None:
                continue
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._spawn(child)
                continue
            code = child.process.poll()
            if code is None:
                continue
            if not child.restart:
                logger.error("child.exited name=%s exit_code=%s stopping=all", child.name, code)
                return code or 1
            ran_for = now - child.started_at
            child.quick_exits = 0 if ran_for >= self.stable_after else child.quick_exits + 1
            delay = self.backoff_for(child)
            child.restart_at = now + delay
            logger.warning(
                "child.exited name=%s exit_code=%s ran_s=%.1f restart_in_s=%.1f",
                child.name,
                code,
                ran_for,
                delay,
            )
        return None

    def request_stop(self, signum: int, _frame: object = None) -> None:
        self.stop_requested = signum

    def run(self) -> int:
        """Supervise until SIGTERM/SIGINT or until the web server exits; then stop every
        child. Returns the process exit code."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self.start()
        code: int | None = None
        while self.stop_requested is None and code is None:
            time.sleep(self.poll_interval)  # between polls of the children's exit status
            code = self.poll()
        if self.stop_requested is not None:
            logger.info("serve.stopping signal=%s", signal.Signals(self.stop_requested).name)
        self.stop()
        return 0 if code is None else code

    def stop(self) -> None:
        """SIGTERM to every running child's process group, SIGKILL after the grace period."""
        running = [c.process for c in self.children if c.process and c.process.poll() is None]
        for process in running:
            _signal_group(process, signal.SIGTERM)
        deadline = self.clock() + self.stop_grace
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                logger.warning("child.killed pid=%s after_s=%.1f", process.pid, self.stop_grace)
                _signal_group(process, signal.SIGKILL)
                process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
