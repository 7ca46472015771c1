"""Run the project's entry points in subprocesses, with an environment the test controls."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent
# Everything that selects or shapes settings; a subprocess gets only what a test gives it.
SHAPE_VARIABLES = (
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_ENV_FILE",
    "DJANGO_SECRET_KEY",
    "DJANGO_DEBUG",
    "DJANGO_ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "AGENT_EXECUTOR",
    "SANDBOX_BASE_URL",
    "HOST",
    "PORT",
    "SANDBOX_PORT",
    "WORKERS",
    "WORKER_CONCURRENCY",
)
SECRET_KEY = "k3y-" + "x7Qp9vL2" * 8


def postgres_url() -> str:
    """The test PostgreSQL server, as a DATABASE_URL."""
    db = settings.DATABASES["default"]
    credentials = f"{db['USER']}:{db['PASSWORD']}" if db["PASSWORD"] else db["USER"]
    return f"postgres://{credentials}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """The test process's environment without any shape variable, and an empty env file of
    its own, so neither the developer's shell nor the repository's .env leaks in."""
    env = {k: v for k, v in os.environ.items() if k not in SHAPE_VARIABLES}
    env["DJANGO_ENV_FILE"] = str(tmp_path / "env")
    return env


@pytest.fixture
def production_env(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The production shape with its defaults: PostgreSQL, Redis and a secret key."""
    return {
        **clean_env,
        "DATABASE_URL": postgres_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }


def run_python(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
