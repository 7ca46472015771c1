"""A tool call that changes something carries the run's idempotency key, so a redelivered
run that repeats a call its crash kept from being recorded changes nothing twice."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents.models import Tool
from agents.services import run_execute, tool_set_enabled, tools_import
from sandbox.models import IdempotentRequest, Order, ReturnRequest
from sandbox.selectors import order_return_eligibility
from tests.agents.runtime_helpers import answer, reason, reflect, run_query, use_fake_llm
from traces.models import Step, Trace


@pytest.mark.django_db(transaction=True)
def test_a_redelivered_run_repeats_an_unrecorded_post_without_a_second_side_effect(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: None,
    settings: Any,
    openai_server: Any,
) -> None:
    # given the sandbox's createReturn, imported from its OpenAPI document and enabled
    tools_import(raw=httpx.get(f"{live_sandbox}/openapi.json", timeout=10).content)
    tool = Tool.objects.get(name="createReturn")
    tool_set_enabled(tool_id=tool.pk, enabled=True, actor=None)
    tool.allowed_agents.add(support_agent)
    use_fake_llm(settings, openai_server)
    order = next(o for o in Order.objects.all() if order_return_eligibility(order=o).eligible)
    call = {"order_id": order.order_id, "reason": "Wrong size"}
    openai_server.enqueue(
        reason("createReturn", call), reflect(), answer("Your return is open.")
    )  # fmt: skip
    trace, _ = run_query(support_agent, f"Please return {order.order_id}, wrong size")
    made = trace.steps.get(phase="action")
    assert (made.ok, made.status_code) == (True, 201)
    # ... whose worker died after the call, before its step was written
    trace.steps.filter(step_number__gte=made.step_number).delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="", outcome="")
    # when the run is delivered again and makes the call again
    openai_server.enqueue(reflect(), answer("Your return is open."))
    async_to_sync(run_execute)(trace_id=str(trace.pk), reflect=False)
    trace.refresh_from_db()
    # then the shop opened one return: the repeat was answered from the first call
    assert trace.status == Trace.Status.FINISHED
    repeated = trace.steps.get(phase="action")
    assert (repeated.ok, repeated.status_code) == (True, 201)
    assert ReturnRequest.objects.filter(order=order).count() == 1
    record = IdempotentRequest.objects.get(key=repeated.idempotency_key)
    assert (record.status, record.replays) == (201, 1)
    assert Step.objects.filter(idempotency_key=repeated.idempotency_key).count() == 1
