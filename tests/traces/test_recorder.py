"""Group commit of Step rows: many runs share a transaction, a conflict hits only its run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from traces.models import Step
from traces.recorder import RunConflict, TraceRecorder
from traces.records import StepRecord
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_runs_write_every_step_in_order(support_agent: Any) -> None:
    traces = [
        trace_create(agent_id=support_agent.pk, query=f"q{i}", llm_backend="simulated")
        for i in range(20)
    ]

    async def write_all() -> None:
        async def one(trace_id: str) -> None:
            recorder = TraceRecorder(trace_id=trace_id)
            for _ in range(5):
                await recorder.write_step(StepRecord(phase="reasoning", round_number=1))

        await asyncio.gather(*(one(str(t.pk)) for t in traces))

    async_to_sync(write_all)()
    for trace in traces:
        numbers = list(trace.steps.order_by("step_number").values_list("step_number", flat=True))
        assert numbers == [1, 2, 3, 4, 5]


def test_a_duplicate_step_fails_only_its_own_run(support_agent: Any) -> None:
    taken = trace_create(agent_id=support_agent.pk, query="a", llm_backend="simulated")
    free = trace_create(agent_id=support_agent.pk, query="b", llm_backend="simulated")
    async_to_sync(TraceRecorder(trace_id=str(taken.pk)).write_step)(
        StepRecord(phase="reasoning", round_number=1)
    )
    outcomes: dict[str, str] = {}

    async def race() -> None:
        async def write(trace_id: str, label: str) -> None:
            try:
                await TraceRecorder(trace_id=trace_id).write_step(
                    StepRecord(phase="reasoning", round_number=1)
                )
                outcomes[label] = "ok"
            except RunConflict:
                outcomes[label] = "conflict"

        await asyncio.gather(write(str(taken.pk), "taken"), write(str(free.pk), "free"))

    async_to_sync(race)()
    assert outcomes == {"taken": "conflict", "free": "ok"}
    assert Step.objects.filter(trace=free).count() == 1


def test_a_run_cancelled_while_waiting_does_not_strand_the_others(support_agent: Any) -> None:
    traces = [
        trace_create(agent_id=support_agent.pk, query=f"q{i}", llm_backend="simulated")
        for i in range(3)
    ]
    recorders = [TraceRecorder(trace_id=str(t.pk)) for t in traces]

    async def scenario() -> list[str]:
        tasks = [
            asyncio.create_task(r.write_step(StepRecord(phase="reasoning", round_number=1)))
            for r in recorders
        ]
        await asyncio.sleep(0)  # all three are queued on the same commit
        tasks[0].cancel()  # e.g. its run hit the time limit
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # the cancelled run's next step must take the next number, not collide
        await recorders[0].write_step(StepRecord(phase="stopped", round_number=1))
        return [type(r).__name__ for r in results]

    outcomes = async_to_sync(scenario)()
    assert outcomes == ["CancelledError", "NoneType", "NoneType"]
    assert list(traces[0].steps.values_list("step_number", flat=True).order_by("step_number")) == [
        1,
        2,
    ]
    assert all(t.steps.count() >= 1 for t in traces[1:])


CARD = "4111 1111 1111 1111"
KEY = "sk-live-0123456789abcdefABCDEF"


def test_every_step_field_is_redacted_when_written(support_agent: Any) -> None:
    # given a step whose every free-form field carries a secret
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    record = StepRecord(
        phase="action",
        round_number=1,
        thought=f"I will use the key {KEY}",
        action_input={"order_id": "#W1", "password": "hunter2", "note": f"card {CARD}"},
        endpoint="https://alice:pw-secret-1@api.example.com/v1/x?api_key=qk-998877",
        request_payload={"api_key": "qk-998877", "nested": [{"token": "t-1"}]},
        error_detail="upstream said: Authorization: Bearer abcdefghijklmnop",
        response_summary=f'{{"card_number": "{CARD}", "status": "ok"}}',
        adapters_fired=[{"adapter": "trim", "path": "password", "before": "pw ", "after": KEY}],
        details={"raw_request": "GET /x?token=tk-55443322", "final_answer": f"key {KEY}"},
    )
    # when
    async_to_sync(TraceRecorder(trace_id=str(trace.pk)).write_step)(record)
    # then
    step = Step.objects.get(trace=trace)
    stored = repr(
        [
            step.thought,
            step.action_input,
            step.endpoint,
            step.request_payload,
            step.error_detail,
            step.response_summary,
            step.adapters_fired,
            step.details,
        ]
    )
    for secret in (KEY, "hunter2", CARD, "pw-secret-1", "qk-998877", "t-1", "abcdefghijklmnop"):
        assert secret not in stored
    assert step.action_input["order_id"] == "#W1"
    assert step.endpoint.startswith("https://alice:[REDACTED]@api.example.com/v1/x")
    assert step.error_detail == "upstream said: Authorization: [REDACTED]"


def test_the_step_written_shares_no_list_or_dict_with_its_record(support_agent: Any) -> None:
    # given a record with empty and filled lists and dicts
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    record = StepRecord(
        phase="action", round_number=1, action_input={"sku": "A-1", "nested": {"n": 1}}
    )
    recorder = TraceRecorder(trace_id=str(trace.pk))
    written: list[Step] = []
    recorder.on_step = written.append
    # when it is written, then the record changes (a runtime reusing its values)
    async_to_sync(recorder.write_step)(record)
    record.details["later"] = True
    record.adapters_fired.append({"adapter": "later"})
    record.strategies_applied.append({"id": "later"})
    record.request_payload["later"] = True
    record.action_input["nested"]["n"] = 2
    # then the Step in hand (what live listeners get) and the stored row are unchanged
    [step] = written
    stored = Step.objects.get(pk=step.pk)
    for row in (step, stored):
        assert (row.details, row.adapters_fired, row.strategies_applied) == ({}, [], [])
        assert row.request_payload == {}
        assert row.action_input == {"sku": "A-1", "nested": {"n": 1}}


def test_the_tool_result_cache_is_redacted(support_agent: Any) -> None:
    from agents.models import ToolResultCache
    from agents.sink import RunSink

    recorder = RunSink(trace_id="unused")
    async_to_sync(recorder.cache_store)(
        "sig-1", "get_card", {"api_key": "qk-1234567"}, f'{{"card": "{CARD}", "ok": true}}'
    )
    row = ToolResultCache.objects.get(signature="sig-1")
    assert row.arguments == {"api_key": "[REDACTED]"}
    assert CARD not in row.body
    assert '"ok": true' in row.body
