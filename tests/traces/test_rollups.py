"""Rollups kept by the writers: steps and runs land in their hour and day rows, daily rows
are the sum of hourly ones, a rebuild reproduces them, and the learning loop's own traces
stay out of customer metrics and of the default trace list."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db.models import Sum

from traces.dashboards import RollupFilters, failures_over_time, kpis_for_window, window_resolve
from traces.management.commands.rollups_rebuild import parse_since
from traces.models import (
    RunRollupDaily,
    RunRollupHourly,
    Step,
    StepRollupDaily,
    StepRollupHourly,
    Trace,
)
from traces.recorder import RunConflict, TraceRecorder
from traces.records import StepRecord
from traces.rollups import (
    bucket_band,
    endpoint_label,
    endpoint_label_regex,
    rollups_record_handover,
)
from traces.services import trace_create, trace_finish, trace_set_policy

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 11, 20, 10, 15, tzinfo=UTC)
ORDER_URL = "http://shop.test:8000/sandbox/api/orders/W1001549"


@contextmanager
def clock_at(moment: datetime) -> Iterator[None]:
    """Every ``timezone.now()`` (auto_now_add, the recorder, trace_finish) reads ``moment``."""
    with mock.patch("django.utils.timezone.now", return_value=moment):
        yield


def write(trace: Trace, record: StepRecord, *, at: datetime) -> None:
    with clock_at(at):
        recorder = TraceRecorder(trace_id=str(trace.pk), next_step_number=trace.steps.count() + 1)
        async_to_sync(recorder.write_step)(record)


def tool_call(*, ok: bool, error_type: str = "", url: str = ORDER_URL) -> StepRecord:
    return StepRecord(
        phase="action",
        round_number=1,
        action_type="tool",
        tool_name="get_order",
        endpoint=url,
        ok=ok,
        error_type=error_type,
        latency_ms=40,
        prompt_tokens=0,
        completion_tokens=0,
    )


def reasoning(tokens: int = 100) -> StepRecord:
    return StepRecord(
        phase="reasoning",
        round_number=1,
        prompt_tokens=tokens,
        completion_tokens=10,
        latency_ms=300,
        cost_usd=0.001,
    )


def new_trace(agent: Any, *, origin: str = Trace.Origin.CUSTOMER, version: str = "v3") -> Trace:
    with clock_at(T0 - timedelta(minutes=1)):
        trace = trace_create(
            agent_id=agent.pk, query="Where is my order?", llm_backend="simulated", origin=origin
        )
    trace_set_policy(trace_id=str(trace.pk), version=version)
    trace.refresh_from_db()
    return trace


def step_rows(model: Any) -> set[tuple[Any, ...]]:
    return set(
        model.objects.values_list(
            "period_start", "tool_name", "endpoint", "error_type", "steps", "failed_steps"
        )
    )


@pytest.mark.parametrize(
    ("endpoint", "label"),
    [
        (ORDER_URL, "shop.test:8000/sandbox/api/orders/{id}"),
        ("https://api.example.com/v2/skus/SKU-0042?expand=1", "api.example.com/v2/skus/{id}"),
        ("https://api.example.com/v1/faq/returns", "api.example.com/v1/faq/returns"),
        ("", ""),
        # Redaction or a model can leave what urlsplit refuses; the write must still go in.
        ("http://[REDACTED]/orders/W1001549", "[REDACTED]/orders/{id}"),
    ],
)
def test_endpoints_are_keyed_without_their_ids(endpoint: str, label: str) -> None:
    assert endpoint_label(endpoint) == label


def test_an_endpoint_label_drills_down_to_the_raw_endpoints_behind_it() -> None:
    import re

    pattern = re.compile(endpoint_label_regex("shop.test:8000/sandbox/api/orders/{id}"))
    assert pattern.match(ORDER_URL)
    assert pattern.match(ORDER_URL + "?fields=status")
    assert not pattern.match("http://shop.test:8000/sandbox/api/orders/W1/items")
    assert not pattern.match("http://other.test/sandbox/api/orders/W1001549")


@pytest.mark.parametrize(("bucket", "band"), [(0, 0), (1, 1), (4, 1), (5, 5), (49, 25), (99, 50)])
def test_buckets_fall_in_the_band_of_their_rollout_stage(bucket: int, band: int) -> None:
    assert bucket_band(bucket) == band


def test_a_runs_steps_land_in_the_rows_of_their_hour_and_day(support_agent: Any) -> None:
    trace = new_trace(support_agent)
    write(trace, reasoning(), at=T0)
    write(trace, tool_call(ok=False, error_type="RESOURCE_NOT_FOUND"), at=T0 + timedelta(minutes=5))
    write(trace, tool_call(ok=True), at=T0 + timedelta(minutes=50))  # 11:05, the next hour

    ten, eleven, day = (
        datetime(2026, 11, 20, 10, tzinfo=UTC),
        datetime(2026, 11, 20, 11, tzinfo=UTC),
        datetime(2026, 11, 20, tzinfo=UTC),
    )
    endpoint = "shop.test:8000/sandbox/api/orders/{id}"
    assert step_rows(StepRollupHourly) == {
        (ten, "", "", "", 1, 0),
        (ten, "get_order", endpoint, "RESOURCE_NOT_FOUND", 1, 1),
        (eleven, "get_order", endpoint, "", 1, 0),
    }
    assert step_rows(StepRollupDaily) == {
        (day, "", "", "", 1, 0),
        (day, "get_order", endpoint, "RESOURCE_NOT_FOUND", 1, 1),
        (day, "get_order", endpoint, "", 1, 0),
    }
    dims = set(
        StepRollupHourly.objects.values_list("origin", "agent_id", "policy_version", "bucket_band")
    )
    assert dims == {("customer", support_agent.pk, "v3", bucket_band(trace.policy_bucket))}
    assert StepRollupHourly.objects.get(period_start=ten, tool_name="").tokens == 110


def test_steps_after_a_policy_change_count_under_the_new_version(support_agent: Any) -> None:
    trace = new_trace(support_agent, version="v3")
    write(trace, reasoning(), at=T0)
    trace_set_policy(trace_id=str(trace.pk), version="v4")  # a redelivered run, a new version
    write(trace, reasoning(), at=T0)
    by_version = dict(StepRollupHourly.objects.values_list("policy_version", "steps"))
    assert by_version == {"v3": 1, "v4": 1}


@pytest.mark.parametrize(
    ("status", "outcome", "first_failed", "expected"),
    [
        # runs, successes, first-response successes, handovers
        ("finished", "answered_from_data", False, (1, 1, 1, 0)),
        ("finished", "answered_from_data", True, (1, 1, 0, 0)),
        ("fallback", "handed_over", True, (1, 0, 0, 1)),
        ("failed", "failed", True, (1, 0, 0, 0)),
    ],
)
def test_a_finished_run_adds_its_kpi_counters(
    support_agent: Any,
    status: str,
    outcome: str,
    first_failed: bool,
    expected: tuple[int, int, int, int],
) -> None:
    trace = new_trace(support_agent)
    write(trace, reasoning(), at=T0)
    write(
        trace, tool_call(ok=not first_failed, error_type="TIMEOUT" if first_failed else ""), at=T0
    )
    write(trace, tool_call(ok=True), at=T0)
    finished = T0 + timedelta(seconds=90)
    with clock_at(finished):
        trace_finish(trace_id=str(trace.pk), status=status, final_answer="x", outcome=outcome)

    row = RunRollupHourly.objects.get()
    assert (row.runs, row.successes, row.first_response_successes, row.handovers) == expected
    assert row.period_start == datetime(2026, 11, 20, 10, tzinfo=UTC)
    assert row.action_steps == 2
    assert row.resolution_ms_sum == 150_000  # created a minute before T0, ended 90 s after
    assert row.tokens == 110
    assert row.cost_usd == Decimal("0.001")


def test_a_takeover_after_the_run_ended_counts_as_a_handover_of_that_run(
    support_agent: Any,
) -> None:
    trace = new_trace(support_agent)
    with clock_at(T0):
        trace = trace_finish(trace_id=str(trace.pk), status="finished", final_answer="x")
    rollups_record_handover(trace=trace)
    window = window_resolve(key="24h", now=T0)
    kpis = {k.key: k.value for k in kpis_for_window(window=window, filters=RollupFilters())}
    assert (kpis["runs"], kpis["takeover_rate"]) == (1, 100)
    assert RunRollupDaily.objects.get().handovers == 1


def test_finishing_twice_counts_the_run_once(support_agent: Any) -> None:
    trace = new_trace(support_agent)
    for _ in range(2):
        with clock_at(T0):
            trace_finish(trace_id=str(trace.pk), status="finished", final_answer="x")
    assert RunRollupHourly.objects.aggregate(n=Sum("runs"))["n"] == 1


def _spread_runs(agent: Any) -> None:
    """Runs over two days and several hours, with failures, on two policy versions."""
    for index in range(12):
        at = T0 + timedelta(hours=5 * index, minutes=7 * index)
        trace = new_trace(agent, version="v3" if index % 3 else "v4")
        write(trace, reasoning(tokens=50 + index), at=at)
        write(
            trace,
            tool_call(ok=index % 2 == 0, error_type="" if index % 2 == 0 else "TIMEOUT"),
            at=at,
        )
        with clock_at(at + timedelta(minutes=index)):
            trace_finish(trace_id=str(trace.pk), status="finished", final_answer="ok")


@pytest.mark.parametrize(
    ("hourly", "daily"),
    [(StepRollupHourly, StepRollupDaily), (RunRollupHourly, RunRollupDaily)],
)
def test_daily_rows_are_the_sum_of_the_hourly_rows(
    support_agent: Any, hourly: Any, daily: Any
) -> None:
    _spread_runs(support_agent)
    dims = hourly.KEY[1:]
    counters = {name: Sum(name) for name in hourly.COUNTERS}
    summed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in hourly.objects.values("period_start", *dims, *hourly.COUNTERS):
        key = (row["period_start"].date(), *(row[d] for d in dims))
        into = summed.setdefault(key, dict.fromkeys(hourly.COUNTERS, 0))
        for name in hourly.COUNTERS:
            into[name] += row[name]
    stored = {
        (row["period_start"].date(), *(row[d] for d in dims)): {
            name: row[name] for name in hourly.COUNTERS
        }
        for row in daily.objects.values("period_start", *dims, *hourly.COUNTERS)
    }
    assert len({key[0] for key in stored}) >= 2
    assert stored == summed
    assert daily.objects.aggregate(**counters) == hourly.objects.aggregate(**counters)


def _snapshot() -> dict[str, set[tuple[Any, ...]]]:
    return {
        model.__name__: set(model.objects.values_list(*model.KEY, *model.COUNTERS))
        for model in (StepRollupHourly, StepRollupDaily, RunRollupHourly, RunRollupDaily)
    }


def test_a_rebuild_reproduces_the_rows_the_writers_kept(support_agent: Any) -> None:
    _spread_runs(support_agent)
    kept = _snapshot()
    StepRollupHourly.objects.all().delete()
    RunRollupDaily.objects.update(runs=999)

    out = StringIO()
    call_command("rollups_rebuild", "--since", "2026-11-19", stdout=out)

    assert _snapshot() == kept
    assert "24 steps, 12 runs" in out.getvalue()


def test_a_rebuild_leaves_rows_before_its_first_day_alone(support_agent: Any) -> None:
    _spread_runs(support_agent)
    first_day = datetime(2026, 11, 20, tzinfo=UTC)
    StepRollupDaily.objects.filter(period_start=first_day).update(steps=777)
    call_command("rollups_rebuild", "--since", "2026-11-21T05:00", stdout=StringIO())
    assert set(
        StepRollupDaily.objects.filter(period_start=first_day).values_list("steps", flat=True)
    ) == {777}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2d", datetime(2026, 11, 18, 10, 15, tzinfo=UTC)),
        ("12h", datetime(2026, 11, 19, 22, 15, tzinfo=UTC)),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
    ],
)
def test_rebuild_since_takes_durations_and_dates(value: str, expected: datetime) -> None:
    assert parse_since(value, now=datetime(2026, 11, 20, 10, 15, tzinfo=UTC)) == expected


def test_a_rolled_back_batch_leaves_no_count_behind(support_agent: Any) -> None:
    taken = new_trace(support_agent)
    free = new_trace(support_agent)
    write(taken, reasoning(), at=T0)

    async def race() -> None:
        async def one(trace: Trace) -> None:
            with suppress(RunConflict):
                await TraceRecorder(trace_id=str(trace.pk)).write_step(reasoning())

        await asyncio.gather(one(taken), one(free))

    # One patch around both writers: a patch per coroutine would be entered and left out of
    # order by the interleaved writers and leave `timezone.now` patched for every later test.
    with clock_at(T0):
        async_to_sync(race)()
    assert Step.objects.count() == 2
    assert StepRollupHourly.objects.aggregate(n=Sum("steps"))["n"] == 2


def test_replays_and_experiments_stay_out_of_customer_metrics(
    support_agent: Any, client: Any, ops_user: Any
) -> None:
    for origin in (Trace.Origin.CUSTOMER, Trace.Origin.REPLAY, Trace.Origin.EXPERIMENT):
        trace = new_trace(support_agent, origin=origin)
        write(trace, tool_call(ok=False, error_type="TIMEOUT"), at=T0)
        with clock_at(T0):
            trace_finish(trace_id=str(trace.pk), status="failed", final_answer="", outcome="failed")
    window = window_resolve(key="24h", now=T0)

    runs = {kpi.key: kpi.value for kpi in kpis_for_window(window=window, filters=RollupFilters())}
    every_origin = RollupFilters.from_params({"origin": "all"})
    all_runs = {k.key: k.value for k in kpis_for_window(window=window, filters=every_origin)}
    failures = failures_over_time(window=window, filters=RollupFilters())

    assert runs["runs"] == 1
    assert all_runs["runs"] == 3
    assert failures["total"] == 1
    client.force_login(ops_user)
    listed = client.get("/traces/").context["page"].object_list
    assert [t.origin for t in listed] == ["customer"]
    replays = client.get("/traces/?origin=replay").context["page"].object_list
    assert [t.origin for t in replays] == ["replay"]
    assert len(client.get("/traces/?origin=all").context["page"].object_list) == 3


def test_a_traces_steps_counted_together_count_as_one_by_one() -> None:
    """``add_step_rows`` (the OTLP ingest's loop) keeps the counters ``add_step_row`` keeps."""
    from traces.bulk import model_new
    from traces.rollups import RollupAccumulator, TraceDims

    dims = TraceDims(origin="external", agent_id=7, policy_version="v3", bucket_band=25)
    hour = datetime(2026, 12, 4, 21, tzinfo=UTC)
    steps = [
        model_new(Step, values)
        for values in (
            {"phase": Step.Phase.REASONING, "latency_ms": 40, "prompt_tokens": 9,
             "completion_tokens": 2, "created_at": hour + timedelta(minutes=5)},
            {"phase": Step.Phase.ACTION, "action_type": Step.ActionType.TOOL,
             "tool_name": "get_order", "endpoint": "https://shop.example/orders/123",
             "ok": False, "error_type": "NOT_FOUND", "latency_ms": 90,
             "cost_usd": Decimal("0.25"), "created_at": hour + timedelta(minutes=7)},
            {"phase": Step.Phase.ACTION, "action_type": Step.ActionType.TOOL,
             "tool_name": "get_order", "endpoint": "https://shop.example/orders/456",
             "latency_ms": 30, "created_at": hour + timedelta(hours=1, minutes=1)},
            {"phase": Step.Phase.ACTION, "action_type": Step.ActionType.TOOL, "ok": True,
             "error_type": "SCHEMA_DRIFT", "created_at": hour + timedelta(days=1)},
        )
    ]  # fmt: skip
    together, one_by_one = RollupAccumulator(), RollupAccumulator()
    together.add_step_rows(steps, dims)
    for step in steps:
        one_by_one.add_step_row(step, dims)
    assert together.step_hourly == one_by_one.step_hourly
    assert together.step_daily == one_by_one.step_daily
    assert len(together.step_hourly) == 4 and len(together.step_daily) == 4


def test_a_step_batch_and_its_counters_are_one_statement_that_stands_or_falls_whole(
    support_agent: Any,
) -> None:
    """Outside a transaction (the recorder's thread), the INSERT and the rollup upserts go
    as one statement: one round trip, no BEGIN or COMMIT, and a refused batch counts
    nothing."""
    from django.db import IntegrityError, connection
    from django.test.utils import CaptureQueriesContext

    from traces.recorder import _insert_batch

    trace = new_trace(support_agent)

    def step(number: int) -> Step:
        return Step(
            trace_id=trace.pk, step_number=number, phase="reasoning", started_at=T0, ok=True
        )

    assert not connection.in_atomic_block
    with clock_at(T0):
        _insert_batch([step(1)])  # the trace's rollup dimensions are read once, then kept
        with CaptureQueriesContext(connection) as queries:
            _insert_batch([step(2), step(3)])
    assert len(queries) == 1
    assert Step.objects.filter(trace=trace).count() == 3
    assert StepRollupHourly.objects.aggregate(n=Sum("steps"))["n"] == 3
    assert StepRollupDaily.objects.aggregate(n=Sum("steps"))["n"] == 3
    with clock_at(T0), pytest.raises(IntegrityError):
        _insert_batch([step(4), step(2)])  # 2 is taken: neither step, nor their counts
    assert Step.objects.filter(trace=trace).count() == 3
    assert StepRollupHourly.objects.aggregate(n=Sum("steps"))["n"] == 3
    assert StepRollupDaily.objects.aggregate(n=Sum("steps"))["n"] == 3
