"""Trace.retries: the tool calls a run made after a failed one, stored when it ends."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from traces.models import Step
from traces.services import trace_create, trace_finish

pytestmark = pytest.mark.django_db


def _call(trace: Any, number: int, ok: bool, **details: Any) -> None:
    Step.objects.create(
        trace=trace,
        step_number=number,
        phase="action",
        action_type="tool",
        tool_name="get_order",
        ok=ok,
        details=details,
        started_at=timezone.now(),
    )


@pytest.mark.parametrize(
    ("calls", "retries"),
    [
        ([], 0),
        ([True], 0),
        ([False], 0),  # failed and gave up: nothing was tried again
        ([False, True], 1),
        ([False, False, True], 2),
        ([False, True, False], 1),
    ],
)
def test_finish_counts_the_calls_made_after_a_failed_one(
    support_agent: Any, calls: list[bool], retries: int
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    Step.objects.create(trace=trace, step_number=1, phase="reasoning", started_at=timezone.now())
    for number, ok in enumerate(calls, start=2):
        _call(trace, number, ok)

    finished = trace_finish(trace_id=str(trace.pk), status="finished", final_answer="ok")

    assert finished.retries == retries


def test_a_pre_conditions_lookup_is_not_a_retry(support_agent: Any) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _call(trace, 1, False, auxiliary=True)  # the lookup made on the call's behalf failed
    _call(trace, 2, True)

    assert trace_finish(trace_id=str(trace.pk), status="finished", final_answer="").retries == 0
