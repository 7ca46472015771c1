"""A Celery broker and worker of a test's own.

``broker``: this process publishes to a redis-server of the test's own (``own_redis``), so
no test purges or reads a broker another test, helper or checkout uses.
``worker_process``: a real worker process on the test database and that broker, started
the way ``bin/serve`` starts it; extra environment (time limits) per test.

Made visible to a test module with
``from tests.celery_process import broker_fixture, own_redis_fixture  # noqa: F401``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu.pools
import pytest
from django.conf import settings as django_settings

from config.celery import app as celery_app
from tests.redis_server import RedisServer, own_redis_fixture, wait_for  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def reset_broker_pools() -> None:
    # kombu keeps one pool per broker URL process-wide: close and forget them all, so the
    # next publish connects to the broker now configured.
    kombu.pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture(name="broker")
def broker_fixture(own_redis: RedisServer, settings: Any) -> Iterator[RedisServer]:
    """This process publishes runs to the test's own Redis, as the web process would."""
    settings.AGENT_EXECUTOR = "celery"
    previous = celery_app.conf.broker_url
    reset_broker_pools()
    celery_app.conf.broker_url = own_redis.url
    yield own_redis
    reset_broker_pools()
    celery_app.conf.broker_url = previous


def database_url() -> str:
    db = django_settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def worker_pid(worker: dict[str, Any]) -> int | None:
    """The pid the worker node reports over the broker; None while it does not answer."""
    try:
        replies = celery_app.control.inspect(destination=[worker["node"]], timeout=1).stats()
    except Exception:  # the broker itself may still be coming back
        return None
    return int(replies[worker["node"]]["pid"]) if replies else None


def worker_process(
    *,
    broker: RedisServer,
    sandbox_url: str,
    log: Path,
    node: str,
    pool: str = "threads",
    concurrency: int = 4,
    env: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Start a worker (bin/serve's command line) and stop it with SIGTERM at the end."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": database_url(),
        "REDIS_URL": broker.url,
        "SANDBOX_BASE_URL": sandbox_url,
        "LLM_SIM_ERROR_RATES": "{}",
        **(env or {}),
    }
    environment.pop("CELERY_BROKER_URL", None)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "config", "worker"),
                *("-Q", "agents,reflexion,default", "-P", pool, "-c", str(concurrency)),
                *("-n", node, "--loglevel=INFO"),
            ],
            cwd=REPO,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    handle = {"process": process, "node": node, "log": log}
    try:
        wait_for(lambda: worker_pid(handle), what="the worker to answer", log=log, alive=process)
        yield handle
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
