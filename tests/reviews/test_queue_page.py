"""The review queue reads like a proposal, not a dict dump, and shows its evidence."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reviews.models import ReviewItem
from tests.traces.timeline_helpers import recorded_run

pytestmark = pytest.mark.django_db


def _proposal(make_strategy: Any, agent: Any, **overrides: Any) -> tuple[Any, Any]:
    evidence = recorded_run(agent, rounds=1, query="Where is order #W0000042?")
    strategy = make_strategy(status="in_review", **overrides)
    strategy.source_traces.add(evidence)
    ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)
    return strategy, evidence


@pytest.mark.parametrize(
    ("kind", "branch", "sentence"),
    [
        (
            "adapter",
            {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"},
            "Before calling get_order: in order_id, keep only its digits, as a number.",
        ),
        (
            "error_handler",
            {"tool": "get_order", "on": "TIMEOUT", "action": "handover"},
            "When get_order fails with TIMEOUT: hand the request over to a person.",
        ),
    ],
)
def test_a_proposal_reads_as_sentences_with_links_to_its_traces(
    make_strategy: Any,
    support_agent: Any,
    ops_user: Any,
    client: Any,
    kind: str,
    branch: dict[str, Any],
    sentence: str,
) -> None:
    strategy, evidence = _proposal(make_strategy, support_agent, kind=kind, branch=branch)
    client.force_login(ops_user)
    page = client.get("/reviews/").content.decode()
    assert "{'" not in page and "{&#x27;" not in page
    assert sentence in page
    assert strategy.root_cause in page
    assert f'<a class="source-trace" href="/traces/{evidence.pk}/"' in page
    # the stored branch stays one click away, as JSON
    assert "<summary>Branch as stored (JSON)</summary><pre>{\n  &quot;" in page


def test_a_replayed_hint_links_to_its_replay_run(
    make_strategy: Any, support_agent: Any, ops_user: Any, client: Any
) -> None:
    replay = recorded_run(support_agent, rounds=1)
    _proposal(
        make_strategy,
        support_agent,
        kind="prompt_hint",
        branch={"text": "Ask for the order number first"},
        replay_status="passed",
        replay_detail=f"replay run {replay.pk}: finished",
    )
    client.force_login(ops_user)
    page = client.get("/reviews/").content.decode()
    assert f'<a class="replay-run" href="/traces/{replay.pk}/">' in page


def test_a_detail_without_a_run_has_no_replay_link(make_strategy: Any) -> None:
    strategy = make_strategy(replay_detail=f"the rule rejects {uuid.uuid4()} before the call")
    assert strategy.replay_trace_id is None


def test_queue_query_count_does_not_grow_with_items(
    make_strategy: Any, support_agent: Any, ops_user: Any, client: Any
) -> None:
    client.force_login(ops_user)
    counts = []
    for items in (1, 8):
        while ReviewItem.objects.count() < items:
            strategy, _ = _proposal(make_strategy, support_agent)
            strategy.source_traces.add(recorded_run(support_agent, rounds=1))
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/reviews/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.parametrize("status", ["open", "rejected"])
def test_the_queue_pages_past_its_first_hundred_items_without_skipping_any(
    client: Any, ops_user: Any, status: str
) -> None:
    """Before, it showed the first 100 and said nothing of the rest."""
    import re
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    items = ReviewItem.objects.bulk_create(
        ReviewItem(
            error_signature=f"TIMEOUT|tool_{i}",
            reason=ReviewItem.Reason.NEGATIVE_FEEDBACK,
            status=status,
        )
        for i in range(105)
    )
    # Two items share a creation time: the keyset still orders and pages them apart.
    for i, item in enumerate(items):
        ReviewItem.objects.filter(pk=item.pk).update(
            created_at=now - timedelta(minutes=105 - min(i, 103))
        )
    client.force_login(ops_user)

    seen: list[int] = []
    url = f"/reviews/?status={status}"
    pages = 0
    while url:
        page = client.get(url).content.decode()
        seen += [int(pk) for pk in re.findall(r'id="review-(\d+)"', page)]
        pages += 1
        more = re.search(r'href="\?([^"]+)" rel="next"', page)
        url = f"/reviews/?{more.group(1).replace('&amp;', '&')}" if more else ""
    expected = sorted(
        items, key=lambda item: (ReviewItem.objects.get(pk=item.pk).created_at, item.pk)
    )
    if status == "rejected":  # decided: newest first
        expected.reverse()
    assert pages == 2 and seen == [item.pk for item in expected]
    assert "The last items." in page and "First 100" in page


@pytest.mark.parametrize("after", ["\u00b2", "abc", "-1", "9" * 30, "999999"])
def test_a_queue_cursor_that_is_not_an_item_shows_the_first_page(
    client: Any, ops_user: Any, after: str
) -> None:
    """A digit that int() refuses (superscript two) was a 500."""
    ReviewItem.objects.create(
        error_signature="TIMEOUT|get_order", reason=ReviewItem.Reason.NEGATIVE_FEEDBACK
    )
    client.force_login(ops_user)
    response = client.get("/reviews/", {"after": after})
    assert response.status_code == 200
    assert 'id="review-' in response.content.decode()
