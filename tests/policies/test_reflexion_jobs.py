"""A real Reflexion run, with its replay against the sandbox, reports progress on Jobs."""

from __future__ import annotations

from typing import Any

import pytest

from policies.reflexion import reflexion_run
from sandbox.models import Order
from tests.policies.test_reflexion import INT_BODY, drifted_orders  # noqa: F401
from traces.models import Job


@pytest.mark.django_db(transaction=True)
def test_a_reflexion_batch_and_its_replay_report_progress_to_the_end(
    drifted_orders: Order,  # noqa: F811
    failed_trace: Any,
) -> None:
    body = INT_BODY.replace("#W1000001", drifted_orders.order_id)
    trace = failed_trace(action_input={"order_id": drifted_orders.order_id}, body=body)

    [proposal] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    reflexion = Job.objects.get(kind=Job.Kind.REFLEXION)
    replay = Job.objects.get(kind=Job.Kind.REPLAY)
    assert (reflexion.status, reflexion.done, reflexion.total) == ("finished", 1, 1)
    assert reflexion.message == f"{proposal.error_signature}: added"
    assert reflexion.result_url == f"/traces/{trace.pk}/"
    # three stages: the repaired call, the regression replay, the replayed run
    assert (replay.status, replay.done, replay.total) == ("finished", 3, 3)
    assert replay.message.startswith("passed: get_order") and "-> 200" in replay.message
    assert "replay run " in replay.message and replay.result_url != f"/traces/{trace.pk}/"
    assert replay.started_at >= reflexion.started_at
    assert replay.finished_at is not None and reflexion.finished_at is not None
    assert replay.finished_at <= reflexion.finished_at


@pytest.mark.django_db(transaction=True)
def test_a_trace_without_learnable_failures_starts_no_job(support_agent: Any) -> None:
    from traces.services import trace_create

    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    trace.status = "finished"
    trace.save(update_fields=["status"])

    assert reflexion_run(trace_id=str(trace.pk)) == []
    assert not Job.objects.exists()
