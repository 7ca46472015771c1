"""An A/B experiment through the real runtime: the simulated model, the sandbox over HTTP,
and a learned adapter for a drifted API. The treatment arm applies it and answers; the
control arm runs without learned strategies, fails the same question, and does not feed
Reflexion."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.services import run_execute
from policies.experiments import (
    CONTROL,
    TREATMENT,
    experiment_arm_assign,
    experiment_cache_clear,
    experiment_create,
    experiment_start,
)
from policies.selectors import runtime_policy_cache_clear
from policies.services import strategy_activate
from policies.tasks import reflexion_enqueue
from sandbox.models import Order
from sandbox.services import faultrule_set
from tests.policies.conftest import make_strategy  # noqa: F401
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def publish_at_once(settings: Any) -> None:
    """Approvals here publish the active version at once; the canary path has its own
    tests (tests/policies/test_rollouts.py)."""
    settings.POLICY_PUBLISH = "at_once"


@pytest.fixture
def drifted_shop_with_learned_adapter(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    make_strategy: Any,  # noqa: F811
) -> Any:
    """get_order now requires the bare integer id; the loop has learned to convert it."""
    faultrule_set(endpoint="orders", drift="require_int_id")
    adapter = make_strategy(status="proposed")
    strategy_activate(strategy=adapter, author_kind="auto_merge")
    runtime_policy_cache_clear()
    experiment_cache_clear()
    yield adapter
    runtime_policy_cache_clear()
    experiment_cache_clear()


def _session_in(arm: str, experiment_pk: int) -> str:
    """The first session id that the experiment's hash puts in ``arm``."""
    return next(
        f"conv-{i}"
        for i in range(1000)
        if experiment_arm_assign(
            experiment_pk=experiment_pk, unit=f"session:conv-{i}", traffic_percent=100
        )
        == arm
    )


def _ask(agent: Any, session_id: str, query: str) -> Trace:
    trace = trace_create(
        agent_id=agent.pk, query=query, llm_backend="simulated", session_id=session_id
    )
    async_to_sync(run_execute)(trace_id=str(trace.pk), reflect=False)
    trace.refresh_from_db()
    return trace


def test_the_learned_adapter_answers_in_treatment_and_control_runs_without_it(
    drifted_shop_with_learned_adapter: Any, support_agent: Any, settings: Any
) -> None:
    adapter = drifted_shop_with_learned_adapter
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    experiment = experiment_create(name="loop on vs off", traffic_percent=100)
    experiment_start(experiment_id=experiment.pk)
    query = f"Where is my order {order.order_id}?"

    treated = _ask(support_agent, _session_in(TREATMENT, experiment.pk), query)
    control = _ask(support_agent, _session_in(CONTROL, experiment.pk), query)

    assert (treated.experiment_pk, treated.experiment_arm) == (experiment.pk, TREATMENT)
    assert (control.experiment_pk, control.experiment_arm) == (experiment.pk, CONTROL)
    # treatment: the active version, the adapter fired, the drifted API answered
    assert treated.policy_version == "v1"
    calls = list(treated.steps.filter(phase="action", tool_name="get_order"))
    assert [c.status_code for c in calls] == [200]
    assert {"id": adapter.pk, "kind": "adapter"} in calls[0].strategies_applied
    assert treated.status == "finished" and treated.retries == 0
    # control: no version, nothing applied, the same question fails on the drift
    assert control.policy_version == ""
    assert not control.steps.exclude(strategies_applied=[]).exists()
    failed = control.steps.filter(phase="action", tool_name="get_order", ok=False)
    assert failed.filter(error_type="TYPE_MISMATCH").exists()
    assert control.status != "finished"
    assert control.retries > treated.retries  # it tried the refused call again
    # and the control arm is the loop switched off: its failure is not learned from
    settings.REFLEXION_ENABLED = True
    assert reflexion_enqueue(trace_id=str(control.pk)) is False


def test_a_conversation_keeps_its_arm_for_every_run(
    drifted_shop_with_learned_adapter: Any, support_agent: Any
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    experiment = experiment_create(name="sticky", traffic_percent=100)
    experiment_start(experiment_id=experiment.pk)
    session = _session_in(CONTROL, experiment.pk)

    runs = [_ask(support_agent, session, f"Where is my order {order.order_id}?") for _ in range(3)]

    assert {(t.experiment_arm, t.policy_version) for t in runs} == {(CONTROL, "")}


def test_without_a_running_experiment_runs_get_the_active_version(
    drifted_shop_with_learned_adapter: Any, support_agent: Any
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    experiment_create(name="never started")

    trace = _ask(support_agent, "conv-x", f"Where is my order {order.order_id}?")

    assert (trace.experiment_pk, trace.experiment_arm) == (None, "")
    assert trace.policy_version == "v1" and trace.status == "finished"
