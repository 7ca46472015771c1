"""Two workers on one run: when another worker has already written the step this run is
about to write, the run stops with a conflict (``RunConflict``) instead of finishing or
aborting the trace the other worker owns.

The other worker is played by an in-process tool that, while the run waits for it, writes
the run's next step from its own thread and database connection, as a redelivered copy of
the run would. The model is scripted over the OpenAI wire protocol (tests/fakes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.db.models import Max
from django.utils import timezone
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.models import Agent
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    reason,
    run_query,
    tools_registered,
    use_fake_llm,
)
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)

QUERY = "Look up code RACE-1 for me"
TAKEN: list[int] = []


@declared_tool(
    name="race_lookup",
    description="Test tool: meanwhile another worker writes this run's next step.",
    params_schema={
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
        "additionalProperties": False,
    },
)
def race_lookup(*, code: str) -> dict[str, str]:
    # Runs in a thread of its own (asyncio.to_thread): its own connection, committed at once.
    try:
        trace = Trace.objects.get(query=QUERY)
        last = trace.steps.aggregate(last=Max("step_number"))["last"] or 0
        Step.objects.create(
            trace=trace,
            step_number=last + 1,
            phase=Step.Phase.ACTION,
            tool_name="race_lookup",
            thought="written by the other worker",
            started_at=timezone.now(),
        )
        TAKEN.append(last + 1)
    finally:
        connections.close_all()
    return {"code": code}


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any) -> Iterator[Agent]:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    TAKEN.clear()
    with tools_registered(race_lookup):
        agent = agent_ensure_default()
        tools_sync(agents=[agent])
        yield agent


def test_a_step_taken_by_another_worker_stops_the_run_without_ending_the_trace(
    agent: Agent, openai_server: Any, exported: InMemorySpanExporter
) -> None:
    openai_server.enqueue(reason("race_lookup", {"code": "RACE-1"}), answer("Code RACE-1."))

    trace, outcome = run_query(agent, QUERY)

    assert outcome is None
    assert len(TAKEN) == 1
    # The trace is the other worker's to finish: not finished, not aborted, nothing after
    # the step it took.
    assert trace.status == Trace.Status.RUNNING and trace.error_type == ""
    steps = list(trace.steps.order_by("step_number"))
    assert steps[-1].step_number == TAKEN[0]
    assert steps[-1].thought == "written by the other worker"
    assert not any(step.phase == Step.Phase.STOPPED for step in steps)
    # The model was not asked again after the conflict.
    assert openai_server.remaining == 1
    [run] = [s for s in exported.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert run.attributes["error.type"] == "RunConflict"
