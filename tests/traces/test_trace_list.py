"""The trace list: free-text search in the URL, a card per row on narrow screens, and a
query count that does not grow with the rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.traces.timeline_helpers import recorded_run
from traces.models import Trace

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("parcel", {"Where is my parcel?"}),
        ("PARCEL", {"Where is my parcel?"}),
        ("refund issued", {"Can I get my money back?"}),  # found in the final answer
        ("  ", {"Where is my parcel?", "Can I get my money back?"}),
        ("nothing like this", set()),
    ],
)
def test_free_text_matches_the_query_or_the_final_answer(
    support_agent: Any, ops_user: Any, client: Any, text: str, expected: set[str]
) -> None:
    recorded_run(support_agent, rounds=1, query="Where is my parcel?")
    refund = recorded_run(support_agent, rounds=1, query="Can I get my money back?")
    Trace.objects.filter(pk=refund.pk).update(final_answer="A refund issued on 3 May.")
    client.force_login(ops_user)
    response = client.get("/traces/", {"q": text})
    shown = {t.query for t in response.context["page"]}
    assert shown == expected


def test_the_search_box_keeps_its_text_and_the_pager_carries_it(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    for _ in range(51):
        recorded_run(support_agent, rounds=1, query="Where is my parcel?")
    client.force_login(ops_user)
    page = client.get("/traces/", {"q": "parcel & co"}).content.decode()
    assert 'name="q" value="parcel &amp; co"' in page
    page = client.get("/traces/", {"q": "parcel"}).content.decode()
    assert '&q=parcel">older' in page


def test_rows_label_their_cells_for_the_narrow_card_layout(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    recorded_run(support_agent, rounds=1)
    client.force_login(ops_user)
    page = client.get("/traces/").content.decode()
    assert '<table class="table cards trace-table">' in page
    for label in ("When", "Query", "Status", "Outcome", "Error type", "Steps", "Latency"):
        assert f'data-label="{label}"' in page


def test_an_empty_result_says_what_to_do_next(ops_user: Any, client: Any) -> None:
    client.force_login(ops_user)
    page = client.get("/traces/", {"q": "zebra"}).content.decode()
    assert "No traces match “zebra”" in page and "clear them all" in page


def test_list_query_count_does_not_grow_with_rows(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    client.force_login(ops_user)
    counts = []
    for _ in range(2):
        # each pass adds rows: 3 traces, then 3 + 20
        for _ in range(3 if not counts else 20):
            recorded_run(support_agent, rounds=2)
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/traces/", {"q": "Where"}).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    ("params", "kept"),
    [
        ({"since": "0001-01-01T00:00:00+14:00"}, {"since": ""}),
        ({"until": "9999-12-31T23:59:59-14:00"}, {"until": ""}),
        ({"since": "2026-01-01T00:00:00+02:00"}, {"since": "2026-01-01T00:00:00+02:00"}),
        (
            {"endpoint": "127.0.0.1:8001/sandbox/api/skus/{id}{id}{id}{id}{id}{id}{id}{id}x"},
            {"endpoint": ""},
        ),
        (
            {"endpoint": "127.0.0.1:8001/sandbox/api/orders/{id}"},
            {"endpoint": "127.0.0.1:8001/sandbox/api/orders/{id}"},
        ),
    ],
    ids=["year-1-east", "year-9999-west", "a-plain-date", "placeholders-in-one-segment", "label"],
)
def test_filters_no_label_or_date_can_reach_are_dropped_not_a_500(
    support_agent: Any, ops_user: Any, client: Any, params: dict[str, str], kept: dict[str, str]
) -> None:
    """A date past either end of the calendar in UTC, or an endpoint label with a
    placeholder inside a path segment (its regex backtracks on SQLite's ``re`` and can
    match no label ``endpoint_label`` writes), is ignored like any other bad filter."""
    recorded_run(support_agent, rounds=1, query="Where is my parcel?")
    client.force_login(ops_user)
    response = client.get("/traces/", {"origin": "", **params})
    assert response.status_code == 200
    filters = response.context["filters"]
    for name, value in kept.items():
        assert getattr(filters, name) == value
