"""The redactor: secret-looking values out of text, JSON values and log records."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest

from traces.redaction import (
    REDACTED,
    RedactingFilter,
    redact_text,
    redact_value,
    secret_key_name,
    secret_register,
)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (
            "Incorrect API key provided: sk-proj-Abc123def456GHI789jkl.",
            "sk-proj-Abc123def456GHI789jkl",
        ),
        ("key sk-ant-api03-abcdefghijklmnop", "sk-ant-api03-abcdefghijklmnop"),
        ("stripe sk_live_51Habcdefghijkl", "sk_live_51Habcdefghijkl"),
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("aws AKIAIOSFODNN7EXAMPLE in config", "AKIAIOSFODNN7EXAMPLE"),
        (
            "google AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        ),
        ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        ),
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
        ("authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ('{"Authorization": "Token 9f8e7d6c5b4a"}', "9f8e7d6c5b4a"),
        ("Proxy-Authorization: Basic cHJveHk6cGFzcw==", "cHJveHk6cGFzcw=="),
        ("sent with bearer 0123456789abcdef", "0123456789abcdef"),
        ("GET https://alice:s3cr3t-pw@api.example.com/x", "s3cr3t-pw"),
        ("redis://:hunter2hunter2@127.0.0.1:6379/0", "hunter2hunter2"),
        ("GET /x?api_key=AbC123xyz&page=2", "AbC123xyz"),
        ("GET /x?page=2&token=t0k3n-value", "t0k3n-value"),
        ("login password=correct-horse&user=bob", "correct-horse"),
        ("apikey: 77aa88bb99cc", "77aa88bb99cc"),
        ('{"password": "hunter2", "user": "bob"}', "hunter2"),
        ('{"client_secret": "cs-0987654321", "id": 4}', "cs-0987654321"),
        ("{'refresh_token': 'rt-abcdef123456'}", "rt-abcdef123456"),
        ("X-Api-Key: xk-55667788", "xk-55667788"),
        ("card 4111 1111 1111 1111 on file", "4111 1111 1111 1111"),
        ("card 4111-1111-1111-1111 on file", "4111-1111-1111-1111"),
        ("card 4111111111111111.", "4111111111111111"),
        ("amex 378282246310005", "378282246310005"),
        ("mastercard 5555555555554444", "5555555555554444"),
        ("unionpay 6200000000000005", "6200000000000005"),
        ('{"card": 4012888888881881}', "4012888888881881"),
        (
            "curl -H 'X: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b'",
            "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
        ),
        ("Cookie: sessionid=abcdef1234567890; csrftoken=xyz", "abcdef1234567890"),
        ('{"Set-Cookie": "sessionid=s3ss10n; HttpOnly"}', "s3ss10n"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----",
            "MIIEpAIBAAKCAQEAx",
        ),
        ("key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq (cut", "MIIEvQIBADANBgkq"),
    ],
)
def test_secret_looking_values_are_redacted(text: str, secret: str) -> None:
    redacted = redact_text(text)
    assert secret not in redacted
    assert REDACTED in redacted


@pytest.mark.parametrize(
    "text",
    [
        "Where is my order #W1001549?",
        '{"prompt_tokens": 10, "max_tokens": 5, "token_type": "bearer"}',
        "the bearer of bad news",
        "http://127.0.0.1:8000/sandbox/api/orders/%23W1001549?expand=items",
        "card 4111 1111 1111 1112 fails the Luhn check",
        "sent at 1733030000000 ms",
        "tracking 9400123456789012345678 via USPS",
        "fedex 123456789012",
        "price 1234.5678901234567",
        "validator=required path=(root): 'password' is a required property",
        "sk-short",
        "{'passed': True, 'passenger': 'bob'}",
        "the token 12 was spent; cookies are baked",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQ\n-----END PUBLIC KEY-----",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_quoted_json_stays_valid_json() -> None:
    import json

    body = json.dumps({"password": 'p"q', "api_key": "k-1234567", "n": 1})
    assert json.loads(redact_text(body)) == {"password": REDACTED, "api_key": REDACTED, "n": 1}


def test_configured_llm_api_key_is_redacted_verbatim(settings: Any) -> None:
    settings.LLM_API_KEY = "plain-looking-llm-key-42"
    assert redact_text("the proxy said: plain-looking-llm-key-42 is wrong") == (
        f"the proxy said: {REDACTED} is wrong"
    )


def test_registered_secret_is_redacted_verbatim() -> None:
    secret_register("Zq8-registered-credential")
    assert redact_text("echo Zq8-registered-credential!") == f"echo {REDACTED}!"
    assert redact_value({"note": ["Zq8-registered-credential"]}) == {"note": [REDACTED]}


def test_registered_secret_is_redacted_in_the_forms_an_api_echoes() -> None:
    secret_register("Ab+cd/ef==Gh-registered")
    for echoed in (
        "Ab%2Bcd%2Fef%3D%3DGh-registered",  # a query string, as httpx sends it
        "Ab%2bcd%2fef%3d%3dGh-registered",  # lower-case escapes
        "Ab%2Bcd/ef%3D%3DGh-registered",  # a path, '/' kept
        "Ab+cd\\/ef==Gh-registered",  # JSON with escaped slashes
    ):
        assert redact_text(f"url={echoed}&x=1") == f"url={REDACTED}&x=1", echoed
        assert redact_value({"echo": echoed}) == {"echo": REDACTED}


def test_too_short_secrets_are_not_registered() -> None:
    secret_register("abc")
    assert redact_text("abcabc") == "abcabc"


def test_extra_secrets_are_redacted_for_one_call() -> None:
    assert redact_text("echo one-off-secret", extra_secrets=["one-off-secret"]) == (
        f"echo {REDACTED}"
    )
    assert redact_text("echo one-off-secret") == "echo one-off-secret"


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("apiKey", True),
        ("X-Api-Key", True),
        ("api_key", True),
        ("client_secret", True),
        ("refresh_token", True),
        ("Authorization", True),
        ("set-cookie", True),
        ("credentials", True),
        ("max_tokens", False),
        ("prompt_tokens", False),
        ("token_type", False),
        ("passenger", False),
        ("order_id", False),
        (3, False),
    ],
)
def test_secret_key_names(key: object, secret: bool) -> None:
    assert secret_key_name(key) is secret


def test_values_under_secret_keys_are_replaced_whole() -> None:
    value = {
        "order_id": "#W1",
        "apiKey": "anything",
        "auth": {"password": {"nested": 1}, "user": "u"},
        "items": [{"token": 123}, {"note": "Bearer abcdefghijkl"}],
        "empty_password": "",
    }
    assert redact_value(value) == {
        "order_id": "#W1",
        "apiKey": REDACTED,
        "auth": {"password": REDACTED, "user": "u"},
        "items": [{"token": REDACTED}, {"note": f"Bearer {REDACTED}"}],
        "empty_password": "",
    }


def make_record(msg: str, *args: Any, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("agents.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_filter_redacts_message_arguments_and_extras() -> None:
    record = make_record(
        "call failed: %s", "Authorization: Bearer abcdefghijkl", detail="token=zzzz9999", n=3
    )
    assert RedactingFilter().filter(record)
    assert record.getMessage() == f"call failed: Authorization: {REDACTED}"
    assert record.__dict__["detail"] == f"token={REDACTED}"
    assert record.__dict__["n"] == 3


def test_filter_redacts_exception_text() -> None:
    try:
        raise ValueError("upstream said api_key=leaky-value-123")
    except ValueError:
        record = logging.LogRecord(
            "agents.test", logging.ERROR, __file__, 1, "boom", None, sys.exc_info()
        )
    RedactingFilter().filter(record)
    assert record.exc_text is not None
    assert "leaky-value-123" not in record.exc_text
    assert "ValueError" in record.exc_text


@pytest.mark.parametrize(
    "text",
    [
        # a Celery task id whose hex run holds a Luhn-valid stretch of digits
        "task 1253e4532015112830366f1-abcd succeeded",
        # UUIDs whose digit groups read as a Luhn-valid number with dashes
        "59555812-8644-4131-bd5b-b564da573ded",
        "trace 48343526-1195-4537-a1b2-c3d4e5f6a7b8 ended",
        # digits inside a longer token
        "sku_4111111111111111",
        "ref 4111111111111111abc",
    ],
)
def test_ids_that_contain_card_like_digits_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    ["card 4111 1111 1111 1111 ok", "card 4111-1111-1111-1111.", "amex 3782-822463-10005"],
)
def test_cards_written_in_groups_are_still_redacted(text: str) -> None:
    assert "[REDACTED]" in redact_text(text)
    assert "1111 1111" not in redact_text(text) and "822463" not in redact_text(text)
