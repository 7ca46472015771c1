"""The overview and failures dashboards and their JSON: figures from the rollups only, a
fixed number of queries however many rows there are, and drill-downs to the traces."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.dashboard import dashboard_data_fill
from policies.models import Strategy
from policies.services import strategy_activate
from tests.policies.conftest import make_strategy  # noqa: F401
from traces.dashboards import window_resolve
from traces.models import RunRollupHourly, Step, StepRollupHourly, Trace
from traces.rollups import hour_of, rollups_rebuild
from traces.services import trace_create

pytestmark = pytest.mark.django_db

PAGES = ["/dashboards/?window=7d", "/dashboards/failures/?window=7d"]
JSON = [
    "/dashboards/data/kpis.json?window=7d",
    "/dashboards/data/runs.json?window=24h",
    "/dashboards/data/failures.json?window=7d",
    "/dashboards/data/failures.json?window=30d",
    "/dashboards/data/breakdown.json?window=7d&by=tool",
    "/dashboards/data/breakdown.json?window=7d&by=endpoint",
    "/dashboards/data/breakdown.json?window=30d&by=policy_version",
]


def run_row(period_start: datetime, **counts: Any) -> RunRollupHourly:
    values: dict[str, Any] = {
        "period_start": period_start,
        "origin": "customer",
        "agent_id": 1,
        "policy_version": "v1",
        "bucket_band": 0,
        "error_type": "",
    }
    values.update(counts)
    return RunRollupHourly.objects.create(**values)


def step_row(period_start: datetime, **values: Any) -> StepRollupHourly:
    row: dict[str, Any] = {
        "period_start": period_start,
        "origin": "customer",
        "agent_id": 1,
        "policy_version": "v1",
        "bucket_band": 0,
        "tool_name": "get_order",
        "endpoint": "shop.test/orders/{id}",
        "error_type": "TIMEOUT",
        "steps": 1,
        "failed_steps": 1,
    }
    row.update(values)
    return StepRollupHourly.objects.create(**row)


@pytest.fixture
def ops_client(client: Client, ops_user: Any) -> Client:
    client.force_login(ops_user)
    return client


@pytest.mark.parametrize("path", PAGES + JSON)
def test_support_agents_are_refused_and_ops_let_in(
    path: str, client: Client, support_user: Any, ops_user: Any
) -> None:
    client.force_login(support_user)
    assert client.get(path).status_code == 403
    client.force_login(ops_user)
    assert client.get(path).status_code == 200


def test_each_kpi_is_compared_with_the_window_before(ops_client: Client) -> None:
    now = hour_of(timezone.now())
    # Of the 10 runs in the window, 2 ended with an error type; of the 4 before, 1.
    run_row(now - timedelta(hours=2), error_type="TIMEOUT", runs=2)
    run_row(now - timedelta(days=8), error_type="TIMEOUT", runs=1)
    run_row(
        now - timedelta(hours=2),
        runs=8,
        successes=8,
        first_response_successes=6,
        action_steps=25,
        resolution_ms_sum=40_000,
        handovers=1,
        tokens=5000,
        cost_usd=Decimal("0.5"),
    )
    run_row(
        now - timedelta(days=8),
        runs=3,
        successes=2,
        first_response_successes=1,
        action_steps=16,
        resolution_ms_sum=40_000,
        handovers=2,
        tokens=1000,
        cost_usd=Decimal("0.1"),
    )
    run_row(now - timedelta(hours=1), origin="replay", runs=50, successes=0)

    kpis = {k["key"]: k for k in ops_client.get("/dashboards/data/kpis.json").json()["kpis"]}

    got = {key: (k["value"], k["previous"], k["trend"]) for key, k in kpis.items()}
    assert got == {
        "runs": (10, 4, "better"),
        "success_rate": (80, 50, "better"),
        "error_rate": (20, 25, "better"),
        "first_response_success_rate": (60, 25, "better"),
        "mean_action_steps": (2.5, 4, "better"),
        "mean_resolution_s": (4, 10, "better"),
        "takeover_rate": (10, 50, "better"),
        "tokens": (5000, 1000, "worse"),
        "cost_usd": (0.5, 0.1, "worse"),
    }
    # On the page the arrow says which way the figure went, the colour whether that is
    # good: tokens went up (▲), which is worse; the error rate went down (▼), better.
    page = ops_client.get("/dashboards/").content.decode()
    trend = re.compile(r'data-kpi="(\w+)".*?<div class="kpi-trend (\w*)"[^>]*>(.)', re.S)
    shown = {key: (css, arrow) for key, css, arrow in trend.findall(page)}
    assert shown["tokens"] == ("worse", "▲")
    assert shown["error_rate"] == ("better", "▼")
    assert shown["runs"] == ("better", "▲")


def test_new_error_types_show_the_time_to_an_approved_strategy(
    ops_client: Client,
    make_strategy: Any,  # noqa: F811
) -> None:
    now = hour_of(timezone.now())
    step_row(now - timedelta(days=20), error_type="TIMEOUT")  # known long before
    step_row(now - timedelta(hours=2), error_type="TIMEOUT")
    first_seen = now - timedelta(hours=30)
    step_row(first_seen, error_type="UNAUTHORIZED")
    from traces.models import StepRollupDaily

    for row in StepRollupHourly.objects.all():
        StepRollupDaily.objects.create(
            **{f: getattr(row, f) for f in (*StepRollupHourly.KEY, *StepRollupHourly.COUNTERS)}
            | {"period_start": row.period_start.replace(hour=0)}
        )
    strategy = make_strategy(error_type="UNAUTHORIZED", status="in_review")
    with mock.patch("django.utils.timezone.now", return_value=first_seen + timedelta(hours=6)):
        strategy_activate(strategy=strategy, author_kind="reviewer")

    data = ops_client.get("/dashboards/data/kpis.json?window=7d").json()
    page = ops_client.get("/dashboards/?window=7d").content.decode()

    assert [item["error_type"] for item in data["new_error_types"]] == ["UNAUTHORIZED"]
    assert data["mean_hours_to_approval"] == 6.0
    assert "UNAUTHORIZED" in page and "6.0 h" in page


def test_a_type_whose_approved_strategy_was_deprecated_says_nothing_covers_it_now(
    ops_client: Client,
    make_strategy: Any,  # noqa: F811
) -> None:
    """The approval stays history (its time to approval still counts), but the page no
    longer reads as if a strategy covered the type."""
    now = hour_of(timezone.now())
    first_seen = now - timedelta(hours=10)
    step_row(first_seen, error_type="UNAUTHORIZED")
    step_row(first_seen, error_type="TIMEOUT")
    approved = first_seen + timedelta(hours=2)
    for error_type, tool in (("UNAUTHORIZED", "get_order"), ("TIMEOUT", "get_sku")):
        strategy = make_strategy(
            error_type=error_type,
            status="in_review",
            branch={"tool": tool, "field": "order_id", "transform": "digits_to_int"},
        )
        with mock.patch("django.utils.timezone.now", return_value=approved):
            strategy_activate(strategy=strategy, author_kind="reviewer", at_once=True)
    Strategy.objects.filter(error_type="UNAUTHORIZED").update(status=Strategy.Status.DEPRECATED)

    data = ops_client.get("/dashboards/data/kpis.json?window=24h").json()
    page = ops_client.get("/dashboards/?window=24h").content.decode()

    by_type = {item["error_type"]: item for item in data["new_error_types"]}
    assert by_type["UNAUTHORIZED"]["strategy_in_force"] is False
    assert by_type["TIMEOUT"]["strategy_in_force"] is True
    assert by_type["UNAUTHORIZED"]["hours_to_approval"] == 2.0
    assert page.count("since deprecated: no strategy covers it now") == 1


def test_the_failures_series_stacks_error_types_per_bucket(ops_client: Client) -> None:
    now = hour_of(timezone.now())
    step_row(now - timedelta(hours=3), error_type="TIMEOUT", steps=2)
    step_row(now - timedelta(hours=3), error_type="RATE_LIMITED", steps=1, tool_name="get_sku")
    step_row(now - timedelta(hours=1), error_type="TIMEOUT", steps=4)
    step_row(now - timedelta(hours=1), error_type="", steps=40, failed_steps=0)

    data = ops_client.get("/dashboards/data/failures.json?window=24h").json()

    assert len(data["buckets"]) == 24
    assert data["buckets"][-1] == now.isoformat()
    assert data["bucket_ends"][-1] == (now + timedelta(hours=1)).isoformat()
    series = {s["error_type"]: s["counts"] for s in data["series"]}
    assert list(series) == ["TIMEOUT", "RATE_LIMITED"]
    assert series["TIMEOUT"][-4:] == [2, 0, 4, 0]
    assert series["RATE_LIMITED"][-4:] == [1, 0, 0, 0]
    assert data["total"] == 7


@pytest.mark.parametrize(
    ("by", "items"),
    [
        ("tool", [{"value": "get_order", "count": 6}, {"value": "(none)", "count": 1}]),
        (
            "endpoint",
            [{"value": "shop.test/orders/{id}", "count": 6}, {"value": "(none)", "count": 1}],
        ),
        ("policy_version", [{"value": "v2", "count": 4}, {"value": "v1", "count": 3}]),
    ],
)
def test_breakdowns_count_failed_steps_biggest_first(
    ops_client: Client, by: str, items: list[dict[str, Any]]
) -> None:
    now = hour_of(timezone.now())
    step_row(now - timedelta(hours=3), steps=2)
    step_row(now - timedelta(hours=2), steps=4, policy_version="v2")
    step_row(
        now - timedelta(hours=1),
        tool_name="",
        endpoint="",
        error_type="MODEL_FORMAT_ERROR",
        steps=1,
    )
    data = ops_client.get(f"/dashboards/data/breakdown.json?window=24h&by={by}").json()
    assert data["items"] == items


@pytest.mark.parametrize(
    ("query", "total"),
    [
        ("", 7),
        ("&tool=get_order", 6),
        ("&tool=(none)", 1),
        ("&error_type=TIMEOUT", 6),
        ("&policy_version=v2", 4),
        ("&bucket=25", 0),
        ("&origin=all", 9),
    ],
)
def test_global_filters_apply_to_every_chart(ops_client: Client, query: str, total: int) -> None:
    now = hour_of(timezone.now())
    step_row(now - timedelta(hours=3), steps=2)
    step_row(now - timedelta(hours=2), steps=4, policy_version="v2")
    step_row(now - timedelta(hours=1), tool_name="", endpoint="", error_type="LLM_ERROR")
    step_row(now - timedelta(hours=1), origin="replay", steps=2)

    series = ops_client.get(f"/dashboards/data/failures.json?window=24h{query}").json()
    tools = ops_client.get(f"/dashboards/data/breakdown.json?window=24h&by=tool{query}").json()
    page = ops_client.get(f"/dashboards/failures/?window=24h{query}").content.decode()

    assert series["total"] == total
    assert sum(item["count"] for item in tools["items"]) == total
    assert (
        "/dashboards/data/failures.json?window=24h&amp;per=hour"
        + query.replace("&", "&amp;").replace("(none)", "%28none%29")
        in page
    )


@pytest.mark.parametrize("path", PAGES + JSON)
def test_dashboards_hold_a_fixed_query_count_and_never_read_steps(
    path: str,
    ops_client: Client,
    support_agent: Any,
    make_strategy: Any,  # noqa: F811
) -> None:
    make_strategy(error_type="RESOURCE_NOT_FOUND")
    counts = []
    for steps in (400, 4000):
        now = timezone.now()
        dashboard_data_fill(steps=steps, days=3, seed=steps, now=now, agent_id=support_agent.pk)
        rollups_rebuild(since=now - timedelta(days=4))
        with CaptureQueriesContext(connection) as queries:
            response = ops_client.get(path)
        assert response.status_code == 200
        assert not [q["sql"] for q in queries if '"traces_step"' in q["sql"]]
        counts.append(len(queries))
    assert Step.objects.count() > 4000
    assert counts == [EXPECTED_QUERIES[path]] * 2


# Four to sign in and check the permission (session, user, user and group permissions),
# then one per rollup read: the KPIs, the new error types and their approvals on the
# overview; the filter choices on the failures page; one per JSON endpoint.
EXPECTED_QUERIES = {
    "/dashboards/?window=7d": 4 + 3,
    "/dashboards/failures/?window=7d": 4 + 1,
    "/dashboards/data/kpis.json?window=7d": 4 + 3,
    "/dashboards/data/runs.json?window=24h": 4 + 1,
    "/dashboards/data/failures.json?window=7d": 4 + 1,
    "/dashboards/data/failures.json?window=30d": 4 + 1,
    "/dashboards/data/breakdown.json?window=7d&by=tool": 4 + 1,
    "/dashboards/data/breakdown.json?window=7d&by=endpoint": 4 + 1,
    "/dashboards/data/breakdown.json?window=30d&by=policy_version": 4 + 1,
}


def test_empty_dashboards_say_what_to_do_next(ops_client: Client) -> None:
    overview = ops_client.get("/dashboards/").content.decode()
    failures = ops_client.get("/dashboards/failures/").content.decode()
    assert "No finished runs" in overview and "rollups_rebuild" in overview
    assert "No failed steps match in this window" in failures
    assert ops_client.get("/dashboards/data/failures.json").json()["total"] == 0


def test_an_unknown_breakdown_is_a_clear_400(ops_client: Client) -> None:
    response = ops_client.get("/dashboards/data/breakdown.json?by=customer")
    assert response.status_code == 400
    assert "tool, endpoint, policy_version" in response.json()["error"]


def test_windows_end_with_the_current_bucket() -> None:
    now = datetime(2026, 11, 20, 10, 15, tzinfo=UTC)
    hours = window_resolve(key="24h", now=now)
    days = window_resolve(key="30d", now=now)
    assert (hours.start, hours.end) == (
        datetime(2026, 11, 19, 11, tzinfo=UTC),
        datetime(2026, 11, 20, 11, tzinfo=UTC),
    )
    assert (days.start, days.end, days.bucket) == (
        datetime(2026, 10, 22, tzinfo=UTC),
        datetime(2026, 11, 21, tzinfo=UTC),
        "day",
    )
    assert window_resolve(key="nonsense", now=now).key == "7d"


# --- drill-down: the trace list filtered like a bar or a slice ------------------------


@pytest.fixture
def drill_world(support_agent: Any) -> dict[str, Any]:
    """Three traces with steps at known times, tools, endpoints, versions and buckets."""
    base = hour_of(timezone.now()) - timedelta(hours=5)
    made = {}
    specs = {
        "timeout_at_base": ("v1", 3, base + timedelta(minutes=10), "get_order", "TIMEOUT"),
        "timeout_later": ("v2", 30, base + timedelta(hours=2), "get_order", "TIMEOUT"),
        "not_found": ("v2", 60, base + timedelta(minutes=20), "get_sku", "RESOURCE_NOT_FOUND"),
    }
    for name, (version, bucket, at, tool, error) in specs.items():
        trace = trace_create(agent_id=support_agent.pk, query=name, llm_backend="simulated")
        Trace.objects.filter(pk=trace.pk).update(policy_version=version, policy_bucket=bucket)
        step = Step.objects.create(
            trace=trace,
            step_number=1,
            phase="action",
            action_type="tool",
            tool_name=tool,
            endpoint=f"http://shop.test/sandbox/api/{tool}/W100{bucket}",
            ok=False,
            error_type=error,
            started_at=at,
        )
        Step.objects.filter(pk=step.pk).update(created_at=at)
        made[name] = trace
    made["base"] = base
    return made


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("step_error=TIMEOUT", {"timeout_at_base", "timeout_later"}),
        ("step_error=TIMEOUT&since={base}&until={base_1h}", {"timeout_at_base"}),
        ("step_error=any&tool=get_sku", {"not_found"}),
        (
            "step_error=any&endpoint=shop.test/sandbox/api/get_order/{{id}}",
            {"timeout_at_base", "timeout_later"},
        ),
        ("step_error=any&policy_version=v2", {"timeout_later", "not_found"}),
        ("bucket=25", {"timeout_later"}),
        ("bucket=50&step_error=RESOURCE_NOT_FOUND", {"not_found"}),
        ("step_error=RATE_LIMITED", set()),
    ],
)
def test_the_trace_list_drills_down_to_the_traces_a_bar_counts(
    ops_client: Client, drill_world: dict[str, Any], query: str, expected: set[str]
) -> None:
    base = drill_world["base"]
    url = "/traces/?" + query.format(
        base=base.isoformat().replace("+", "%2B"),
        base_1h=(base + timedelta(hours=1)).isoformat().replace("+", "%2B"),
    )
    response = ops_client.get(url)
    assert response.status_code == 200
    assert {t.query for t in response.context["page"].object_list} == expected


def test_the_trace_list_keeps_its_filters_in_the_pager_links(
    ops_client: Client, drill_world: dict[str, Any]
) -> None:
    response = ops_client.get("/traces/?step_error=TIMEOUT&tool=get_order&origin=all")
    assert response.context["querystring"] == "origin=all&step_error=TIMEOUT&tool=get_order"
    assert "tool = get_order" in response.content.decode()


def test_drill_down_filters_hold_the_trace_lists_query_count(
    ops_client: Client, support_agent: Any
) -> None:
    url = "/traces/?step_error=any&tool=get_order&policy_version=v2&since=2000-01-01T00:00"
    counts, listed = [], []
    # The fill buckets runs by random trace ids, so the v2 runs with a failed get_order
    # call are a Poisson count: 1,500 steps make an empty first page (mean about 9) as
    # unlikely as a full second one (mean about 27, the page holds 50).
    for steps in (1500, 3000):
        dashboard_data_fill(
            steps=steps, days=2, seed=steps, now=timezone.now(), agent_id=support_agent.pk
        )
        with CaptureQueriesContext(connection) as queries:
            response = ops_client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
        listed.append(len(response.context["page"].object_list))
    assert 0 < listed[0] < listed[1]
    assert counts[0] == counts[1]


def test_an_approval_within_the_hour_of_the_first_occurrence_reads_under_an_hour(
    ops_client: Client,
    make_strategy: Any,  # noqa: F811
) -> None:
    """The rollups know the hour, not the minute: a fix approved a minute after the first
    failure read as "0.5 h" (from the hour's start); it reads "< 1 h"."""
    now = hour_of(timezone.now())
    first_seen = now - timedelta(hours=5)
    step_row(first_seen, error_type="UNAUTHORIZED")
    strategy = make_strategy(error_type="UNAUTHORIZED", status="in_review")
    approved = first_seen + timedelta(minutes=31)
    with mock.patch("django.utils.timezone.now", return_value=approved):
        strategy_activate(strategy=strategy, author_kind="reviewer")

    page = ops_client.get("/dashboards/?window=24h").content.decode()

    assert "hour of " + first_seen.strftime("%Y-%m-%d %H:00") in page
    assert "&lt; 1 h" in page and "0.5 h" not in page
