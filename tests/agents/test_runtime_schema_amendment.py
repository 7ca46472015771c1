"""A stale tool schema end to end: the sandbox's contract drifts (ids without '#W'), a model
that sends the id the API now wants is refused by the tool's own schema, Reflexion proposes a
versioned amendment, the replay checks it against the drifted sandbox, and the next run's
prompt and validation use the amended schema."""

from __future__ import annotations

from typing import Any

import pytest

from policies.models import Strategy
from policies.reflexion import reflexion_run
from policies.selectors import runtime_policy_cache_clear
from sandbox.faults import drift_state_reset
from sandbox.services import contractdrift_set
from tests.agents.runtime_helpers import answer, reason, reflect, run_query, use_fake_llm

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any, live_sandbox: str):
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    settings.POLICY_PUBLISH = "at_once"  # this test is about the amendment, not the canary
    runtime_policy_cache_clear()
    drift_state_reset()
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    yield agent
    runtime_policy_cache_clear()
    drift_state_reset()


def test_a_stale_schema_is_amended_and_the_models_value_goes_through(
    agent: Any, openai_server: Any, small_shop: Any
) -> None:
    from sandbox.models import Order

    order = Order.objects.order_by("order_id").first()
    digits = order.order_id.removeprefix("#W")
    contractdrift_set(endpoint="orders", kind="prefix_dropped", param="order_id", old="#W")
    # 1. The old form: the API refuses it and says why.
    openai_server.enqueue(
        reason("get_order", {"order_id": order.order_id}),
        reflect(False, cause="the API says order_id must not start with '#W'"),
        answer("Sorry, I could not look that up."),
    )
    first, _ = run_query(agent, f"Where is order {order.order_id}?")
    # 2. The form the API asked for: the tool's own schema (^#W\d{7}$) refuses it.
    # (a call the schema refuses never runs: the model is asked to reason again, no reflection)
    openai_server.enqueue(
        reason("get_order", {"order_id": digits}),
        answer("Sorry, I could not look that up."),
    )
    refused, _ = run_query(agent, f"Where is order {order.order_id}?")
    step = refused.steps.get(phase="action")
    assert (step.ok, step.status_code) == (False, None)
    assert "validator=pattern" in step.error_detail

    # The replay runs the request again with the amendment: the model sends the same value,
    # which now passes validation and reaches the API.
    openai_server.enqueue(
        reason("get_order", {"order_id": digits}),
        reflect(True),
        answer(f"Order {order.order_id} is {order.status}."),
    )
    records = reflexion_run(trace_id=str(refused.pk), auto_approve=True)

    [record] = [r for r in records if r.origin == "analyzer:stale_schema"]
    assert record.outcome == "added", record.reason
    strategy = Strategy.objects.get(pk=record.strategy_id)
    assert strategy.branch["amend"]["order_id"]["anyOf"][1] == {
        "type": "string",
        "pattern": r"^\d{7}$",
    }
    assert strategy.replay_status == "passed" and "-> 200" in strategy.replay_detail
    assert strategy.status == Strategy.Status.ACTIVE

    # 3. The next run: the prompt shows the amended schema and the value goes through.
    runtime_policy_cache_clear()
    openai_server.requests.clear()
    openai_server.enqueue(
        reason("get_order", {"order_id": digits}),
        reflect(True),
        answer(f"Order {order.order_id} is {order.status}."),
    )
    fixed, _ = run_query(agent, f"Where is order {order.order_id}?")
    prompt = openai_server.requests[0].json["messages"][1]["content"]
    assert r"^\\d{7}$" in prompt or r"^\d{7}$" in prompt
    action = fixed.steps.get(phase="action")
    assert action.ok and action.status_code == 200
    assert {"id": strategy.pk, "kind": "validation_rule"} in [
        {k: a[k] for k in ("id", "kind")} for a in action.strategies_applied
    ]
    assert first.steps.get(phase="action").status_code == 400
