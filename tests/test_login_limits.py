"""Failed sign-ins are limited per user name and per address, on every way in that checks a
password (the login page and HTTP Basic on the API): past the limit even the right
password is refused, and no password is hashed for a refused attempt."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "pw-sam-123"  # tests/conftest.py's support user


def _sign_in(client: Client, password: str, username: str = "sam") -> bool:
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302


def _basic(client: Client, password: str, username: str = "sam") -> int:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return client.get("/api/traces/", HTTP_AUTHORIZATION=f"Basic {token}").status_code


def test_past_the_limit_the_right_password_is_refused_everywhere_and_not_hashed(
    support_user: Any, support_user2: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.LOGIN_FAILURES_PER_USER = 3
    client = Client()
    assert _basic(client, PASSWORD) == 200  # the API takes the password
    for _ in range(3):
        assert not _sign_in(client, "wrong-guess")
    hashed: list[str] = []
    real = MD5PasswordHasher.verify  # the test settings' hasher (PBKDF2 in production)
    monkeypatch.setattr(
        MD5PasswordHasher, "verify", lambda self, p, e: hashed.append(p) or real(self, p, e)
    )
    page = client.post("/accounts/login/", {"username": "sam", "password": PASSWORD})
    assert "Too many failed sign-ins. Try again in 15 minutes." in page.content.decode()
    assert _basic(client, PASSWORD) == 401
    assert hashed == []
    assert _basic(Client(), PASSWORD, username="sue") == 401 and hashed  # checked: hashed
    # Another user is not locked by sam's failures (3 < the address limit of 50).
    hashed.clear()
    assert _basic(Client(), "pw-sue-123", username="sue") == 200


def test_a_successful_sign_in_clears_the_count(support_user: Any, settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_USER = 3
    client = Client()
    for _ in range(2):
        assert not _sign_in(client, "wrong-guess")
    assert _sign_in(client, PASSWORD)
    for _ in range(2):
        assert not _sign_in(Client(), "wrong-guess")
    assert _sign_in(Client(), PASSWORD)


def test_one_address_guessing_many_names_is_limited_too(support_user: Any, settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_ADDRESS = 4
    client = Client()
    for name in ("a", "b", "c", "d"):
        assert not _sign_in(client, "x", username=name)
    assert not _sign_in(client, PASSWORD)  # from this address, even sam's right password
    assert _sign_in(Client(REMOTE_ADDR="10.0.0.9"), PASSWORD)


def test_guesses_from_elsewhere_do_not_lock_the_owner_out(support_user: Any, settings: Any) -> None:
    """Ten wrong passwords for a known name, from anywhere, used to lock its owner out for
    the window, again and again."""
    settings.LOGIN_FAILURES_PER_USER = 3
    settings.LOGIN_FAILURES_PER_USER_ALL_ADDRESSES = 6
    for _ in range(3):
        assert not _sign_in(Client(REMOTE_ADDR="198.51.100.7"), "wrong-guess")
    assert not _sign_in(Client(REMOTE_ADDR="198.51.100.7"), PASSWORD)  # that address: locked
    assert _sign_in(Client(REMOTE_ADDR="10.0.0.5"), PASSWORD)  # the owner's: not
    # Spread over many addresses, the guesses still meet the name's overall limit.
    for number in range(6):
        assert not _sign_in(Client(REMOTE_ADDR=f"203.0.113.{number}"), "wrong-guess")
    assert not _sign_in(Client(REMOTE_ADDR="10.0.0.5"), PASSWORD)
