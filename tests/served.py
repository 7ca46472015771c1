"""The app served the way users run it: ``manage.py migrate`` + ``demo_seed`` + ``bin/serve``
in a subprocess on a free port, in the embedded or the production shape.

Django's live test server is a threaded WSGI server inside the test process; the product
is daphne (ASGI) with either an in-process worker or Celery workers. Bugs that live in that
difference (request contexts, settings selection, worker start-up) only show here.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
VENV_PY = ROOT / ".venv" / "bin" / "python"
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# Redis database of the production-shape server under test (the suite itself uses 15);
# AGENT_OPS_E2E_REDIS_DB moves it, so two checkouts can run their suites side by side.
E2E_REDIS_DB = int(os.environ.get("AGENT_OPS_E2E_REDIS_DB", "13"))
# Variables of the test process that must not leak into the served app: it picks its own
# settings module by shape, like a user's shell does.
SCRUBBED = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "AGENT_EXECUTOR",
    "SANDBOX_BASE_URL",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "PORT",
    "SANDBOX_PORT",
    "HOST",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServedApp:
    """One running ``bin/serve`` and the environment its shells share."""

    shape: str
    env: dict[str, str]
    workdir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(default_factory=Path)
    demo_order: str = ""
    database_name: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str, timeout: float = 300) -> str:
        """Run ``manage.py`` from a second shell of this installation."""
        done = subprocess.run(
            [str(VENV_PY), "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def log_tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str = "",
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Token {token}")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def login(self, username: str, password: str) -> urllib.request.OpenerDirector:
        """A browser-like session: the login form with its CSRF token, cookies kept."""
        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        with opener.open(self.url + "/accounts/login/", timeout=30) as response:
            form = response.read().decode()
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert match, "the login form carries no CSRF token"
        data = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": match.group(1)}
        ).encode()
        with opener.open(self.url + "/accounts/login/", data=data, timeout=30) as response:
            assert "/accounts/login/" not in response.url, f"{username} could not log in"
        return opener

    def start(self, *, prepare: bool = True) -> None:
        """Serve; with ``prepare``, first do what `make run` does (secret key, migrations,
        the demo seed), otherwise start ``bin/serve`` alone on an empty installation."""
        self.port = free_port()
        self.env["PORT"] = str(self.port)
        # The sandbox shop's own server process (bin/serve): a free port of its own.
        self.env["SANDBOX_PORT"] = str(free_port())
        self.env["HOST"] = "127.0.0.1"
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"serve-{self.shape}.log"
        if prepare:
            subprocess.run(
                ["bin/serve", "ensure-secret-key"], cwd=ROOT, env=self.env, check=True, timeout=60
            )
            seed = self.manage("migrate", "--noinput") and self.manage("demo_seed")
            match = re.search(r"#W\d{7}", seed)
            assert match, f"demo_seed printed no order to try:\n{seed}"
            self.demo_order = match.group(0)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                ["bin/serve"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: teardown ends every child
            )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"bin/serve exited early:\n{self.log_tail()}")
            try:
                status, _ = self.request("GET", "/accounts/login/")
                sandbox = f"http://127.0.0.1:{self.env['SANDBOX_PORT']}/sandbox/api/openapi.json"
                with urllib.request.urlopen(sandbox, timeout=5) as response:
                    if status == 200 and response.status == 200:
                        return  # the console and the sandbox's own server both answer
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"bin/serve never answered on {self.url}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def api_token(self, username: str) -> str:
        return self.manage("api_token", username).strip().splitlines()[-1]

    def wait_terminal(self, trace_id: str, *, token: str, deadline_s: float = 120) -> dict:
        """Poll the API until the run is terminal; the deadline only bounds a hung test."""
        end = time.monotonic() + deadline_s
        trace: dict = {}
        while time.monotonic() < end:
            status, body = self.request("GET", f"/api/traces/{trace_id}/", token=token)
            assert status == 200, body
            trace = json.loads(body)
            if trace["status"] not in ("queued", "running"):
                return trace
            time.sleep(0.2)
        raise AssertionError(
            f"run {trace_id} still {trace.get('status')} after {deadline_s}s:\n{self.log_tail()}"
        )


def base_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PYTHONUNBUFFERED"] = "1"
    # The served app must not read a developer's .env: each shape states its variables.
    env["DJANGO_ENV_FILE"] = str(workdir / "served.env")
    env["LLM_BACKEND"] = "simulated"
    env["LLM_SIM_ERROR_RATES"] = "{}"
    return env


def embedded_app(workdir: Path) -> ServedApp:
    """``make run`` with no variables: SQLite, the in-process worker, no Redis."""
    env = base_env(workdir)
    env["DATABASE_URL"] = f"sqlite:///{workdir / 'embedded.sqlite3'}"
    return ServedApp(shape="embedded", env=env, workdir=workdir)


def production_app(
    workdir: Path, *, name_suffix: str = "", redis_db: int = E2E_REDIS_DB
) -> ServedApp:
    """The production shape: PostgreSQL, Redis broker, a real Celery worker, production
    settings (plain HTTP on loopback is the only thing relaxed). A second app in the same
    session needs its own ``name_suffix`` and ``redis_db`` (its own database and broker)."""
    name = f"agentops_e2e_{os.getpid()}{name_suffix}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    redis_url = f"redis://127.0.0.1:6379/{redis_db}"
    redis.Redis.from_url(redis_url).flushdb()
    env = production_env(
        workdir,
        database_url=f"postgres://postgres@127.0.0.1:5432/{name}",
        redis_url=redis_url,
    )
    return ServedApp(shape="production", env=env, workdir=workdir, database_name=name)


def production_env(workdir: Path, *, database_url: str, redis_url: str) -> dict[str, str]:
    """The production shape's environment for a database and a Redis of the caller's."""
    env = base_env(workdir)
    env.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SECURE_COOKIES": "false",
            "DJANGO_SECURE_HSTS_SECONDS": "0",
            "DJANGO_STATIC_ROOT": str(workdir / "static"),
            "WORKERS": "1",
            "WORKER_CONCURRENCY": "8",
        }
    )
    return env


def app_teardown(app: ServedApp) -> None:
    app.stop()
    if app.database_name:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{app.database_name}" WITH (FORCE)')
    shutil.rmtree(app.workdir, ignore_errors=True)
