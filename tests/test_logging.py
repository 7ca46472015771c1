"""The LOGGING configuration: a 403 is one line without a traceback, a 500 keeps its
traceback, and secrets are redacted from what the configured handler writes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def forbidden_view(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("support may not open reviews")


def crashing_view(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("database exploded; api_key=leaky-key-0099 in the error")


urlpatterns = [
    path("forbidden/", forbidden_view),
    path("crash/", crashing_view),
]


@contextmanager
def console_output() -> Iterator[io.StringIO]:
    """What the configured console handler (with its filters) writes during the block."""
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(previous)


@pytest.fixture
def user_client(django_user_model: Any) -> tuple[Client, Any]:
    user = django_user_model.objects.create_user(username="agent7", password="pw-agent7-123")
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client, user


def request_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django.request"]


def test_a_403_logs_one_line_with_path_and_user_and_no_traceback(
    user_client: tuple[Client, Any], caplog: pytest.LogCaptureFixture
) -> None:
    client, user = user_client
    with caplog.at_level(logging.INFO), console_output() as console:
        response = client.get("/forbidden/")
    assert response.status_code == 403
    records = request_records(caplog)
    assert len(records) == 1
    record = records[0]
    assert record.exc_info is None
    assert record.exc_text is None
    assert record.getMessage() == (
        f"Forbidden (Permission denied): /forbidden/ status=403 path=/forbidden/ user_id={user.pk}"
    )
    assert console.getvalue().count("\n") == 1
    assert "Traceback" not in console.getvalue()


def test_an_anonymous_403_logs_no_user(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        Client().get("/forbidden/")
    assert request_records(caplog)[0].getMessage().endswith("user_id=None")


def test_a_500_keeps_its_traceback_with_secrets_redacted(
    user_client: tuple[Client, Any], caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = user_client
    with caplog.at_level(logging.INFO), console_output() as console:
        response = client.get("/crash/")
    assert response.status_code == 500
    record = request_records(caplog)[0]
    assert record.exc_info is not None
    assert "Traceback (most recent call last)" in console.getvalue()
    assert "RuntimeError: database exploded; api_key=[REDACTED]" in console.getvalue()
    assert "leaky-key-0099" not in console.getvalue()


def test_the_console_handler_redacts_messages_arguments_and_extras() -> None:
    logger = logging.getLogger("agents.llm.openai_backend")
    with console_output() as console:
        logger.warning(
            "llm.error body=%s",
            '{"error": "Incorrect API key provided: sk-abcdefghijklmnop1234"}',
            extra={"url": "https://bob:hunter2pw@proxy.example.com/v1"},
        )
    output = console.getvalue()
    assert "llm.error body=" in output
    assert "sk-abcdefghijklmnop1234" not in output
    assert "[REDACTED]" in output


def test_other_loggers_keep_their_own_status_code_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO), console_output() as console:
        logging.getLogger("agents.llm.openai_backend").warning(
            "llm.error", extra={"status_code": 401}
        )
    assert "llm.error\n" in console.getvalue()
