"""The settings each shape loads, seen through the real entry points in subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.config.conftest import SECRET_KEY, postgres_url, run_python

SHOW_SETTINGS = (
    "from django.conf import settings as s; import json; print(json.dumps({"
    "'module': s.SETTINGS_MODULE, 'debug': s.DEBUG, 'db': s.DATABASES['default']['NAME'],"
    "'sandbox': s.SANDBOX_BASE_URL, 'executor': s.AGENT_EXECUTOR,"
    "'ssl_redirect': s.SECURE_SSL_REDIRECT, 'session_secure': s.SESSION_COOKIE_SECURE,"
    "'csrf_secure': s.CSRF_COOKIE_SECURE, 'hsts': s.SECURE_HSTS_SECONDS,"
    "'proxy_header': s.SECURE_PROXY_SSL_HEADER, 'allowed_hosts': s.ALLOWED_HOSTS}))"
)


def shown(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_shell_reads_the_installation_env_file(clean_env, settings):
    # given an installation whose .env holds the production shape, and a shell without it
    Path(clean_env["DJANGO_ENV_FILE"]).write_text(
        f"DATABASE_URL={postgres_url()}\nREDIS_URL={settings.REDIS_URL}\n"
        f"DJANGO_SECRET_KEY={SECRET_KEY}\nPORT=8123\n"
    )

    # when manage.py runs there
    result = run_python("manage.py", "shell", "-c", SHOW_SETTINGS, env=clean_env)

    # then it uses the server's settings, database and sandbox (its own server: PORT + 1)
    values = shown(result)
    assert values["module"] == "config.settings.production"
    assert values["db"] == settings.DATABASES["default"]["NAME"]
    assert values["sandbox"] == "http://127.0.0.1:8124/sandbox/api"
    assert values["executor"] == "celery"


@pytest.mark.parametrize(
    "entry_point",
    [
        "import config.asgi",
        "from config.celery import app; app.loader.import_default_modules()",
    ],
)
def test_asgi_and_celery_select_settings_by_shape(production_env, entry_point):
    result = run_python("-c", f"{entry_point}; {SHOW_SETTINGS}", env=production_env)

    assert shown(result)["module"] == "config.settings.production"


def test_production_is_secure_by_default(production_env):
    values = shown(run_python("manage.py", "shell", "-c", SHOW_SETTINGS, env=production_env))

    assert values["debug"] is False
    assert values["ssl_redirect"] is True
    assert values["session_secure"] is True
    assert values["csrf_secure"] is True
    assert values["hsts"] >= 60 * 60 * 24 * 365
    assert values["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_each_production_security_setting_can_be_relaxed_for_plain_http(production_env):
    env = {
        **production_env,
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DJANGO_SECURE_COOKIES": "false",
        "DJANGO_SECURE_HSTS_SECONDS": "0",
        "DJANGO_SECURE_PROXY_SSL_HEADER": "false",
        "DJANGO_DEBUG": "true",  # never honoured in production
    }

    values = shown(run_python("manage.py", "shell", "-c", SHOW_SETTINGS, env=env))

    assert values["debug"] is False
    assert values["ssl_redirect"] is False
    assert values["session_secure"] is False
    assert values["csrf_secure"] is False
    assert values["hsts"] == 0
    assert values["proxy_header"] is None


def test_production_settings_refuse_to_load_without_a_secret_key(production_env):
    env = {k: v for k, v in production_env.items() if k != "DJANGO_SECRET_KEY"}

    result = run_python(
        "-c",
        "import django; django.setup()",
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings.production"},
    )

    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in result.stderr


def test_check_deploy_is_clean_in_the_production_shape(production_env):
    result = run_python(
        "manage.py", "check", "--deploy", "--fail-level", "WARNING", env=production_env
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_sandbox_host_is_always_an_allowed_host(production_env):
    env = {**production_env, "DJANGO_ALLOWED_HOSTS": "agentops.example.com", "HOST": "0.0.0.0"}

    values = shown(run_python("manage.py", "shell", "-c", SHOW_SETTINGS, env=env))

    assert values["allowed_hosts"] == ["agentops.example.com", "127.0.0.1"]


@pytest.mark.parametrize(("debug", "expected"), [(None, False), ("true", True), ("false", False)])
def test_the_local_shape_debugs_only_when_asked(clean_env, debug, expected):
    env = {**clean_env, "DJANGO_SECRET_KEY": SECRET_KEY}
    if debug is not None:
        env["DJANGO_DEBUG"] = debug

    values = shown(run_python("manage.py", "shell", "-c", SHOW_SETTINGS, env=env))

    assert values["module"] == "config.settings.local"
    assert values["debug"] is expected


def test_the_local_shape_has_no_built_in_secret_key(clean_env):
    result = run_python("manage.py", "check", env=clean_env)

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
