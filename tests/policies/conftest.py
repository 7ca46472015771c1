"""Fixtures for the learning loop: strategies and failed traces on the real database."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from policies.models import Policy, Strategy
from traces.models import Step, Trace
from traces.services import trace_create


@pytest.fixture
def make_strategy(db: None) -> Any:
    def make(**overrides: Any) -> Strategy:
        branch = overrides.pop(
            "branch", {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
        )
        kind = overrides.pop("kind", "adapter")
        policy, _ = Policy.objects.get_or_create(intent="", tool_name=branch.get("tool", ""))
        from policies.branches import branch_signature

        values: dict[str, Any] = {
            "policy": policy,
            "kind": kind,
            "tool_name": branch.get("tool", ""),
            "error_type": "TYPE_MISMATCH",
            "root_cause": "get_order now requires integer order_id",
            "strategy_update": "Convert order_id to integer digits",
            "branch": branch,
            "signature": branch_signature(kind, branch),
            "status": Strategy.Status.ACTIVE,
            "origin": "test",
        }
        values.update(overrides)
        return Strategy.objects.create(**values)

    return make


@pytest.fixture
def failed_trace(support_agent: Any) -> Any:
    """Build a finished trace with one failed action step."""

    def make(
        *,
        tool: str = "get_order",
        action_input: dict | None = None,
        status_code: int | None = 400,
        error_type: str = "TYPE_MISMATCH",
        body: str = "",
        query: str | None = None,
    ) -> Trace:
        if query is None:
            # The request the failed call served: a replay runs it again.
            order_id = (action_input or {}).get("order_id", "#W1000001")
            query = f"Where is my order {order_id}?"
        trace = trace_create(agent_id=support_agent.pk, query=query, llm_backend="simulated")
        Step.objects.create(
            trace=trace,
            step_number=1,
            phase="action",
            action_type="tool",
            tool_name=tool,
            action_input=action_input if action_input is not None else {"order_id": "#W1000001"},
            endpoint=f"http://127.0.0.1/sandbox/api/{tool}",
            status_code=status_code,
            ok=False,
            error_type=error_type,
            response_summary=body,
            started_at=timezone.now(),
        )
        Trace.objects.filter(pk=trace.pk).update(status="failed")
        trace.refresh_from_db()
        return trace

    return make
