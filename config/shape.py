"""Which settings a process runs with: one rule for manage.py, ASGI, Celery and bin/serve.

Every process of one installation first reads the installation's env file (``.env`` next to
``manage.py``, or ``DJANGO_ENV_FILE``); variables already in the environment win over it.
Then the shape of that environment picks the settings module: an explicit
``DJANGO_SETTINGS_MODULE`` wins; PostgreSQL plus Redis (``DATABASE_URL`` and ``REDIS_URL``
both set) is the production shape; anything else is the embedded/local shape. So a second
shell running ``manage.py ask`` talks to the same database and sandbox as the server.

Importable before Django is configured: it touches neither settings nor apps.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
LOCAL_SETTINGS = "config.settings.local"
PRODUCTION_SETTINGS = "config.settings.production"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = "8000"
# Addresses a server listens on but a client cannot dial as such.
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]"}


def env_file_path(environ_: Mapping[str, str]) -> Path:
    """The installation's env file: ``DJANGO_ENV_FILE`` if set, else ``.env`` in the project."""
    return Path(environ_.get("DJANGO_ENV_FILE") or BASE_DIR / ".env")


def dotenv_load(*, target: MutableMapping[str, str], path: Path) -> None:
    """Copy the variables of the env file at ``path`` into ``target``; a variable already in
    ``target`` keeps its value. A missing file is no error: the environment may be complete."""
    if not path.is_file():
        return

    # django-environ's parser (quotes, ``export``, comments), so the settings and this module
    # never disagree on a value; it writes to its class's ENVIRON mapping.
    class EnvFileReader(environ.Env):
        ENVIRON = target

    EnvFileReader.read_env(path, overwrite=False)


def settings_module_for(environ_: Mapping[str, str]) -> str:
    """The settings module of this environment's shape."""
    explicit = environ_.get("DJANGO_SETTINGS_MODULE")
    if explicit:
        return explicit
    if environ_.get("DATABASE_URL") and environ_.get("REDIS_URL"):
        return PRODUCTION_SETTINGS
    return LOCAL_SETTINGS


def settings_select(*, target: MutableMapping[str, str] | None = None) -> str:
    """Load the env file into the process environment and set ``DJANGO_SETTINGS_MODULE``
    by shape; return the module name."""
    target = os.environ if target is None else target
    dotenv_load(target=target, path=env_file_path(target))
    module = settings_module_for(target)
    target["DJANGO_SETTINGS_MODULE"] = module
    return module


def asgi_settings_select(*, target: MutableMapping[str, str] | None = None) -> str:
    """``settings_select`` for an ASGI server process: no persistent database connections.

    Django's advice for ASGI. Each request runs its sync code on a thread of its own, so a
    connection kept open per thread (``DB_CONN_MAX_AGE``, 60 s in production) is never
    reused and piles up: 50 users exhausted PostgreSQL's 100 connections in
    ``bench/web_load.py``. The Celery workers, whose threads live long, keep theirs.

    Instead, each request borrows a connection from the process's pool (psycopg's, through
    Django: ``DB_POOL_MAX_SIZE``, 20 by default) and gives it back when it ends: a burst of
    requests waits for a free connection (``DB_POOL_TIMEOUT``, 10 s, then 503) instead of
    opening one per request, which exhausted PostgreSQL's 100 with 200 tool calls at once
    on the sandbox.
    """
    target = os.environ if target is None else target
    module = settings_select(target=target)
    target["DB_CONN_MAX_AGE"] = "0"
    target.setdefault("DB_POOL_MAX_SIZE", "20")
    return module


def sandbox_port_for(environ_: Mapping[str, str]) -> str:
    """The port of the sandbox's own server process: SANDBOX_PORT, else PORT + 1."""
    explicit = environ_.get("SANDBOX_PORT")
    if explicit:
        return explicit
    port = environ_.get("PORT") or DEFAULT_PORT
    return str(int(port) + 1) if port.isdigit() else port


def sandbox_base_url_for(environ_: Mapping[str, str]) -> str:
    """Where this installation serves the sandbox shop, from HOST and the sandbox port
    (bin/serve runs it as its own process, the way an external API runs), so a second
    shell calls the sandbox of the running installation."""
    host = environ_.get("HOST") or DEFAULT_HOST
    if host in _WILDCARD_HOSTS:
        host = DEFAULT_HOST
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{sandbox_port_for(environ_)}/sandbox/api"


def secret_key_required(environ_: Mapping[str, str]) -> str:
    """``DJANGO_SECRET_KEY``, or a configuration error that says how to get one."""
    key = environ_.get("DJANGO_SECRET_KEY", "")
    if not key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. There is no default secret key: `make run` and "
            f"bin/serve write a random one to {env_file_path(environ_)} on first start, "
            "`bin/serve ensure-secret-key` does only that, or set "
            "DJANGO_SECRET_KEY in the environment (50+ random characters)."
        )
    return key


def dotenv_ensure_secret_key(*, target: MutableMapping[str, str], path: Path) -> bool:
    """Give the installation a persistent random secret key: when neither ``target`` nor
    the env file sets ``DJANGO_SECRET_KEY``, append one to the file (created mode 600) and
    put it in ``target``. Returns whether a key was written."""
    if target.get("DJANGO_SECRET_KEY"):
        return False
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        # Two launchers starting at once must end up with one key, not one each.
        fcntl.flock(handle, fcntl.LOCK_EX)
        dotenv_load(target=target, path=path)
        if target.get("DJANGO_SECRET_KEY"):
            return False
        # The file now holds a secret: whoever created it, only its owner may read it.
        os.fchmod(handle.fileno(), 0o600)
        handle.seek(0)
        content = handle.read()
        key = secrets.token_urlsafe(50)
        separator = "\n" if content and not content.endswith("\n") else ""
        handle.write(
            f"{separator}# Written by bin/serve on first start; keep it secret and stable.\n"
            f"DJANGO_SECRET_KEY={key}\n"
        )
    target["DJANGO_SECRET_KEY"] = key
    return True
