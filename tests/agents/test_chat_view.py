"""The chat page: login required, bad input re-rendered with errors, runs listed."""

from __future__ import annotations

from typing import Any

import pytest

from config.content_security import directives
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


def _chat_run(agent: Any, user: Any, session_id: str, query: str) -> Trace:
    from traces.services import trace_create

    return trace_create(
        agent_id=agent.pk,
        query=query,
        llm_backend="simulated",
        created_by_id=user.pk,
        session_id=session_id,
        source="chat",
    )


def test_the_history_lists_only_the_users_own_conversations(
    client: Any, support_user: Any, support_agent: Any, support_user2: Any
) -> None:
    other = support_user2
    _chat_run(support_agent, support_user, "s-mine-1", "First question of mine")
    _chat_run(support_agent, support_user, "s-mine-1", "Follow-up of mine")
    _chat_run(support_agent, support_user, "s-mine-2", "Another conversation of mine")
    _chat_run(support_agent, other, "s-theirs", "Their private question")
    client.force_login(support_user)
    page = client.get("/").content.decode()
    assert "First question of mine" in page and "Another conversation of mine" in page
    assert "2 questions" in page
    assert "Follow-up of mine" not in page  # a conversation is named by its first question
    assert "Their private question" not in page and "s-theirs" not in page


def test_opening_a_conversation_continues_it(
    client: Any, support_user: Any, support_agent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _chat_run(support_agent, support_user, "s-old", "Where is #W0000001?")
    client.force_login(support_user)
    response = client.get("/conversations/s-old/")
    assert response.status_code == 302 and response["Location"] == "/"
    assert "Where is #W0000001?" in client.get("/").content.decode()
    with django_capture_on_commit_callbacks():
        client.post("/", {"query": "And when will it arrive?"})
    assert Trace.objects.filter(session_id="s-old").count() == 2


def test_nobody_opens_another_users_conversation(
    client: Any, support_user: Any, support_agent: Any, support_user2: Any
) -> None:
    other = support_user2
    _chat_run(support_agent, other, "s-theirs", "Their private question")
    client.force_login(support_user)
    assert client.get("/conversations/s-theirs/").status_code == 404
    assert "Their private question" not in client.get("/").content.decode()


def test_a_new_conversation_starts_empty(
    client: Any, support_user: Any, support_agent: Any
) -> None:
    client.force_login(support_user)
    client.get("/")
    _chat_run(support_agent, support_user, client.session["chat_session"], "Old question")
    assert client.post("/conversations/new/").status_code == 302
    page = client.get("/").content.decode()
    assert "No questions yet in this conversation." in page
    assert "Old question" in page  # still listed in the history


@pytest.mark.parametrize("conversations", [1, 6])
def test_the_chat_page_query_count_does_not_grow_with_the_history(
    client: Any,
    support_user: Any,
    support_agent: Any,
    django_assert_num_queries: Any,
    conversations: int,
) -> None:
    client.force_login(support_user)
    client.get("/")
    session_id = client.session["chat_session"]
    for n in range(conversations):
        _chat_run(support_agent, support_user, f"s-{n}", f"question {n}")
    for n in range(3):
        _chat_run(support_agent, support_user, session_id, f"in this one {n}")
    # session, user, its two permission lookups, runs, their steps, history
    with django_assert_num_queries(7):
        client.get("/")


@pytest.mark.parametrize("htmx", [True, False])
def test_hand_over_records_the_takeover(
    client: Any, support_user: Any, support_agent: Any, htmx: bool
) -> None:
    run = _chat_run(support_agent, support_user, "s1", "Refund please")
    Trace.objects.filter(pk=run.pk).update(status="finished", final_answer="Sure.")
    client.force_login(support_user)
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(f"/runs/{run.pk}/handover/", {"next": "/"}, headers=headers)
    run.refresh_from_db()
    assert run.handed_over_at is not None and run.handed_over_by == support_user
    if htmx:
        assert "handed over" in response.content.decode()
        assert "Hand over to a human" not in response.content.decode()
    else:
        assert response.status_code == 302


def test_nobody_hands_over_a_run_they_cannot_see(
    client: Any, support_user: Any, support_agent: Any, support_user2: Any
) -> None:
    other = support_user2
    run = _chat_run(support_agent, other, "s1", "Refund please")
    client.force_login(support_user)
    assert client.post(f"/runs/{run.pk}/handover/").status_code == 404
    run.refresh_from_db()
    assert run.handed_over_at is None


def test_a_finished_answer_is_shown_once_with_copy_feedback_and_handover(
    client: Any, support_user: Any, support_agent: Any
) -> None:
    from django.utils import timezone

    from traces.models import Step

    client.force_login(support_user)
    client.get("/")
    run = _chat_run(support_agent, support_user, client.session["chat_session"], "Where is #W1?")
    Step.objects.create(
        trace=run,
        step_number=1,
        phase="final",
        response_summary="Order #W1 is on its way.",
        started_at=timezone.now(),
    )
    Trace.objects.filter(pk=run.pk).update(
        status="finished", final_answer="Order #W1 is on its way."
    )
    page = client.get("/").content.decode()
    assert page.count("Order #W1 is on its way.") == 1
    assert "data-copy=" in page and "Hand over to a human" in page
    assert 'name="rating" value="up"' in page and 'name="rating" value="down"' in page


def test_the_embed_may_be_framed_only_by_the_listed_origins(
    client: Any, support_user: Any, support_agent: Any, settings: Any
) -> None:
    settings.CHAT_EMBED_ALLOWED_ORIGINS = [
        "https://helpdesk.example.com",
        "https://x.example; script-src *",
    ]
    client.force_login(support_user)
    response = client.get("/chat/embed/")
    assert response.status_code == 200
    assert "X-Frame-Options" not in response
    policy = directives(response["Content-Security-Policy"])
    assert policy["frame-ancestors"] == "'self' https://helpdesk.example.com"
    assert policy["script-src"] == "'self'"  # the rest of the app's policy still applies
    page = response.content.decode()
    assert 'id="chat-form"' in page and 'class="topbar"' not in page


def test_the_rest_of_the_app_still_refuses_to_be_framed(client: Any, support_user: Any) -> None:
    client.force_login(support_user)
    assert client.get("/")["X-Frame-Options"] == "DENY"


def test_the_embed_without_a_session_links_to_the_login_in_a_new_tab(client: Any) -> None:
    response = client.get("/chat/embed/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "X-Frame-Options" not in response
    assert 'target="_blank"' in page and "/accounts/login/?next=/chat/embed/" in page
    assert "<form" not in page


def test_a_question_asked_in_the_embed_stays_in_the_embed(
    client: Any, support_user: Any, support_agent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(support_user)
    with django_capture_on_commit_callbacks():
        response = client.post("/chat/embed/", {"query": "Is the Aurora jacket in stock?"})
    assert response.status_code == 302 and response["Location"] == "/chat/embed/"
    assert Trace.objects.get().source == "chat"


@pytest.mark.parametrize("live", [True, False])
def test_an_unfinished_run_streams_only_when_live_events_are_on(
    client: Any, support_user: Any, support_agent: Any, settings: Any, live: bool
) -> None:
    settings.LIVE_RUN_EVENTS = live
    client.force_login(support_user)
    client.get("/")
    run = _chat_run(support_agent, support_user, client.session["chat_session"], "Where?")
    page = client.get("/").content.decode()
    assert (f'data-stream="/ws/runs/{run.pk}/"' in page) is live
    assert f'hx-get="/traces/{run.pk}/run/"' in page  # the polling fallback is always there


def test_a_support_agent_with_too_many_runs_in_flight_is_told_and_keeps_the_text(
    client: Any, support_user: Any, support_agent: Any, settings: Any
) -> None:
    from traces.services import trace_create

    settings.AGENT_RUNS_IN_FLIGHT_PER_USER = 1
    trace_create(
        agent_id=support_agent.pk,
        query="earlier",
        llm_backend="simulated",
        created_by_id=support_user.pk,
    )
    client.force_login(support_user)

    response = client.post("/", {"query": "Is the Aurora jacket in stock?"})

    page = response.content.decode()
    assert response.status_code == 200
    assert "as one user may (1)" in page and "Is the Aurora jacket in stock?" in page
    assert Trace.objects.count() == 1


def test_an_answer_shows_the_facts_it_rests_on_and_the_strategies_that_fired(
    client: Any, support_user: Any, support_agent: Any
) -> None:
    """UI.md: for every answer, which strategies fired and the step that justified each
    fact, in the chat itself (the trace page has them too)."""
    from django.utils import timezone

    from traces.models import Step
    from traces.services import trace_create

    client.force_login(support_user)
    client.get("/")  # the conversation of this session
    session_id = client.session["chat_session"]
    trace = trace_create(
        agent_id=support_agent.pk,
        query="Where is order W1?",
        llm_backend="simulated",
        session_id=session_id,
        created_by_id=support_user.pk,
    )
    now = timezone.now()
    Step.objects.create(
        trace=trace, step_number=1, phase="action", tool_name="get_order", ok=True,
        strategies_applied=[{"id": 41, "kind": "adapter"}], started_at=now,
    )  # fmt: skip
    Step.objects.create(
        trace=trace, step_number=2, phase="final", action_type="final_answer", ok=True,
        strategies_applied=[{"id": 41, "kind": "adapter"}, {"id": 42, "kind": "prompt_hint"}],
        details={"facts": [{"text": "shipped on Dec 1", "field": "status", "value": "shipped",
                            "kind": "field", "step": 1}]},
        started_at=now,
    )  # fmt: skip
    Trace.objects.filter(pk=trace.pk).update(status="finished", final_answer="It shipped.")

    page = client.get("/").content.decode()

    assert "What this answer rests on" in page
    assert "shipped on Dec 1" in page and f"/traces/{trace.pk}/#step-1" in page
    assert "S41 (adapter), S42 (prompt_hint)" in page
