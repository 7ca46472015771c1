"""Canary rollouts end to end on a real Celery worker fed through the Redis broker.

A failing scenario is learned by Reflexion on the worker, approved in the review queue,
starts on 1% and is promoted to 100% by ``policies.evaluate_rollouts`` (sent to the worker
the way beat sends it) as simulated customer traffic runs through the sandbox over HTTP;
a harmful strategy is rolled back automatically. Both write their numbers to
``RolloutDecision`` rows and print them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from agents.services import run_start
from config.celery import app as celery_app
from policies.models import Rollout, RolloutDecision, Strategy
from policies.rollout_stats import rollout_routes_canary, routing_key
from policies.tasks import evaluate_rollouts
from reviews.models import ReviewItem
from reviews.services import review_item_approve
from sandbox.models import Order
from sandbox.services import faultrule_set
from tests.policies.conftest import make_strategy  # noqa: F401
from traces.models import Trace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.celery_worker]

PER_ARM = 4  # runs per arm and round; ROLLOUT_MIN_SAMPLES below


@pytest.fixture
def worker(settings: Any) -> Iterator[Any]:
    settings.AGENT_EXECUTOR = "celery"
    settings.LLM_SIM_ERROR_RATES = {}
    settings.POLICY_PUBLISH = "canary"
    settings.ROLLOUT_SCHEDULE = [1, 5, 25, 50, 100]
    settings.ROLLOUT_MIN_SAMPLES = PER_ARM
    settings.ROLLOUT_LATENCY_MIN_SAMPLES = PER_ARM
    # Fixed runs answer (more steps) where stable's fail fast on the drifted API: their p95
    # is a few hundred ms higher here, so the 100 ms production budget is widened.
    settings.ROLLOUT_LATENCY_BUDGET_MS = 1000
    settings.ROLLOUT_ALPHA = 0.05
    settings.ROLLOUT_BURST = 3
    settings.ROLLOUT_WINDOW = 3600
    assert celery_app.conf.broker_url.startswith("redis://")
    celery_app.control.purge()
    with start_worker(
        celery_app,
        pool="threads",
        concurrency=4,
        queues=["agents", "default", "reflexion"],
        perform_ping_check=False,
        shutdown_timeout=30,
    ) as running:
        yield running


def wait_for(check: Any, *, timeout: float = 90.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)  # polling the database the worker writes
    raise AssertionError(f"timed out waiting for {what}")


def customers(rollout: Rollout, *, canary: bool, count: int, tag: str) -> list[str]:
    """Customer ids the rollout's current percentage sends to the canary (or to stable)."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        customer = f"{tag}-{i}"
        on = rollout_routes_canary(
            rollout_id=rollout.pk, key=routing_key(customer_id=customer), percent=rollout.percent
        )
        if on == canary:
            found.append(customer)
        i += 1
    return found


def traffic_round(rollout: Rollout, agent: Any, orders: list[Order], tag: str) -> None:
    """PER_ARM customers on each arm ask about an order; every run goes through the broker."""
    expected: dict[str, str] = {}
    stable_label = rollout.stable.label if rollout.stable is not None else ""
    for on in (True, False):
        for n, customer in enumerate(customers(rollout, canary=on, count=PER_ARM, tag=tag)):
            order = orders[n % len(orders)]
            trace = run_start(
                agent=agent, query=f"Where is my order {order.order_id}?", customer_id=customer
            )
            expected[str(trace.pk)] = rollout.version.label if on else stable_label
    wait_for(
        lambda: (
            Trace.objects.filter(pk__in=expected, status__in=Trace.TERMINAL_STATUSES).count()
            == len(expected)
        ),
        what="the round's runs",
    )
    # the worker routed every customer to the arm its bucket names
    ran = dict(Trace.objects.filter(pk__in=expected).values_list("pk", "policy_version"))
    assert {str(k): v for k, v in ran.items()} == expected


def evaluate(rollout: Rollout) -> RolloutDecision:
    """Send the evaluator to the worker the way beat does and wait for its decision."""
    last = rollout.decisions.order_by("-pk").values_list("pk", flat=True).first() or 0
    evaluate_rollouts.delay()
    return wait_for(
        lambda: rollout.decisions.filter(pk__gt=last).order_by("-pk").first(),
        what="the evaluator's decision",
    )


def numbers(decision: RolloutDecision) -> str:
    return (
        f"{decision.action} {decision.from_percent}%->{decision.to_percent}% "
        f"n={decision.canary_n}/{decision.stable_n} "
        f"err={decision.canary_error_rate}/{decision.stable_error_rate} "
        f"z={decision.statistic} p={decision.p_value} "
        f"p95={decision.canary_p95_ms}/{decision.stable_p95_ms}ms: {decision.reason}"
    )


def test_a_learned_fix_goes_from_1_percent_to_100_on_its_own(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    ops_user: Any,
    settings: Any,
    worker: Any,
) -> None:
    settings.REFLEXION_ENABLED = True
    settings.REVIEW_AUTO_MERGE = False
    faultrule_set(endpoint="orders", drift="require_int_id")
    orders = list(Order.objects.order_by("order_id")[:4])
    # a customer's run fails on the drifted API; Reflexion on the worker proposes a fix
    first = run_start(
        agent=support_agent, query=f"Where is my order {orders[0].order_id}?", customer_id="c0"
    )
    wait_for(lambda: Trace.objects.get(pk=first.pk).is_terminal, what="the failing run")
    item = wait_for(
        lambda: ReviewItem.objects.filter(reason="low_confidence").first(),
        what="Reflexion's proposal in the review queue",
    )
    settings.REFLEXION_ENABLED = False  # the lesson is learned; keep the worker on traffic
    review_item_approve(item_id=item.pk, user=ops_user, note="looks right")
    rollout = Rollout.objects.get()
    assert rollout.percent == 1 and rollout.strategy.kind == "adapter"

    history = []
    for round_number in range(8):
        rollout.refresh_from_db()
        if not rollout.is_open:
            break
        traffic_round(rollout, support_agent, orders, tag=f"r{round_number}")
        decision = evaluate(rollout)
        history.append(decision)
        print(numbers(decision))  # the recorded numbers, in the test log
    rollout.refresh_from_db()
    assert rollout.state == "completed", [numbers(d) for d in history]
    assert [(d.action, d.to_percent) for d in history] == [
        ("promote", 5),
        ("promote", 25),
        ("promote", 50),
        ("complete", 100),
    ]
    for decision in history:
        assert decision.actor_kind == "evaluator"
        assert decision.canary_n >= PER_ARM and decision.stable_n >= PER_ARM
        assert decision.canary_error_rate is not None and decision.stable_error_rate is not None
        assert decision.canary_error_rate <= 0.8 * decision.stable_error_rate
        assert decision.p_value is not None and decision.p_value < 0.05
        assert decision.canary_p95_ms is not None and decision.stable_p95_ms is not None
    rollout.version.refresh_from_db()
    assert rollout.version.is_active
    assert Strategy.objects.get(pk=rollout.strategy_id).status == "active"


def test_a_harmful_strategy_is_rolled_back_on_its_own(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    ops_user: Any,
    make_strategy: Any,  # noqa: F811
    worker: Any,
) -> None:
    orders = list(Order.objects.order_by("order_id")[:4])
    # a rule that refuses every order id the shop uses (a bad edit a reviewer let through)
    harmful = make_strategy(
        kind="validation_rule",
        branch={"tool": "get_order", "schema": {"properties": {"order_id": {"minLength": 40}}}},
        error_type="INVALID_PARAMETER",
        status=Strategy.Status.IN_REVIEW,
    )
    item = ReviewItem.objects.create(strategy=harmful, reason=ReviewItem.Reason.LOW_CONFIDENCE)
    review_item_approve(item_id=item.pk, user=ops_user)
    rollout = Rollout.objects.get()
    assert rollout.percent == 1

    traffic_round(rollout, support_agent, orders, tag="h")
    decision = evaluate(rollout)
    print(numbers(decision))
    rollout.refresh_from_db()
    assert (rollout.state, rollout.percent) == ("rolled_back", 0), numbers(decision)
    assert decision.action == "rollback" and decision.actor_kind == "evaluator"
    assert decision.from_percent == 1  # it never reached more than 1% of customers
    assert decision.canary_n == PER_ARM and decision.stable_n == PER_ARM
    assert decision.canary_error_rate == 1.0 and decision.stable_error_rate == 0.0
    assert decision.details["burst"] == {"INVALID_PARAMETER": PER_ARM}
    # rejected by the rollback, or already deprecated by its failed applications
    assert Strategy.objects.get(pk=harmful.pk).status in ("rejected", "deprecated")
    assert not rollout.version.is_active
