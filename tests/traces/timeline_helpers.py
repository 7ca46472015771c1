"""Builds recorded runs step by step, the way the runtime writes them, for page tests."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from traces.models import Step, Trace
from traces.services import trace_create


def recorded_run(
    agent: Any, *, rounds: int, applied: list[dict[str, Any]] | None = None, query: str = "Where?"
) -> Trace:
    """A finished trace of ``rounds`` tool rounds (reasoning, action, reflection), then a
    final answer; each action step carries ``applied`` as its fired strategies."""
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="simulated")
    now = timezone.now()
    steps: list[Step] = []

    def add(**values: Any) -> None:
        steps.append(
            Step(trace=trace, step_number=len(steps) + 1, started_at=now, llm_backend="", **values)
        )

    for number in range(1, rounds + 1):
        add(
            round_number=number,
            phase="reasoning",
            thought=f"I should look up order {number}",
            action_type="tool",
            tool_name="get_order",
            action_input={"order_id": f"#W{number:07d}"},
            prompt_tokens=100 + number,
            completion_tokens=20,
            latency_ms=300,
            details={"expectation": "the order's status", "final_answer": None},
        )
        add(
            round_number=number,
            phase="action",
            action_type="tool",
            tool_name="get_order",
            action_input={"order_id": number},
            request_payload={"order_id": number},
            endpoint="http://127.0.0.1/sandbox/api/orders/",
            status_code=200,
            response_summary=f'{{"order_id": {number}, "status": "shipped"}}',
            latency_ms=40 + number,
            strategies_applied=applied or [],
            details={"signature": f"get_order {number}", "code": "OK"},
        )
        add(
            round_number=number,
            phase="reflection",
            thought="",
            response_summary="expectation_met=true; cause=-; next=continue",
            prompt_tokens=50,
            completion_tokens=10,
            details={"expectation_met": True, "likely_cause": "", "next": "continue"},
        )
    add(
        round_number=rounds + 1,
        phase="reasoning",
        thought="I have the facts",
        action_type="final_answer",
        details={"expectation": "", "final_answer": "It shipped."},
    )
    add(
        round_number=rounds + 1,
        phase="final",
        action_type="final_answer",
        response_summary="It shipped.",
        details={"outcome": "answered_from_data", "status": "finished"},
    )
    Step.objects.bulk_create(steps)
    Trace.objects.filter(pk=trace.pk).update(
        status=Trace.Status.FINISHED, final_answer="It shipped.", total_steps=len(steps)
    )
    trace.refresh_from_db()
    return trace
