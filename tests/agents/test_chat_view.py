"""The chat page: login required, bad input re-rendered with errors, runs listed."""

from __future__ import annotations

from typing import Any

import pytest

from traces.models import Trace

pytestmark = pytest.mark.django_db


def test_chat_requires_login(client: Any) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_posting_a_question_starts_a_run_in_this_session(
    client: Any, support_user: Any, support_agent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(support_user)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/", {"query": "Is the Aurora jacket in stock?"})
    assert response.status_code == 302
    trace = Trace.objects.get()
    assert trace.source == "chat" and trace.created_by == support_user
    assert len(callbacks) == 1
    page = client.get("/")
    assert "Is the Aurora jacket in stock?" in page.content.decode()
    assert "simulated" in page.content.decode()


@pytest.mark.parametrize("payload", [{"query": ""}, {"query": "hi", "customer_id": "<script>"}])
def test_bad_chat_input_shows_errors_and_keeps_the_text(
    client: Any, support_user: Any, support_agent: Any, payload: dict
) -> None:
    client.force_login(support_user)
    response = client.post("/", payload)
    assert response.status_code == 200
    assert Trace.objects.count() == 0
    assert "errorlist" in response.content.decode()


def test_a_too_long_question_is_refused_with_a_message_and_kept(
    client: Any, ops_user: Any, support_agent: Any, settings: Any
) -> None:
    settings.AGENT_QUERY_MAX_CHARS = 30
    question = "Where is my order #W1001549? " + "x" * 10
    client.force_login(ops_user)

    response = client.post("/", {"query": question})

    page = response.content.decode()
    assert response.status_code == 200
    assert Trace.objects.count() == 0
    assert "The question is 39 characters long; the limit is 30." in page
    assert f"{question}</textarea>" in page
    # A maxlength attribute would let the browser cut the question silently.
    assert "maxlength" not in page


def test_a_question_at_the_limit_is_asked(
    client: Any, ops_user: Any, support_agent: Any, settings: Any
) -> None:
    settings.AGENT_QUERY_MAX_CHARS = 30
    client.force_login(ops_user)

    response = client.post("/", {"query": "y" * 30})

    assert response.status_code == 302
    assert Trace.objects.get().query == "y" * 30
