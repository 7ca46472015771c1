"""bin/serve itself: started the way `make run` starts it, stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from config.serve import banner, children_for
from tests.config.conftest import PROJECT_DIR

STARTED = re.compile(r"child\.started name=(\S+) pid=(\d+) start=(\d+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], object], *, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.1)  # between looks at the server's log and sockets


class Served:
    """A running bin/serve, its log and the children it reports."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.port = int(env["PORT"])
        self.sandbox_port = int(env["SANDBOX_PORT"])
        self.process = subprocess.Popen(
            ["bin/serve"],
            cwd=PROJECT_DIR,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def started(self) -> list[tuple[str, int, int]]:
        text = self.log.read_text(errors="replace")
        return [(name, int(pid), int(n)) for name, pid, n in STARTED.findall(text)]

    def pid_of(self, name: str, start: int) -> int | None:
        return next((p for c, p, n in self.started() if (c, n) == (name, start)), None)

    def sandbox_answers(self) -> bool:
        url = f"http://127.0.0.1:{self.sandbox_port}/sandbox/api/openapi.json"
        try:
            return httpx.get(url).status_code == 200
        except httpx.TransportError:
            return False

    def answers(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/accounts/login/").status_code == 200
        except httpx.TransportError:
            return False

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Served]]:
    running: list[Served] = []

    def start(env: dict[str, str]) -> Served:
        served = Served(
            {
                **env,
                "AGENT_OPS_PYTHON": sys.executable,
                "PORT": str(free_port()),
                "SANDBOX_PORT": str(free_port()),
            },
            tmp_path / f"serve-{len(running)}.log",
        )
        running.append(served)
        return served

    yield start
    for served in running:
        if served.process.poll() is None:
            served.terminate()


def test_the_children_honour_host_port_workers_and_concurrency():
    env = {"HOST": "0.0.0.0", "PORT": "9100", "WORKERS": "3", "WORKER_CONCURRENCY": "7"}

    children = children_for(celery=True, environ_=env)

    assert [(c.name, c.restart) for c in children] == [
        ("web", False),
        ("sandbox", True),
        ("worker1", True),
        ("worker2", True),
        ("worker3", True),
        ("learner", True),
        ("beat", True),
    ]
    web_argv = " ".join(children[0].argv)
    assert "-m config.daphne_main -b 0.0.0.0 -p 9100 config.asgi:application" in web_argv
    # The sandbox shop serves on its own port, in its own process: PORT + 1 by default.
    assert "-m config.daphne_main -b 0.0.0.0 -p 9101 config.asgi_sandbox:application" in " ".join(
        children[1].argv
    )
    assert children_for(celery=True, environ_={**env, "SANDBOX_PORT": "7000"})[1].argv[-2] == (
        "7000"
    )
    worker_argv = " ".join(children[3].argv)
    assert "-Q agents -P threads -c 7 -n worker2@%h" in worker_argv
    # the learning loop has its own process, a few threads: runs never wait behind it
    learner_argv = " ".join(children[5].argv)
    assert "-Q reflexion,default -P threads -c 4 -n learner@%h" in learner_argv


def test_the_embedded_shape_runs_the_web_server_and_the_sandbox():
    assert [c.name for c in children_for(celery=False, environ_={})] == ["web", "sandbox"]


def test_the_banner_says_which_variables_another_shell_would_miss():
    env = {
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "SANDBOX_BASE_URL": "http://127.0.0.1:8000/sandbox/api",
        "DATABASE_URL": "postgres://db/agentops",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
    }

    text = banner(celery=True, environ_=env, from_file={"DATABASE_URL": "postgres://db/agentops"})

    assert "set in this shell only, not in the env file: REDIS_URL." in text


def test_embedded_serve_writes_a_secret_key_serves_the_app_and_stops_on_sigterm(
    serve, clean_env, tmp_path
):
    # given a fresh installation: no secret key anywhere, SQLite, no Redis
    env = {**clean_env, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}

    served = serve(env)
    wait_for(served.answers)

    # then the first start gave the installation a private secret key
    env_file = Path(clean_env["DJANGO_ENV_FILE"])
    assert "DJANGO_SECRET_KEY=" in env_file.read_text()
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    # and the web server and the sandbox's own server run, in the local settings, without
    # DEBUG pages; the sandbox answers on its own port
    wait_for(lambda: len(served.started()) == 2)
    assert sorted(name for name, _, _ in served.started()) == ["sandbox", "web"]
    wait_for(served.sandbox_answers)
    # Only the web process runs the in-process worker (one sweeper per installation).
    wait_for(lambda: "embedded_worker.started" in served.log.read_text())
    assert served.log.read_text().count("embedded_worker.started") == 1
    assert "config.settings.local" in served.log.read_text()
    not_found = httpx.get(f"http://127.0.0.1:{served.port}/no-such-page")
    assert not_found.status_code == 404
    assert "Page not found" in not_found.text
    assert "urlpatterns" not in not_found.text

    # when it gets SIGTERM, it exits cleanly and takes its children with it
    web_pid, sandbox_pid = served.pid_of("web", 1), served.pid_of("sandbox", 1)
    assert served.terminate() == 0
    assert web_pid is not None and sandbox_pid is not None
    assert not alive(web_pid) and not alive(sandbox_pid)


@pytest.mark.celery_worker
def test_production_serve_restarts_a_worker_that_dies(serve, production_env):
    env = {
        **production_env,
        "WORKERS": "1",
        "WORKER_CONCURRENCY": "2",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DJANGO_SECURE_COOKIES": "false",
    }
    served = serve(env)
    wait_for(lambda: served.pid_of("worker1", 1) and served.answers())
    first = served.pid_of("worker1", 1)
    assert first is not None

    # when the worker dies the way a broker restart can kill it
    os.kill(first, signal.SIGKILL)

    # then bin/serve starts a new one and says so
    wait_for(lambda: served.pid_of("worker1", 2))
    second = served.pid_of("worker1", 2)
    assert second is not None
    assert second != first
    log = served.log.read_text()
    assert "child.exited name=worker1 exit_code=-9" in log
    assert "config.settings.production" in log

    # and SIGTERM stops the web server, the new worker and beat
    pids = [pid for _, pid, _ in served.started()]
    assert served.terminate() == 0
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.parametrize(("raw", "seconds"), [(None, 30.0), ("2", 2.0), ("0.5", 0.5)])
def test_the_restart_backoff_cap_comes_from_the_environment(
    raw: str | None, seconds: float
) -> None:
    from config.serve import restart_backoff_max

    environ = {} if raw is None else {"SERVE_RESTART_BACKOFF_MAX": raw}
    assert restart_backoff_max(environ) == seconds


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "7200"])
def test_an_unusable_restart_backoff_cap_stops_serve_with_its_reason(raw: str) -> None:
    from config.serve import restart_backoff_max

    with pytest.raises(SystemExit, match="SERVE_RESTART_BACKOFF_MAX"):
        restart_backoff_max({"SERVE_RESTART_BACKOFF_MAX": raw})
