"""`manage.py api_token USERNAME` prints the key that authenticates `Authorization: Token`."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def _api_token(*args: str) -> str:
    out = StringIO()
    call_command("api_token", *args, stdout=out)
    return out.getvalue()


def _status_with(key: str) -> int:
    return APIClient().get("/api/traces/", HTTP_AUTHORIZATION=f"Token {key}").status_code


def test_prints_only_a_new_key_that_authenticates(ops_user: Any) -> None:
    printed = _api_token(ops_user.username)

    key = printed.strip()
    assert printed == f"{key}\n"
    assert Token.objects.get(user=ops_user).key == key
    assert _status_with(key) == 200


def test_prints_the_same_key_until_rotated(ops_user: Any) -> None:
    first = _api_token(ops_user.username).strip()

    assert _api_token(ops_user.username).strip() == first
    rotated = _api_token(ops_user.username, "--rotate").strip()

    assert rotated != first
    assert Token.objects.filter(user=ops_user).count() == 1
    assert _status_with(first) == 401
    assert _status_with(rotated) == 200


def test_rotate_creates_a_key_for_a_user_without_one(ops_user: Any) -> None:
    key = _api_token(ops_user.username, "--rotate").strip()

    assert _status_with(key) == 200


@pytest.mark.parametrize(("username", "message"), [("nobody", "No user"), ("gone", "inactive")])
def test_refuses_unknown_and_inactive_users(
    django_user_model: Any, username: str, message: str
) -> None:
    django_user_model.objects.create_user("gone", password="x" * 10, is_active=False)

    with pytest.raises(CommandError, match=message):
        _api_token(username)
    assert not Token.objects.exists()
