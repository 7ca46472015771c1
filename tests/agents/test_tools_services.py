"""Services and selectors behind the tools page: a tool disabled there is gone from the
next run (real runs against the sandbox over HTTP), un-suspend, and the error-rate read."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Tool, ToolAlert
from agents.selectors import tool_error_rates
from agents.services import tool_set_enabled, tool_snapshots, tool_unsuspend
from agents.tools.executor import ExecutorCode, ToolExecutor, ValidationFailure
from reviews.models import AuditLog
from sandbox.models import Order
from tests.agents.runtime_helpers import answer, reason, reflect, run_query, use_fake_llm
from traces.models import Step
from traces.rollups import rollups_rebuild
from traces.services import trace_create


@pytest.mark.django_db
def test_a_disabled_tool_leaves_the_snapshots_and_its_call_is_not_allowed(
    support_agent: Any, admin_role_user: Any
) -> None:
    tool = Tool.objects.get(name="get_order")
    assert "get_order" in tool_snapshots(agent_id=support_agent.pk)

    tool_set_enabled(tool_id=tool.pk, enabled=False, actor=admin_role_user)

    snapshots = tool_snapshots(agent_id=support_agent.pk)
    assert "get_order" not in snapshots and "check_inventory" in snapshots
    executor = ToolExecutor(
        tools=snapshots,
        http_client=None,  # type: ignore[arg-type]  # validation sends nothing
        max_response_bytes=1000,
        max_redirects=0,
    )
    refused = executor.validate("get_order", {"order_id": "#W1000001"})
    assert isinstance(refused, ValidationFailure)
    assert refused.code == ExecutorCode.TOOL_NOT_ALLOWED


@pytest.mark.django_db
def test_enabling_twice_writes_one_audit_row(support_agent: Any, admin_role_user: Any) -> None:
    tool = Tool.objects.get(name="get_order")

    for enabled in (False, False, True, True):
        tool_set_enabled(tool_id=tool.pk, enabled=enabled, actor=admin_role_user)

    actions = list(
        AuditLog.objects.filter(target="get_order")
        .order_by("created_at", "pk")
        .values_list("action", flat=True)
    )
    assert actions == ["tool.disable", "tool.enable"]


@pytest.mark.django_db
def test_unsuspend_of_a_tool_that_is_not_suspended_changes_nothing(
    support_agent: Any, admin_role_user: Any
) -> None:
    tool = Tool.objects.get(name="get_order")

    tool_unsuspend(tool_id=tool.pk, actor=admin_role_user)

    assert not ToolAlert.objects.exists()
    assert not AuditLog.objects.filter(action="tool.unsuspend").exists()


@pytest.mark.django_db
def test_a_run_after_unsuspend_sees_the_tool_usable_again(
    support_agent: Any, admin_role_user: Any
) -> None:
    Tool.objects.filter(name="get_order").update(
        suspended_until=timezone.now() + timedelta(minutes=30)
    )
    assert tool_snapshots(agent_id=support_agent.pk)["get_order"].suspended

    tool_unsuspend(tool_id=Tool.objects.get(name="get_order").pk, actor=admin_role_user)

    assert not tool_snapshots(agent_id=support_agent.pk)["get_order"].suspended


@pytest.mark.django_db
def test_error_rates_count_tool_calls_in_the_window_by_tool_and_type_in_one_query(
    support_agent: Any,
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    replay = trace_create(
        agent_id=support_agent.pk, query="q", llm_backend="simulated", origin="replay"
    )
    now = timezone.now()
    rows = [
        (trace, "get_order", "action", True, ""),
        (trace, "get_order", "action", False, "TIMEOUT"),
        (trace, "get_order", "action", False, "TIMEOUT"),
        (trace, "get_order", "action", False, ""),  # failed but unclassified still counts
        (trace, "get_order", "reasoning", True, ""),  # the model's choice, not a call
        (trace, "check_inventory", "action", False, "RESOURCE_NOT_FOUND"),
        (trace, "not_on_the_page", "action", False, "TIMEOUT"),
        (replay, "get_order", "action", False, "TIMEOUT"),  # the learning loop's own run
    ]
    for number, (owner, tool_name, phase, ok, error_type) in enumerate(rows, start=1):
        Step.objects.create(
            trace=owner,
            step_number=number,
            phase=phase,
            action_type="tool" if phase == "action" else "none",
            tool_name=tool_name,
            ok=ok,
            error_type=error_type,
            started_at=now,
        )
    old = Step.objects.create(
        trace=trace,
        step_number=99,
        phase="action",
        action_type="tool",
        tool_name="get_order",
        ok=False,
        error_type="INTERNAL_SERVER_ERROR",
        started_at=now,
    )
    Step.objects.filter(pk=old.pk).update(created_at=now - timedelta(days=2))
    rollups_rebuild(since=now - timedelta(days=3))

    with CaptureQueriesContext(connection) as queries:
        rates = tool_error_rates(
            tool_names=["get_order", "check_inventory", "get_sku_price"],
            since=now - timedelta(hours=24),
            until=now + timedelta(seconds=5),
        )

    assert len(queries) == 1
    assert "traces_steprolluphourly" in queries[0]["sql"]
    assert '"traces_step"' not in queries[0]["sql"]
    assert (rates["get_order"].calls, rates["get_order"].errors) == (4, 3)
    assert rates["get_order"].by_type == {"TIMEOUT": 2, "UNCLASSIFIED": 1}
    assert rates["get_order"].rate == 0.75
    assert rates["check_inventory"].top_errors == [("RESOURCE_NOT_FOUND", 1)]
    assert rates["get_sku_price"].calls == 0 and rates["get_sku_price"].rate is None
    assert "not_on_the_page" not in rates


# --- real runs against the sandbox over HTTP ------------------------------------------


def _disable_on_the_page(admin_role_user: Any, tool_name: str) -> None:
    client = Client()
    client.force_login(admin_role_user)
    tool = Tool.objects.get(name=tool_name)
    assert client.post(f"/tools/{tool.pk}/disable/").status_code == 302


@pytest.mark.django_db(transaction=True)
def test_a_model_that_calls_a_tool_disabled_on_the_page_gets_tool_not_allowed(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    admin_role_user: Any,
    openai_server: Any,
    settings: Any,
) -> None:
    use_fake_llm(settings, openai_server)
    order_id = Order.objects.order_by("order_id").values_list("order_id", flat=True)[0]
    call = reason("get_order", {"order_id": order_id})
    # given a run with the tool enabled calls the sandbox and gets the order
    openai_server.enqueue(call, reflect(True), answer(f"Order {order_id} found."))
    before, _ = run_query(support_agent, f"Where is my order {order_id}?")
    assert before.steps.get(phase="action").status_code == 200
    assert "- get_order:" in openai_server.requests[0].body.decode()
    sent_before = len(openai_server.requests)

    # when an admin disables it on the tools page and the model still asks for it
    _disable_on_the_page(admin_role_user, "get_order")
    openai_server.enqueue(call, reflect(False, "answer"), answer("I cannot look that up."))
    after, _ = run_query(support_agent, f"Where is my order {order_id}?")

    # then the tool is not in the prompt and the call is refused before any request
    prompt = json.loads(openai_server.requests[sent_before].body)
    prompt_text = "\n".join(message["content"] for message in prompt["messages"])
    assert "- get_order:" not in prompt_text and "- check_inventory:" in prompt_text
    refused = after.steps.get(phase="action")
    assert refused.error_type == "TOOL_NOT_ALLOWED"
    assert refused.status_code is None and refused.endpoint == ""


@pytest.mark.django_db(transaction=True)
def test_the_simulated_assistant_cannot_use_a_tool_disabled_on_the_page(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    admin_role_user: Any,
    settings: Any,
) -> None:
    settings.LLM_BACKEND = "simulated"
    settings.LLM_SIM_ERROR_RATES = {}
    order_id = Order.objects.order_by("order_id").values_list("order_id", flat=True)[0]
    before, _ = run_query(support_agent, f"Where is my order {order_id}?", backend="simulated")
    assert before.steps.filter(phase="action", tool_name="get_order", ok=True).exists()

    _disable_on_the_page(admin_role_user, "get_order")
    after, _ = run_query(support_agent, f"Where is my order {order_id}?", backend="simulated")

    assert not after.steps.filter(tool_name="get_order").exists()
    # The answer says it cannot look it up, without naming the internal tool to the
    # customer; the name is kept on the final step for ops.
    assert "not available" in after.final_answer and "get_order" not in after.final_answer
    final = after.steps.get(phase="final")
    assert "get_order" in final.details["removed_from_answer"]
