"""bin/serve: serve one installation in the shape its environment selects.

Embedded shape: the web server (SQLite, runs on the in-process worker) and the sandbox
shop's own server. Production shape (DATABASE_URL and REDIS_URL set): static files
collected, `check --deploy` and the migration state reported, then the web server, the
sandbox server, WORKERS Celery worker processes for runs, one for the learning loop and
Celery beat, all supervised (config/supervisor.py). Non-interactive; SIGTERM or SIGINT stops
every child. Honours HOST, PORT, SANDBOX_PORT (PORT + 1), WORKERS, WORKER_CONCURRENCY and
LEARNER_CONCURRENCY, from the environment or `.env`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping

from config.shape import (
    BASE_DIR,
    DEFAULT_HOST,
    DEFAULT_PORT,
    PRODUCTION_SETTINGS,
    dotenv_ensure_secret_key,
    dotenv_load,
    env_file_path,
    sandbox_base_url_for,
    sandbox_port_for,
    settings_select,
)
from config.supervisor import Child, Supervisor

logger = logging.getLogger("serve")


def children_for(*, celery: bool, environ_: dict[str, str]) -> list[Child]:
    """The processes of the shape: the web server, plus Celery when runs go to Celery."""
    python = sys.executable
    host = environ_.get("HOST") or DEFAULT_HOST
    port = environ_.get("PORT") or DEFAULT_PORT
    web = Child(
        name="web",
        argv=[
            python,
            "-m",
            "config.daphne_main",
            "-b",
            host,
            "-p",
            port,
            "config.asgi:application",
        ],
        restart=False,
        env=_named("web"),
    )
    # The sandbox shop is an external API to the agents: its own server process, so that
    # tool calls do not compete with the console for the web process.
    sandbox = Child(
        name="sandbox",
        argv=[
            *(python, "-m", "config.daphne_main", "-b", host, "-p", sandbox_port_for(environ_)),
            "config.asgi_sandbox:application",
        ],
        env=_named("sandbox"),
    )
    if not celery:
        return [web, sandbox]
    workers = int(environ_.get("WORKERS") or 2)
    concurrency = environ_.get("WORKER_CONCURRENCY") or "500"
    children = [web, sandbox]
    for number in range(1, workers + 1):
        # Run workers: each task thread hands its run to the process's event loop and waits
        # (acks_late: the message is acknowledged once the run is terminal). A waiting
        # thread costs memory, not a connection: the runs' database calls share the loop's
        # bounded pool (AGENT_DB_THREADS), so one process holds hundreds of runs in flight.
        children.append(
            Child(
                name=f"worker{number}",
                argv=[
                    *(python, "-m", "celery", "-A", "config", "worker"),
                    *("-Q", "agents", "-P", "threads", "-c", concurrency),
                    *("-n", f"worker{number}@%h", "--loglevel=INFO"),
                ],
                env=_named(f"worker{number}"),
            )
        )
    # The learning loop (Reflexion, replays, rollout checks, the stuck-run sweep) works in
    # its task threads, each with a connection: its own process with a few threads, so a
    # burst of failed runs neither opens a connection per run nor delays the runs.
    children.append(
        Child(
            name="learner",
            argv=[
                *(python, "-m", "celery", "-A", "config", "worker"),
                *("-Q", "reflexion,default", "-P", "threads"),
                *("-c", environ_.get("LEARNER_CONCURRENCY") or "4"),
                *("-n", "learner@%h", "--loglevel=INFO"),
            ],
            env=_named("learner"),
        )
    )
    children.append(
        Child(
            name="beat",
            argv=[
                *(python, "-m", "celery", "-A", "config", "beat", "--loglevel=WARNING"),
                *("--schedule", str(BASE_DIR / "var" / "celerybeat-schedule")),
            ],
            env=_named("beat"),
        )
    )
    return children


def _named(child: str) -> dict[str, str]:
    # Its PostgreSQL sessions carry the child's name (pg_stat_activity.application_name), so
    # an operator sees which process holds which connections.
    return {"DB_APPLICATION_NAME": f"agentops-{child}"}


def _manage(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), *args], check=False)


def production_prepare() -> None:
    """Collect static files (the manifest storage serves only collected ones), show what
    `check --deploy` reports, and warn when the database lags behind the code."""
    if _manage("collectstatic", "--noinput", "-v0").returncode != 0:
        raise SystemExit("bin/serve: collectstatic failed; see above.")
    if _manage("check", "--deploy").returncode != 0:
        raise SystemExit("bin/serve: `manage.py check --deploy` found errors; see above.")
    if _manage("migrate", "--check", "-v0").returncode != 0:
        logger.warning("serve.unapplied_migrations hint=%s", "run `make migrate` and restart")


def embedded_prepare() -> None:
    """The embedded shape is one installation on its own SQLite file: bring the database up to
    date and, on a first start with no users, seed the demo, so `bin/serve` alone gives a
    working app with the printed logins (`make run` does the same steps first)."""
    if _manage("migrate", "--noinput", "-v0").returncode != 0:
        raise SystemExit("bin/serve: migrate failed; see above.")
    if _manage("demo_seed", "--if-empty").returncode != 0:
        raise SystemExit("bin/serve: demo_seed failed; see above.")


def banner(*, celery: bool, environ_: dict[str, str], from_file: dict[str, str]) -> str:
    host = environ_.get("HOST") or DEFAULT_HOST
    port = environ_.get("PORT") or DEFAULT_PORT
    if celery:
        shape = (
            f"production shape: PostgreSQL + Redis broker + {environ_.get('WORKERS') or 2} "
            "Celery worker processes (restarted when they exit)"
        )
    else:
        shape = "embedded: SQLite + in-process worker (no Redis)"
    lines = [
        "",
        f"  Agent Ops is starting — {shape}",
        f"  Settings:   {environ_['DJANGO_SETTINGS_MODULE']}"
        f"  (env file: {env_file_path(environ_)})",
        f"  URL:        http://{host}:{port}/",
        f"  Admin:      http://{host}:{port}/admin/",
        f"  API docs:   http://{host}:{port}/api/docs/",
        f"  Sandbox:    {environ_['SANDBOX_BASE_URL']}  (its own server process)",
        "  Logins:     support / support-demo   ops / ops-demo   admin / admin-demo",
        '  Try:        .venv/bin/python manage.py ask "Where is my order #W…?"'
        "   (see the order printed above)",
    ]
    only_here = [
        name
        for name in ("DATABASE_URL", "REDIS_URL", "HOST", "PORT", "SANDBOX_PORT")
        if name in environ_ and name not in from_file
    ]
    if only_here:
        lines.append(
            f"  Note:       set in this shell only, not in the env file: {', '.join(only_here)}."
            " Another shell (manage.py ask) needs them too: put them in the env file."
        )
    return "\n".join([*lines, ""])


def main(argv: list[str]) -> int:
    """Serve; or, with ``ensure-secret-key``, only give the installation its secret key
    (the Makefile does that before the first migrate)."""
    if argv[1:] not in ([], ["ensure-secret-key"]):
        print("usage: bin/serve [ensure-secret-key]", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )
    # Children import the project by module name (config.asgi, -A config).
    os.chdir(BASE_DIR)
    environ_ = os.environ
    module = settings_select(target=environ_)
    from_file: dict[str, str] = {}
    dotenv_load(target=from_file, path=env_file_path(environ_))
    if dotenv_ensure_secret_key(target=environ_, path=env_file_path(environ_)):
        logger.info("serve.secret_key_written path=%s mode=600", env_file_path(environ_))
    if argv[1:]:
        return 0
    environ_.setdefault("SANDBOX_BASE_URL", sandbox_base_url_for(environ_))
    # The settings decide where runs execute; reading them configures nothing (no setup()).
    from django.conf import settings

    celery = settings.AGENT_EXECUTOR == "celery"
    os.makedirs(BASE_DIR / "var", exist_ok=True)
    if module == PRODUCTION_SETTINGS:
        production_prepare()
    elif not celery:
        embedded_prepare()
    print(banner(celery=celery, environ_=dict(environ_), from_file=from_file), flush=True)
    supervisor = Supervisor(
        children_for(celery=celery, environ_=dict(environ_)),
        # A child that keeps exiting is restarted after 1, 2, 4 ... s, at most this long.
        backoff_max=restart_backoff_max(environ_),
    )
    return supervisor.run()


def restart_backoff_max(environ_: Mapping[str, str]) -> float:
    """``SERVE_RESTART_BACKOFF_MAX`` seconds (default 30): the longest wait before a
    crash-looping child is started again."""
    raw = environ_.get("SERVE_RESTART_BACKOFF_MAX", "30")
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"SERVE_RESTART_BACKOFF_MAX={raw!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise SystemExit(f"SERVE_RESTART_BACKOFF_MAX={raw!r} must be above 0 and at most 3600")
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv))
