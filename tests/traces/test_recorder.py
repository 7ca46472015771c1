"""Group commit of Step rows: many runs share a transaction, a conflict hits only its run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.runtime import StepRecord
from traces.models import Step
from traces.recorder import RunConflict, TraceRecorder
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
