"""Where the runtime applies the active policy: prompt hints, adapters, validation rules,
pre-conditions and error handlers. Scripted model over the OpenAI wire protocol; tools are
the sandbox over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from policies.branches import branch_signature
from policies.models import Policy, Strategy
from policies.selectors import runtime_policy_cache_clear
from policies.services import strategy_activate
from sandbox.models import Order, Product
from sandbox.services import faultrule_set
from tests.agents.runtime_helpers import answer, reason, reflect, run_query, use_fake_llm
from tests.branches import sku_lookup

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    settings: Any,
    openai_server: Any,
) -> Any:
    use_fake_llm(settings, openai_server)
    runtime_policy_cache_clear()
    yield support_agent
    runtime_policy_cache_clear()


def publish(kind: str, branch: dict[str, Any], error_type: str = "") -> Strategy:
    policy, _ = Policy.objects.get_or_create(
        intent=branch.get("intent", ""), tool_name=branch.get("tool", "")
    )
    strategy = Strategy.objects.create(
        policy=policy,
        kind=kind,
        tool_name=branch.get("tool", ""),
        error_type=error_type,
        root_cause="test",
        strategy_update="test",
        branch=branch,
        signature=branch_signature(kind, branch),
        origin="test",
    )
    # These tests are about what a published rule does: publish it without a canary.
    strategy_activate(strategy=strategy, author_kind="auto_merge", at_once=True)
    runtime_policy_cache_clear()
    return strategy


def test_prompt_hint_reaches_the_prompt_and_is_recorded(agent: Any, openai_server: Any) -> None:
    hint = publish(
        "prompt_hint", {"text": "Always cite the order status verbatim."}, "HALLUCINATED_ANSWER"
    )
    order = Order.objects.first()
    assert order is not None
    openai_server.enqueue(
        reason("get_order", {"order_id": order.order_id}),
        reflect(),
        answer(f"Order {order.order_id} is {order.status}."),
    )
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    prompt = openai_server.requests[0].json["messages"][1]["content"]
    assert "Always cite the order status verbatim." in prompt.split("## Strategy hints")[1]
    first = trace.steps.get(step_number=1)
    assert first.strategies_applied[0]["id"] == hint.pk
    assert trace.policy_version == "v1"
    assert first.strategy_version == "v1"


def test_adapter_strategy_converts_the_id_the_drifted_api_requires(
    agent: Any, openai_server: Any
) -> None:
    faultrule_set(endpoint="orders", drift="require_int_id")
    adapter = publish(
        "adapter", {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    )
    order = Order.objects.first()
    assert order is not None
    openai_server.enqueue(
        reason("get_order", {"order_id": order.order_id}),
        reflect(),
        answer(f"Order {order.order_id} is {order.status}."),
    )
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    action = trace.steps.get(phase="action")
    assert action.ok and action.status_code == 200
    assert action.action_input == {"order_id": order.numeric_id}
    assert action.adapters_fired[-1]["strategy"] == adapter.pk
    assert {"id": adapter.pk, "kind": "adapter"} in action.strategies_applied


def test_adapter_steps_repair_the_call_the_drifted_api_refuses(
    agent: Any, openai_server: Any
) -> None:
    faultrule_set(endpoint="orders", drift="require_int_id")
    adapter = publish(
        "adapter",
        {
            "tool": "get_order",
            "field": "order_id",
            "steps": [{"op": "strip_prefix", "value": "#W"}, {"op": "coerce", "to": "integer"}],
        },
    )
    order = Order.objects.first()
    assert order is not None and order.order_id.startswith("#W")
    script = [
        reason("get_order", {"order_id": order.order_id}),
        reflect(),
        answer(f"Order {order.order_id} is {order.status}."),
    ]
    openai_server.enqueue(*script)
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    action = trace.steps.get(phase="action")
    assert action.ok and action.status_code == 200
    assert action.action_input == {"order_id": order.numeric_id}
    assert action.adapters_fired[-1] == {
        "strategy": adapter.pk,
        "adapter": "policy:strip_prefix+coerce",
        "path": "order_id",
        "before": order.order_id,
        "after": order.numeric_id,
    }
    assert {"id": adapter.pk, "kind": "adapter"} in action.strategies_applied
    # Without the strategy the same call is refused: the steps made the difference.
    Strategy.objects.filter(pk=adapter.pk).update(status="deprecated")
    runtime_policy_cache_clear()
    openai_server.enqueue(*script)
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    refused = trace.steps.filter(phase="action").first()
    assert refused is not None and refused.status_code == 400 and not refused.ok


def test_validation_rule_rejects_input_before_the_call(agent: Any, openai_server: Any) -> None:
    rule = publish(
        "validation_rule",
        {"tool": "search_products", "schema": {"properties": {"query": {"minLength": 5}}}},
    )
    openai_server.enqueue(
        reason("search_products", {"query": "cap"}), reason("search_products", {"query": "cap"})
    )
    trace, _ = run_query(agent, "How much is the cap?")
    rejected = trace.steps.filter(phase="action").first()
    assert rejected is not None and not rejected.ok
    assert rejected.error_type == "INVALID_PARAMETER"
    assert f"policy rule S{rule.pk}" in rejected.error_detail
    assert rejected.strategies_applied == [{"id": rule.pk, "kind": "validation_rule"}]


def test_pre_condition_looks_up_the_sku_before_the_call(agent: Any, openai_server: Any) -> None:
    pre = publish("pre_condition", sku_lookup())
    product = Product.objects.first()
    assert product is not None
    openai_server.enqueue(
        reason("check_inventory", {"sku": product.name}), reflect(), answer("It is in stock.")
    )
    trace, _ = run_query(agent, f"Is the {product.name} in stock?")
    lookup, main = trace.steps.filter(phase="action").order_by("step_number")
    assert lookup.tool_name == "search_products" and lookup.details["auxiliary"]
    assert main.tool_name == "check_inventory" and main.ok and main.status_code == 200
    assert main.action_input["sku"] != product.name
    assert {"id": pre.pk, "kind": "pre_condition"} in main.strategies_applied


def test_degrade_handler_serves_the_cached_result_when_upstream_fails(
    agent: Any, openai_server: Any
) -> None:
    handler = publish(
        "error_handler",
        {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", "action": "degrade_cache"},
    )
    order = Order.objects.first()
    assert order is not None
    script = [
        reason("get_order", {"order_id": order.order_id}),
        reflect(),
        answer(f"Order {order.order_id} is {order.status}."),
    ]
    openai_server.enqueue(*script)
    run_query(agent, f"Where is my order {order.order_id}?")  # fills the cache
    faultrule_set(endpoint="orders", rate_500=1.0)
    openai_server.enqueue(*script)
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    failed, served = trace.steps.filter(phase="action").order_by("step_number")
    assert failed.status_code == 500 and failed.error_type == "INTERNAL_SERVER_ERROR"
    assert failed.details["handled_by"] == handler.pk
    assert served.ok and served.details["degraded"]
    assert served.response_summary.startswith("(cached")
    assert (trace.status, trace.outcome) == ("finished", "answered_from_data")


def test_handover_handler_ends_the_run_with_a_person(agent: Any, openai_server: Any) -> None:
    publish(
        "error_handler", {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", "action": "handover"}
    )
    faultrule_set(endpoint="orders", rate_500=1.0)
    order = Order.objects.first()
    assert order is not None
    openai_server.enqueue(reason("get_order", {"order_id": order.order_id}))
    trace, _ = run_query(agent, f"Where is my order {order.order_id}?")
    assert (trace.status, trace.outcome) == ("fallback", "handed_over")
    assert "support colleague" in trace.final_answer
    assert trace.steps.last().details["handover"]


def test_deprecated_strategies_stop_being_applied(agent: Any, openai_server: Any) -> None:
    hint = publish("prompt_hint", {"text": "Always cite the order status verbatim."})
    Strategy.objects.filter(pk=hint.pk).update(status="deprecated")
    runtime_policy_cache_clear()
    openai_server.enqueue(answer("Hello!"))
    run_query(agent, "hello")
    prompt = openai_server.requests[0].json["messages"][1]["content"]
    assert "Always cite" not in prompt
