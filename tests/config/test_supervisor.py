"""config.supervisor: a child that exits is restarted with a backoff; the web server's exit
stops everything; stop() ends every child, by force if it must."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from config.supervisor import Child, Supervisor

EXITS_AT_ONCE = [sys.executable, "-c", "import sys; sys.exit(3)"]
SLEEPS = [sys.executable, "-c", "import time; time.sleep(120)"]


def wait_for(condition: Callable[[], bool], *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.02)  # between checks of the processes' state


def poll_until(supervisor: Supervisor, condition: Callable[[], bool]) -> int | None:
    code: list[int | None] = [None]

    def polled() -> bool:
        code[0] = supervisor.poll()
        return code[0] is not None or condition()

    wait_for(polled)
    return code[0]


@pytest.fixture
def supervisors() -> Iterator[list[Supervisor]]:
    created: list[Supervisor] = []
    yield created
    for supervisor in created:
        supervisor.stop()


def test_a_worker_that_exits_is_restarted_and_logged(supervisors, caplog):
    caplog.set_level(logging.INFO, logger="serve")
    worker = Child(name="worker1", argv=EXITS_AT_ONCE)
    supervisor = Supervisor([worker], backoff_initial=0.01, backoff_max=0.05)
    supervisors.append(supervisor)
    supervisor.start()

    code = poll_until(supervisor, lambda: worker.starts >= 3)

    assert code is None
    assert len(set(worker.pids)) == worker.starts
    exits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("child.exited")]
    assert exits[0].startswith("child.exited name=worker1 exit_code=3")
    assert len(exits) >= 2


@pytest.mark.parametrize(
    ("quick_exits", "expected"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0)]
)
def test_the_backoff_doubles_with_each_quick_exit_up_to_a_cap(quick_exits, expected):
    supervisor = Supervisor([], backoff_initial=1.0, backoff_max=30.0)

    assert supervisor.backoff_for(Child(name="w", argv=[], quick_exits=quick_exits)) == expected


def test_a_child_that_ran_long_enough_restarts_at_once(supervisors):
    now = [1000.0]
    worker = Child(name="worker1", argv=EXITS_AT_ONCE, quick_exits=4)
    supervisor = Supervisor([worker], stable_after=60.0, clock=lambda: now[0])
    supervisors.append(supervisor)
    supervisor.start()
    wait_for(lambda: worker.process is not None and worker.process.poll() is not None)
    now[0] += 61.0

    supervisor.poll()

    assert worker.quick_exits == 0
    assert worker.restart_at == now[0]


def test_a_child_that_exits_soon_after_starting_waits_longer_each_time(supervisors):
    now = [1000.0]
    worker = Child(name="worker1", argv=EXITS_AT_ONCE)
    supervisor = Supervisor([worker], backoff_initial=1.0, clock=lambda: now[0])
    supervisors.append(supervisor)
    supervisor.start()
    delays = []
    for _ in range(3):
        wait_for(lambda: worker.process is not None and worker.process.poll() is not None)
        supervisor.poll()
        assert worker.restart_at is not None
        delays.append(worker.restart_at - now[0])
        now[0] = worker.restart_at
        supervisor.poll()  # the restart is due: it happens now

    assert delays == [1.0, 2.0, 4.0]
    assert worker.starts == 4


def test_the_web_server_exiting_stops_the_installation(supervisors, caplog):
    web = Child(name="web", argv=[sys.executable, "-c", "import sys; sys.exit(5)"], restart=False)
    worker = Child(name="worker1", argv=SLEEPS)
    supervisor = Supervisor([web, worker], stop_grace=30.0)
    supervisors.append(supervisor)
    supervisor.start()

    code = poll_until(supervisor, lambda: False)
    supervisor.stop()

    assert code == 5
    assert worker.process is not None
    assert worker.process.poll() is not None
    assert worker.starts == 1


def test_stop_kills_a_child_that_ignores_sigterm(supervisors, tmp_path: Path, caplog):
    caplog.set_level(logging.WARNING, logger="serve")
    ready = tmp_path / "ready"
    stubborn = Child(
        name="stubborn",
        argv=[
            sys.executable,
            "-c",
            "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pathlib.Path(sys.argv[1]).touch(); time.sleep(120)",
            str(ready),
        ],
    )
    supervisor = Supervisor([stubborn], stop_grace=0.5)
    supervisors.append(supervisor)
    supervisor.start()
    wait_for(ready.exists)

    supervisor.stop()

    assert stubborn.process is not None
    assert stubborn.process.returncode == -9
    assert any(r.getMessage().startswith("child.killed") for r in caplog.records)
