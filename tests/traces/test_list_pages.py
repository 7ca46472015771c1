"""List pages that hold at scale: the trace list reads stored totals (no query on Steps),
pages without a full count, the API's `ordering` whitelist, and every filter still filters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from config import api_pagination
from traces.models import Step, Trace
from traces.services import trace_create, trace_finish

pytestmark = pytest.mark.django_db


def _trace(agent: Any, *, minutes_ago: int, query: str = "Where?", **fields: Any) -> Trace:
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="simulated")
    fields.setdefault("status", Trace.Status.FINISHED)
    fields.setdefault("policy_bucket", 50)  # not the id's own: the bucket filter must be exact
    Trace.objects.filter(pk=trace.pk).update(
        created_at=timezone.now() - timedelta(minutes=minutes_ago), **fields
    )
    return Trace.objects.get(pk=trace.pk)


def _step(trace: Trace, number: int, **fields: Any) -> Step:
    return Step.objects.create(
        trace=trace, step_number=number, phase="action", started_at=timezone.now(), **fields
    )


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_trace_list_issues_no_query_on_steps_and_shows_stored_failed_steps(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    ended = trace_create(agent_id=support_agent.pk, query="ended", llm_backend="simulated")
    _step(ended, 1, ok=False, error_type="TIMEOUT")
    _step(ended, 2, ok=False, error_type="TIMEOUT")
    _step(ended, 3)
    trace_finish(trace_id=str(ended.pk), status="failed", final_answer="", error_type="TIMEOUT")
    running = trace_create(agent_id=support_agent.pk, query="running", llm_backend="simulated")
    _step(running, 1, ok=False, error_type="TIMEOUT")
    assert Trace.objects.get(pk=ended.pk).failed_steps == 2

    client.force_login(ops_user)
    for params in ({}, {"error_type": "TIMEOUT"}, {"status": "failed"}, {"q": "end"}):
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/traces/", params)
        assert response.status_code == 200
        on_steps = [q["sql"] for q in queries.captured_queries if "traces_step" in q["sql"]]
        assert on_steps == [], params
        assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
    page = client.get("/traces/").content.decode()
    assert '<span class="err">2</span>' in page  # the stored total of the ended run
    assert 'title="counted when the run ends"' in page  # the running one: not counted yet


def test_the_trace_list_pages_newest_first_without_skipping_or_repeating(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    moment = timezone.now() - timedelta(hours=1)
    made = [trace_create(agent_id=support_agent.pk, query="q", llm_backend="s") for _ in range(55)]
    # Equal creation times: the id must break the tie for pages to be stable.
    Trace.objects.filter(pk__in=[t.pk for t in made]).update(created_at=moment)
    client.force_login(ops_user)
    first = client.get("/traces/")
    second = client.get("/traces/", {"page": "2"})
    third = client.get("/traces/", {"page": "3"})
    ids = [t.pk for t in first.context["page"]] + [t.pk for t in second.context["page"]]
    assert len(ids) == len(set(ids)) == 55
    assert sorted(ids, reverse=True) == ids  # -created_at (all equal), then -id
    assert first.context["page"].has_next and not second.context["page"].has_next
    assert "older →" in first.content.decode() and "older →" not in second.content.decode()
    assert "← newer" in second.content.decode()
    assert list(third.context["page"]) == []
    assert [t.pk for t in client.get("/traces/", {"page": "x"}).context["page"]] == ids[:50]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"error_type": "TIMEOUT"}, {"timeout"}),
        ({"status": "failed"}, {"timeout"}),  # customers only by default
        ({"status": "failed", "origin": "all"}, {"timeout", "replay-failed"}),
        ({"origin": "replay"}, {"replay-failed"}),
        ({"outcome": "handed_over"}, {"handed"}),
        ({"tool": "get_price"}, {"priced"}),
        ({"step_error": "RATE_LIMITED"}, {"handed"}),
        ({"policy_version": "v2"}, {"priced"}),
        ({"bucket": "1"}, {"timeout"}),
        ({"q": "parcel"}, {"timeout"}),
        ({}, {"timeout", "handed", "priced"}),
    ],
)
def test_each_trace_list_filter_still_filters(
    support_agent: Any, ops_user: Any, client: Any, params: dict[str, str], expected: set[str]
) -> None:
    timeout = _trace(
        support_agent,
        minutes_ago=1,
        query="timeout parcel",
        status="failed",
        error_type="TIMEOUT",
        outcome="failed",
        policy_bucket=3,
    )
    handed = _trace(
        support_agent, minutes_ago=2, query="handed", status="fallback", outcome="handed_over"
    )
    priced = _trace(support_agent, minutes_ago=3, query="priced", policy_version="v2")
    _trace(
        support_agent,
        minutes_ago=4,
        query="replay-failed",
        status="failed",
        origin=Trace.Origin.REPLAY,
        policy_bucket=60,
    )
    _step(timeout, 1, ok=False, error_type="TIMEOUT", tool_name="get_order")
    _step(handed, 1, ok=False, error_type="RATE_LIMITED", tool_name="get_order")
    _step(priced, 1, tool_name="get_price")
    client.force_login(ops_user)
    response = client.get("/traces/", params)
    assert {t.query.split()[0] for t in response.context["page"]} == expected


@pytest.mark.parametrize("step_error", ["RATE_LIMITED", "any"])
def test_the_step_error_filter_finds_ended_and_running_runs_alike(
    support_agent: Any, ops_user: Any, client: Any, step_error: str
) -> None:
    """The filter passes over ended runs that stored no failed step; a run that failed
    once, and a running one (nothing stored yet), are probed and found."""
    once = trace_create(agent_id=support_agent.pk, query="once", llm_backend="simulated")
    _step(once, 1, ok=False, error_type="RATE_LIMITED")
    _step(once, 2)
    trace_finish(trace_id=str(once.pk), status="finished", final_answer="ok", error_type="")
    running = trace_create(agent_id=support_agent.pk, query="running", llm_backend="simulated")
    _step(running, 1, ok=False, error_type="RATE_LIMITED")
    clean = trace_create(agent_id=support_agent.pk, query="clean", llm_backend="simulated")
    _step(clean, 1)
    trace_finish(trace_id=str(clean.pk), status="finished", final_answer="ok", error_type="")
    assert Trace.objects.get(pk=once.pk).failed_steps == 1

    client.force_login(ops_user)
    response = client.get("/traces/", {"step_error": step_error})

    assert response.status_code == 200
    assert {t.query for t in response.context["page"]} == {"once", "running"}


def test_the_support_user_lists_only_their_own_traces(
    support_agent: Any, support_user: Any, ops_user: Any, client: Any
) -> None:
    own = _trace(support_agent, minutes_ago=1, query="mine", created_by=support_user)
    _trace(support_agent, minutes_ago=2, query="theirs", created_by=ops_user)
    _step(own, 1, tool_name="get_order")
    client.force_login(support_user)
    assert [t.query for t in client.get("/traces/").context["page"]] == ["mine"]
    body = _api(support_user).get("/api/steps/", {"tool": "get_order"}).json()
    assert [row["trace"] for row in body["results"]] == [str(own.pk)]


def test_api_pages_follow_next_and_previous_links_in_a_stable_order(
    support_agent: Any, ops_user: Any
) -> None:
    made = [_trace(support_agent, minutes_ago=i // 2) for i in range(7)]  # pairs share a time
    api = _api(ops_user)
    seen: list[str] = []
    url: str | None = "/api/traces/?limit=3"
    pages = []
    while url:
        body = api.get(url).json()
        pages.append(body)
        seen += [row["id"] for row in body["results"]]
        url = body["next"]
    assert len(pages) == 3 and sorted(seen) == sorted(str(t.pk) for t in made)
    assert len(seen) == len(set(seen))
    assert all(page["count"] == 7 and page["count_exact"] for page in pages)
    assert pages[0]["previous"] is None
    back = api.get(pages[2]["previous"]).json()
    assert [row["id"] for row in back["results"]] == seen[3:6]
    assert parse_qs(urlparse(pages[1]["next"]).query)["offset"] == ["6"]


def test_api_count_is_an_estimate_past_the_cap(
    support_agent: Any, ops_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_pagination, "EXACT_COUNT_CAP", 3)
    for i in range(6):
        _trace(support_agent, minutes_ago=i)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_trace")
    body = _api(ops_user).get("/api/traces/", {"limit": "2"}).json()
    assert body["count_exact"] is False
    assert body["count"] >= 4  # never below the rows known to exist
    assert body["next"] is not None
    last = _api(ops_user).get("/api/traces/", {"limit": "2", "offset": "4"}).json()
    assert (last["count"], last["count_exact"], last["next"]) == (6, True, None)


def test_api_skips_even_the_capped_count_when_the_planner_expects_far_more(
    support_agent: Any, ops_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_pagination, "EXACT_COUNT_CAP", 5)  # estimates trusted above 50
    for i in range(60):
        _trace(support_agent, minutes_ago=i, status="failed" if i < 3 else "finished")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_trace")

    def counts(params: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
        with CaptureQueriesContext(connection) as queries:
            body = _api(ops_user).get("/api/traces/", params).json()
        return body, [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]

    body, count_queries = counts({"limit": "2"})
    assert (body["count_exact"], count_queries) == (False, [])
    assert body["count"] >= 3 and body["next"] is not None
    # Where the planner expects few rows, the capped count still gives the exact number.
    body, count_queries = counts({"limit": "1", "status": "failed"})
    assert (body["count"], body["count_exact"], len(count_queries)) == (3, True, 1)


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        (None, ["new", "mid", "old"]),
        ("-created_at", ["new", "mid", "old"]),
        ("created_at", ["old", "mid", "new"]),
        ("total_latency_ms", ["mid", "new", "old"]),
        ("-total_latency_ms", ["old", "new", "mid"]),
    ],
)
def test_the_traces_api_honours_ordering(
    support_agent: Any, ops_user: Any, ordering: str | None, expected: list[str]
) -> None:
    _trace(support_agent, minutes_ago=1, query="new", total_latency_ms=200)
    _trace(support_agent, minutes_ago=2, query="mid", total_latency_ms=100)
    _trace(support_agent, minutes_ago=3, query="old", total_latency_ms=300)
    params = {"ordering": ordering} if ordering else {}
    body = _api(ops_user).get("/api/traces/", params).json()
    assert [row["query"] for row in body["results"]] == expected


def test_the_steps_api_honours_ordering_and_its_filters(support_agent: Any, ops_user: Any) -> None:
    trace = _trace(support_agent, minutes_ago=1)
    first = _step(trace, 1, tool_name="get_order")
    second = _step(trace, 2, tool_name="get_price", ok=False, error_type="TIMEOUT")
    api = _api(ops_user)

    def ids(**params: str) -> list[int]:
        return [row["id"] for row in api.get("/api/steps/", params).json()["results"]]

    assert ids(ordering="created_at") == [first.pk, second.pk]
    assert ids(ordering="-created_at") == [second.pk, first.pk]
    assert ids(tool="get_price") == [second.pk]
    assert ids(error_type="TIMEOUT") == [second.pk]
    assert ids(trace=str(trace.pk), ordering="created_at") == [first.pk, second.pk]


@pytest.mark.parametrize("path", ["/api/traces/", "/api/steps/"])
@pytest.mark.parametrize("ordering", ["query", "-id", "steps__latency_ms", ""])
def test_an_unknown_ordering_is_a_400_that_names_the_choices(
    ops_user: Any, path: str, ordering: str
) -> None:
    response = _api(ops_user).get(path, {"ordering": ordering})
    assert response.status_code == 400
    message = response.json()["ordering"][0]
    assert "is not an ordering of this list" in message or "blank" in message
    if ordering:
        assert "Use one of: -created_at, created_at" in message


def test_every_trace_list_filter_and_the_search_have_an_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('traces_trace', 'traces_step')"
        )
        names = {row[0] for row in cursor.fetchall()}
    for name in (
        "trace_status_time",
        "trace_outcome_time",
        "trace_origin_time",
        "trace_error_time",
        "trace_owner_time",
        "trace_agent_time",
        "trace_version_time",
        "trace_bucket_time",
        "trace_latency",
        "trace_query_trgm",
        "trace_final_answer_trgm",
        "step_error_time",
        "step_tool_time",
        "step_time",
        "step_failed_by_trace",
    ):
        assert name in names


# A non-unique, unconditional B-tree index on columns that lead another B-tree index, and
# every LIKE (pattern_ops) index: on the tables every run and every ingest writes.
_REDUNDANT_INDEXES = """
WITH idx AS (
    SELECT c.relname AS tbl, i.relname AS name, x.indisunique AS uniq,
           x.indpred IS NOT NULL OR x.indexprs IS NOT NULL AS special,
           am.amname = 'btree' AS btree,
           string_to_array(x.indkey::text, ' ')::int2[] AS cols,  -- 1-based, unlike indkey
           EXISTS (SELECT 1 FROM unnest(x.indclass) oc JOIN pg_opclass o ON o.oid = oc
                   WHERE o.opcname LIKE '%%pattern_ops') AS pattern
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_class c ON c.oid = x.indrelid
    JOIN pg_am am ON am.oid = i.relam
    WHERE c.relname = ANY(%s)
)
SELECT a.name, 'leads ' || b.name FROM idx a JOIN idx b ON a.tbl = b.tbl AND a.name <> b.name
WHERE a.btree AND b.btree AND NOT a.uniq AND NOT a.special AND NOT b.special
  AND NOT a.pattern AND NOT b.pattern
  AND cardinality(a.cols) <= cardinality(b.cols) AND a.cols = b.cols[1:cardinality(a.cols)]
UNION ALL
SELECT name, 'pattern_ops' FROM idx WHERE pattern
"""


def test_the_trace_and_step_tables_carry_no_index_another_one_already_provides() -> None:
    """Each index is work on every row written (Trace had 26, Step 9): none may repeat
    another's leading columns, and none serves LIKE, which no query uses on them."""
    with connection.cursor() as cursor:
        cursor.execute(_REDUNDANT_INDEXES, [["traces_trace", "traces_step"]])
        redundant = cursor.fetchall()
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('traces_trace', 'traces_step')"
        )
        names = {row[0] for row in cursor.fetchall()}
    assert redundant == []
    # The lookups those indexes served still have one: by query hash, session, customer,
    # idempotency key (unique), agent, owner, status and a step's trace.
    assert {
        "trace_query_hash",
        "trace_session",
        "trace_customer",
        "step_idempotency_key",
        "trace_agent_time",
        "trace_owner_time",
        "trace_status_time",
        "step_unique_number",
    } <= names


def test_a_step_idempotency_key_stays_unique(support_agent: Any) -> None:
    from django.db import IntegrityError, transaction

    trace = _trace(support_agent, minutes_ago=1)
    _step(trace, 1, idempotency_key="k-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        _step(trace, 2, idempotency_key="k-1")
    _step(trace, 2, idempotency_key=None)
    _step(trace, 3, idempotency_key=None)  # no key: any number of steps
