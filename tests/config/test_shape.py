"""config.shape: one env file per installation, and the settings module chosen by its shape."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from config.shape import (
    LOCAL_SETTINGS,
    PRODUCTION_SETTINGS,
    dotenv_ensure_secret_key,
    dotenv_load,
    sandbox_base_url_for,
    secret_key_required,
    settings_module_for,
    settings_select,
)

DB = "postgres://postgres@127.0.0.1:5432/agentops"
REDIS = "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, LOCAL_SETTINGS),
        ({"DATABASE_URL": DB}, LOCAL_SETTINGS),
        ({"REDIS_URL": REDIS}, LOCAL_SETTINGS),
        ({"DATABASE_URL": DB, "REDIS_URL": ""}, LOCAL_SETTINGS),
        ({"DATABASE_URL": DB, "REDIS_URL": REDIS}, PRODUCTION_SETTINGS),
        (
            {"DATABASE_URL": DB, "REDIS_URL": REDIS, "DJANGO_SETTINGS_MODULE": "config.settings.x"},
            "config.settings.x",
        ),
        ({"DJANGO_SETTINGS_MODULE": PRODUCTION_SETTINGS}, PRODUCTION_SETTINGS),
    ],
)
def test_settings_module_follows_the_shape_and_an_explicit_module_wins(environ, expected):
    assert settings_module_for(environ) == expected


def test_settings_select_reads_the_env_file_into_the_environment(tmp_path: Path):
    env_file = tmp_path / "env"
    env_file.write_text(
        f"# the installation's settings\nDATABASE_URL={DB}\nexport REDIS_URL='{REDIS}'\nPORT=9100\n"
    )
    target = {"DJANGO_ENV_FILE": str(env_file)}

    module = settings_select(target=target)

    assert module == PRODUCTION_SETTINGS
    assert target["DJANGO_SETTINGS_MODULE"] == PRODUCTION_SETTINGS
    assert (target["DATABASE_URL"], target["REDIS_URL"], target["PORT"]) == (DB, REDIS, "9100")


def test_the_environment_wins_over_the_env_file(tmp_path: Path):
    env_file = tmp_path / "env"
    env_file.write_text(f"DATABASE_URL={DB}\nREDIS_URL={REDIS}\nDJANGO_DEBUG=true\n")
    target = {"DATABASE_URL": "sqlite:///other.sqlite3", "DJANGO_DEBUG": "false"}

    dotenv_load(target=target, path=env_file)

    assert target == {
        "DATABASE_URL": "sqlite:///other.sqlite3",
        "DJANGO_DEBUG": "false",
        "REDIS_URL": REDIS,
    }


def test_a_missing_env_file_leaves_the_environment_alone(tmp_path: Path):
    target = {"DJANGO_ENV_FILE": str(tmp_path / "absent")}

    assert settings_select(target=target) == LOCAL_SETTINGS
    assert target == {
        "DJANGO_ENV_FILE": str(tmp_path / "absent"),
        "DJANGO_SETTINGS_MODULE": LOCAL_SETTINGS,
    }


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "http://127.0.0.1:8001/sandbox/api"),
        ({"PORT": "9100"}, "http://127.0.0.1:9101/sandbox/api"),
        ({"PORT": "9100", "SANDBOX_PORT": "7000"}, "http://127.0.0.1:7000/sandbox/api"),
        ({"HOST": "0.0.0.0", "PORT": "9100"}, "http://127.0.0.1:9101/sandbox/api"),
        ({"HOST": "::"}, "http://127.0.0.1:8001/sandbox/api"),
        ({"HOST": "::1"}, "http://[::1]:8001/sandbox/api"),
        ({"HOST": "agentops.internal"}, "http://agentops.internal:8001/sandbox/api"),
    ],
)
def test_the_sandbox_url_is_where_bin_serve_listens(environ, expected):
    assert sandbox_base_url_for(environ) == expected


def test_a_missing_secret_key_is_a_configuration_error_that_says_what_to_do():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY is not set"):
        secret_key_required({"DJANGO_SECRET_KEY": ""})


def test_the_first_start_writes_a_private_random_secret_key(tmp_path: Path):
    env_file = tmp_path / "env"
    target: dict[str, str] = {}

    written = dotenv_ensure_secret_key(target=target, path=env_file)

    assert written is True
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    key = target["DJANGO_SECRET_KEY"]
    assert len(key) >= 50
    assert len(set(key)) >= 5
    reread: dict[str, str] = {}
    dotenv_load(target=reread, path=env_file)
    assert reread == {"DJANGO_SECRET_KEY": key}


def test_later_starts_keep_the_key_of_the_first(tmp_path: Path):
    env_file = tmp_path / "env"
    first: dict[str, str] = {}
    dotenv_ensure_secret_key(target=first, path=env_file)
    second: dict[str, str] = {}

    written = dotenv_ensure_secret_key(target=second, path=env_file)

    assert written is False
    assert second["DJANGO_SECRET_KEY"] == first["DJANGO_SECRET_KEY"]
    assert env_file.read_text().count("DJANGO_SECRET_KEY=") == 1


def test_the_key_is_appended_to_an_existing_env_file_which_becomes_private(tmp_path: Path):
    env_file = tmp_path / "env"
    env_file.write_text(f"DATABASE_URL={DB}")  # no final newline
    env_file.chmod(0o644)
    target: dict[str, str] = {}

    dotenv_ensure_secret_key(target=target, path=env_file)

    reread: dict[str, str] = {}
    dotenv_load(target=reread, path=env_file)
    assert reread == {"DATABASE_URL": DB, "DJANGO_SECRET_KEY": target["DJANGO_SECRET_KEY"]}
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def test_a_key_from_the_environment_writes_nothing(tmp_path: Path):
    env_file = tmp_path / "env"
    target = {"DJANGO_SECRET_KEY": "k" * 60}

    assert dotenv_ensure_secret_key(target=target, path=env_file) is False
    assert not env_file.exists()
