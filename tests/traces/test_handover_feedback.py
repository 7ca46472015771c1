"""Handover and thumbs up/down on a run, and the live status event they send."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from traces.live import run_group
from traces.models import Feedback, Trace
from traces.services import trace_create, trace_feedback_record, trace_handover

pytestmark = pytest.mark.django_db

# Bounds a hung test only.
RECEIVE_TIMEOUT = 10


@pytest.fixture
def run(support_agent: Any, support_user: Any) -> Trace:
    return trace_create(
        agent_id=support_agent.pk,
        query="Where is #W1?",
        llm_backend="simulated",
        created_by_id=support_user.pk,
    )


def test_a_handover_is_recorded_once_with_who_and_when(
    run: Trace, support_user: Any, support_user2: Any
) -> None:
    other = support_user2
    first = trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    again = trace_handover(trace_id=str(run.pk), user_id=other.pk)
    run.refresh_from_db()
    assert run.handed_over_at is not None
    assert run.handed_over_at == first.handed_over_at == again.handed_over_at
    assert run.handed_over_by == support_user
    assert Trace.objects.filter(handed_over_at__isnull=False).count() == 1


def test_a_handover_tells_the_runs_listeners_after_commit(
    run: Trace, support_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(run_group(run.pk), channel)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    assert len(callbacks) == 1
    message = async_to_sync(layer.receive)(channel)
    assert message == {"type": "run.status", "trace_id": str(run.pk), "status": "queued"}


def test_a_second_handover_sends_nothing(
    run: Trace, support_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    with django_capture_on_commit_callbacks() as callbacks:
        trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    assert callbacks == []


@pytest.mark.parametrize(
    ("votes", "turned_down"),
    [
        (["up"], [False]),
        (["down"], [True]),
        (["down", "down"], [True, False]),
        (["down", "up", "down"], [True, False, True]),
        (["up", "down"], [False, True]),
    ],
)
def test_feedback_keeps_the_latest_vote_and_says_when_it_turned_down(
    run: Trace, support_user: Any, votes: list[str], turned_down: list[bool]
) -> None:
    results = [
        trace_feedback_record(trace_id=str(run.pk), user_id=support_user.pk, rating=vote)[1]
        for vote in votes
    ]
    assert results == turned_down
    feedback = Feedback.objects.get(trace=run)
    assert feedback.rating == votes[-1] and feedback.user == support_user


def test_a_thumbs_down_on_one_run_does_not_hide_the_next_run_s(
    run: Trace, support_agent: Any, support_user: Any, caplog: pytest.LogCaptureFixture
) -> None:
    other = trace_create(agent_id=support_agent.pk, query="And #W2?", llm_backend="simulated")
    caplog.set_level("INFO", logger="traces.services")
    # the same person turns down two different runs: each is a new thumbs-down
    assert trace_feedback_record(trace_id=str(run.pk), user_id=support_user.pk, rating="down")[1]
    assert trace_feedback_record(trace_id=str(other.pk), user_id=support_user.pk, rating="down")[1]
    assert Feedback.objects.filter(user=support_user).count() == 2
    logged = [r for r in caplog.records if r.getMessage() == "trace.feedback"]
    assert [(r.trace_id, r.user_id, r.rating) for r in logged] == [  # type: ignore[attr-defined]
        (str(run.pk), support_user.pk, "down"),
        (str(other.pk), support_user.pk, "down"),
    ]


def test_an_unknown_rating_is_refused(run: Trace, support_user: Any) -> None:
    with pytest.raises(ValueError):
        trace_feedback_record(trace_id=str(run.pk), user_id=support_user.pk, rating="meh")
    assert not Feedback.objects.exists()


def test_the_trace_page_shows_the_handover_and_each_persons_vote(
    client: Any, run: Trace, support_user: Any, support_user2: Any, ops_user: Any
) -> None:
    trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    trace_feedback_record(trace_id=str(run.pk), user_id=support_user.pk, rating="up")
    trace_feedback_record(trace_id=str(run.pk), user_id=support_user2.pk, rating="down")
    run.refresh_from_db()
    client.force_login(ops_user)
    page = client.get(run.get_absolute_url()).content.decode()
    assert f"handed over to a person {run.handed_over_at:%Y-%m-%d %H:%M}" in page
    assert f"by {support_user.username}" in page
    assert f"helpful ({support_user.username})" in page
    assert f"not helpful ({support_user2.username})" in page


def _handovers() -> int:
    from django.db.models import Sum

    from traces.models import RunRollupDaily, RunRollupHourly

    hourly = RunRollupHourly.objects.aggregate(n=Sum("handovers"))["n"] or 0
    daily = RunRollupDaily.objects.aggregate(n=Sum("handovers"))["n"] or 0
    assert hourly == daily
    return hourly


@pytest.mark.parametrize(
    ("outcome", "expected"), [("answered_from_data", 1), ("handed_over", 1), ("", 1)]
)
def test_a_handover_counts_once_toward_the_takeover_kpi_even_after_a_rebuild(
    run: Trace, support_user: Any, outcome: str, expected: int
) -> None:
    from traces.rollups import rollups_rebuild
    from traces.services import trace_finish

    status = "fallback" if outcome == "handed_over" else "finished"
    trace_finish(trace_id=str(run.pk), status=status, final_answer="x", outcome=outcome)
    trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    trace_handover(trace_id=str(run.pk), user_id=support_user.pk)
    assert _handovers() == expected
    run.refresh_from_db()
    rollups_rebuild(since=run.finished_at)
    assert _handovers() == expected
