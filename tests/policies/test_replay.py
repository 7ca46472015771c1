"""The replay check of every branch kind, against the sandbox served over real HTTP.

``strategy_replay`` replays the recorded failing step with the proposed branch applied
(or, for a random fault, pairs of it with and without the branch), then the tool's recent
good calls, then the whole request; only a replay that passes lets a strategy through, so
each kind must fail when its branch would not have helped — above all a ``degrade_cache``
handler with nothing cached to serve, and a handler whose upstream recovered by itself.
More on the regression replay, random faults and grounded runs:
``test_replay_correctness.py``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

import pytest
from django.db import connection

from agents.models import Tool, ToolResultCache
from agents.policy_runtime import schema_amend
from agents.prompts import canonical_json
from agents.runtime import call_signature
from policies.branches import branch_signature
from policies.documents import policy_version_create
from policies.models import Policy, Strategy
from policies.reflexion import FailureFacts, Proposal, failures_of_trace
from policies.replay import RANDOM_FAULT_PAIRS, _policy_with, replay_stages, strategy_replay
from sandbox.models import Order, Product
from sandbox.services import faultrule_set
from tests.branches import search_for_sku, sku_lookup
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.models import Job, Trace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any) -> str:
    return live_sandbox


@pytest.fixture
def order(shop: str) -> Order:
    found = Order.objects.order_by("order_id").first()
    assert found is not None
    return found


@pytest.fixture
def product(shop: str) -> Product:
    found = Product.objects.order_by("product_id").first()
    assert found is not None
    return found


def _facts(failed_trace: Any, **kwargs: Any) -> FailureFacts:
    [facts] = failures_of_trace(failed_trace(**kwargs))
    return facts


def _proposal(kind: str, branch: dict[str, Any]) -> Proposal:
    return Proposal(kind=kind, branch=branch, root_cause="r", strategy_update="s", origin="test")


def _replay(kind: str, branch: dict[str, Any], facts: FailureFacts) -> tuple[bool, str]:
    passed, detail = strategy_replay(proposal=_proposal(kind, branch), facts=facts)
    # Every replay is a Job, one unit per stage, that ran to the end and says whether the
    # strategy passed.
    stages = len(replay_stages(_proposal(kind, branch), facts))
    job = Job.objects.filter(kind=Job.Kind.REPLAY).latest("pk")
    assert (job.status, job.done, job.total) == ("finished", stages, stages)
    assert job.name == f"replay {kind} for {facts.signature}"
    assert job.message == (("passed: " if passed else "failed: ") + detail)[:300]
    # it links the replayed run when the request ran again, else the run it replayed
    run = re.search(r"replay run ([0-9a-f-]{36})", detail)
    assert job.result_url == f"/traces/{run.group(1) if run else facts.trace_id}/"
    return passed, detail


def _not_beaten(with_strategy: int, without: int) -> str:
    """The end of a paired replay's detail when the strategy does not beat no strategy."""
    n = RANDOM_FAULT_PAIRS
    return (
        f"{with_strategy} of {n} calls succeeded with the strategy, {without} of {n} without "
        "(0 pairs won, 0 lost, one-sided sign test p = 1)"
    )


def _replayed_run() -> Trace:
    return Trace.objects.get(origin=Trace.Origin.REPLAY)


def _cache(tool: str, arguments: dict[str, Any], body: str) -> None:
    key = hashlib.sha256(call_signature(tool, arguments).encode()).hexdigest()
    ToolResultCache.objects.create(signature=key, tool_name=tool, arguments=arguments, body=body)


# --- error handlers: degrade_cache ---------------------------------------------------
DEGRADE = {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", "action": "degrade_cache"}


def _upstream_failure(failed_trace: Any, order: Order) -> FailureFacts:
    return _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=500,
        error_type="INTERNAL_SERVER_ERROR",
        query=f"Where is my order {order.order_id}?",
    )


@pytest.mark.parametrize("upstream_down", [True, False], ids=["upstream-down", "upstream-up"])
def test_a_degrade_handler_with_nothing_cached_does_not_beat_no_strategy(
    failed_trace: Any, order: Order, upstream_down: bool
) -> None:
    # given nothing cached for the failed call, whether or not the upstream came back
    if upstream_down:
        faultrule_set(endpoint="orders", rate_500=1.0)
    facts = _upstream_failure(failed_trace, order)
    # a result cached for another call is not this call's result
    _cache("get_order", {"order_id": "#W0000000"}, '{"status": "pending"}')

    passed, detail = _replay("error_handler", DEGRADE, facts)

    # Untested rather than refuted: no pair could show what serving the cache does, so
    # none is sent, and it is no evidence against the handler (the negative-feedback stop
    # does not count it).
    assert (passed, detail) == (
        False,
        "inconclusive: nothing cached for this call: the handler has nothing to serve",
    )


def test_a_degrade_handler_passes_when_it_serves_the_failed_call_from_the_cache(
    failed_trace: Any, order: Order, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    faultrule_set(endpoint="orders", rate_500=1.0)
    facts = _upstream_failure(failed_trace, order)
    _cache("get_order", {"order_id": order.order_id}, f'{{"status": "{order.status}"}}')

    passed, detail = _replay("error_handler", DEGRADE, facts)

    assert passed, detail
    paired, run = detail.split("; ")
    n = RANDOM_FAULT_PAIRS
    assert paired.endswith(
        f"{n} of {n} calls succeeded with the strategy, 0 of {n} without "
        f"({n} pairs won, 0 lost, one-sided sign test p = 0.0156)"
    )
    replay = _replayed_run()
    assert run == f"replay run {replay.pk}: finished (answered_from_data)"
    # the replayed run answered from the cached result its handler served
    served = replay.steps.filter(tool_name="get_order", ok=True).latest("step_number")
    assert served.details["degraded"] is True


def test_a_degrade_handler_whose_upstream_recovered_by_itself_does_not_pass(
    failed_trace: Any, order: Order
) -> None:
    facts = _upstream_failure(failed_trace, order)
    _cache("get_order", {"order_id": order.order_id}, '{"status": "shipped"}')

    passed, detail = _replay("error_handler", DEGRADE, facts)

    assert not passed
    assert detail.endswith(_not_beaten(6, 6))


# --- error handlers: handover, retry_once, call_tool ------------------------------------
def test_a_handover_answers_nobody_so_it_never_beats_no_strategy(
    failed_trace: Any, order: Order
) -> None:
    faultrule_set(endpoint="orders", rate_500=1.0)
    facts = _upstream_failure(failed_trace, order)

    passed, detail = _replay(
        "error_handler",
        {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", "action": "handover"},
        facts,
    )

    assert not passed
    assert detail.endswith(_not_beaten(0, 0))


def test_retry_once_on_a_timeout_the_upstream_no_longer_shows_does_not_pass(
    failed_trace: Any, order: Order
) -> None:
    # given a recorded timeout and an upstream that answers now: one replay that succeeds
    # would have passed it; paired, the bare call succeeds just as often
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=None,
        error_type="TIMEOUT",
    )

    passed, detail = _replay(
        "error_handler",
        {
            "tool": "get_order",
            "on": "TIMEOUT",
            "action": "retry_once",
            "transform": {"order_id": "strip", "absent": "upper"},
        },
        facts,
    )

    assert not passed
    assert detail.endswith(_not_beaten(6, 6))


def test_retry_once_with_a_transform_the_schema_refuses_fails_like_the_runtime(
    failed_trace: Any, order: Order
) -> None:
    # the runtime validates the transformed retry too: an integer id is not a valid call
    faultrule_set(endpoint="orders", drift="require_int_id")
    facts = _facts(failed_trace, action_input={"order_id": order.order_id})

    passed, detail = _replay(
        "error_handler",
        {
            "tool": "get_order",
            "on": "TYPE_MISMATCH",
            "action": "retry_once",
            "transform": {"order_id": "digits_to_int"},
        },
        facts,
    )

    assert not passed
    assert detail.startswith("SCHEMA_VIOLATION: validator=type path=order_id")


def test_retry_once_without_a_transform_fails_while_the_upstream_fails(
    failed_trace: Any, order: Order
) -> None:
    faultrule_set(endpoint="orders", rate_500=1.0)
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=500,
        error_type="TIMEOUT",
    )

    passed, detail = _replay(
        "error_handler", {"tool": "get_order", "on": "TIMEOUT", "action": "retry_once"}, facts
    )

    # the 500s are not the timeouts it handles, and a retry would not have helped either
    assert not passed
    assert detail.endswith(_not_beaten(0, 0))


def test_call_tool_replays_the_other_tool_with_the_recorded_value(
    failed_trace: Any, product: Product, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={"sku": product.name},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        query=f"Is the {product.name} in stock?",
    )

    passed, detail = _replay("error_handler", search_for_sku(), facts)

    assert passed, detail
    call, run = detail.split("; ")
    assert call == f"search_products {canonical_json({'query': product.name})} -> 200"
    assert run == f"replay run {_replayed_run().pk}: finished (answered_from_data)"


def test_call_tool_naming_a_tool_the_agent_may_not_call_fails(
    failed_trace: Any, product: Product
) -> None:
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={"sku": product.name},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
    )

    passed, detail = _replay(
        "error_handler",
        {
            "tool": "check_inventory",
            "on": "RESOURCE_NOT_FOUND",
            "action": "call_tool",
            "call": "drop_tables",
            "input": {"query": "$arg"},
        },
        facts,
    )

    assert not passed
    assert detail.startswith("TOOL_NOT_ALLOWED: tool 'drop_tables' is not on this agent's")


def test_call_tool_with_no_recorded_argument_sends_an_empty_value_like_the_runtime(
    failed_trace: Any, product: Product, settings: Any
) -> None:
    # a recorded call without arguments: "$arg" becomes "", as in the runtime's handler
    settings.LLM_SIM_ERROR_RATES = {}
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
    )

    passed, detail = _replay("error_handler", search_for_sku(), facts)

    # ... which the other tool's schema refuses, as it would have in the run
    assert not passed
    assert detail == "SCHEMA_VIOLATION: validator=minLength path=query: '' is too short"


def test_a_replay_says_which_step_it_replays_while_its_first_call_is_out(
    failed_trace: Any, order: Order, settings: Any
) -> None:
    seen: list[tuple[str, str]] = []

    def respond(request: ApiRequest) -> tuple[Any, ...]:
        try:  # the Job as a person watching the jobs page sees it, mid-replay
            seen.append(Job.objects.values_list("status", "message").get(kind=Job.Kind.REPLAY))
        finally:
            connection.close()
        return 404, {"error": "RESOURCE_NOT_FOUND"}

    with RecordingAPI(respond=respond) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(
            failed_trace,
            action_input={"order_id": order.order_id},
            status_code=404,
            error_type="RESOURCE_NOT_FOUND",
        )
        passed, _ = _replay(
            "error_handler",
            {"tool": "get_order", "on": "RESOURCE_NOT_FOUND", "action": "retry_once"},
            facts,
        )

    assert not passed
    assert seen[0] == (
        "running",
        f"replaying step {facts.step_number} of run {facts.trace_id}",
    )


def test_an_error_handler_with_an_unknown_action_cannot_be_replayed(
    failed_trace: Any, order: Order
) -> None:
    facts = _upstream_failure(failed_trace, order)

    passed, detail = strategy_replay(
        proposal=_proposal(
            "error_handler", {"tool": "get_order", "on": "TIMEOUT", "action": "pray"}
        ),
        facts=facts,
    )

    assert (passed, detail) == (False, "cannot replay a error_handler")
    assert not Job.objects.exists()


def test_an_unknown_kind_cannot_be_replayed(failed_trace: Any, order: Order) -> None:
    facts = _upstream_failure(failed_trace, order)

    passed, detail = strategy_replay(proposal=_proposal("wish", {"tool": "get_order"}), facts=facts)

    assert (passed, detail) == (False, "cannot replay a wish")


# --- adapters ------------------------------------------------------------------------
def test_an_adapter_that_leaves_the_recorded_input_alone_fails(
    failed_trace: Any, order: Order
) -> None:
    faultrule_set(endpoint="orders", drift="require_int_id")
    facts = _facts(failed_trace, action_input={"order_id": order.order_id})

    passed, detail = _replay(
        "adapter", {"tool": "get_order", "field": "order_id", "transform": "upper"}, facts
    )

    assert (passed, detail) == (False, "the adapter does not change the recorded input")


def test_an_adapter_on_a_recorded_input_the_schema_refuses_fails(
    failed_trace: Any, order: Order
) -> None:
    lower = order.order_id.replace("#W", "#w")
    facts = _facts(failed_trace, action_input={"order_id": lower})

    passed, detail = _replay(
        "adapter", {"tool": "get_order", "field": "order_id", "transform": "upper"}, facts
    )

    assert not passed
    assert detail.startswith("SCHEMA_VIOLATION: ")


def test_an_adapter_passes_only_when_the_transformed_call_succeeds(
    failed_trace: Any, order: Order, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    faultrule_set(endpoint="orders", drift="require_int_id")
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        query=f"Where is my order {order.order_id}?",
    )
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    digits = int(order.order_id.removeprefix("#W"))

    passed, detail = _replay("adapter", branch, facts)
    assert passed, detail
    replay = _replayed_run()
    assert detail.split("; ") == [
        f'get_order {{"order_id": {digits}}} -> 200',
        "no earlier successful call of get_order to check against",
        f"replay run {replay.pk}: finished (answered_from_data)",
    ]
    # the adapter acted in the replayed run: its order lookup went out as an integer
    lookup = replay.steps.filter(tool_name="get_order", ok=True).latest("step_number")
    assert lookup.action_input == {"order_id": digits}
    assert {"id": 0, "kind": "adapter"} in lookup.strategies_applied
    faultrule_set(endpoint="orders", rate_500=1.0)
    assert _replay("adapter", branch, facts) == (
        False,
        f'get_order {{"order_id": {digits}}} -> 500',
    )


# --- pre-conditions ------------------------------------------------------------------
def _sku_not_found(failed_trace: Any, value: Any, **kwargs: Any) -> FailureFacts:
    return _facts(
        failed_trace,
        tool="check_inventory",
        action_input={"sku": value} if value is not None else {},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        **kwargs,
    )


def test_a_pre_condition_looks_the_id_up_and_the_call_then_passes(
    failed_trace: Any, product: Product, settings: Any
) -> None:
    # the replayed run's model sends the product name as the SKU, as the failed run did
    settings.LLM_SIM_ERROR_RATES = {"name_for_sku": 1.0}
    facts = _sku_not_found(failed_trace, product.name, query=f"Is the {product.name} in stock?")

    passed, detail = _replay("pre_condition", sku_lookup(), facts)

    assert passed, detail
    call, regression, run = detail.split("; ")
    # the call went out with the looked-up SKU in place of the name
    assert call.startswith('check_inventory {"sku": "') and call.endswith("-> 200")
    assert product.name not in call
    assert regression == "no earlier successful call of check_inventory to check against"
    replay = _replayed_run()
    assert run == f"replay run {replay.pk}: finished (answered_from_data)"
    assert any(
        {"id": 0, "kind": "pre_condition"} in step.strategies_applied
        for step in replay.steps.filter(tool_name="check_inventory")
    )


def test_a_replay_run_is_not_announced_as_an_ended_run(
    failed_trace: Any, product: Product, settings: Any
) -> None:
    # a replay run is an experiment: the loop must neither score the strategies it applied
    # nor learn from its failures, so it never reaches run_ended's receivers
    from agents.signals import run_ended

    settings.LLM_SIM_ERROR_RATES = {"name_for_sku": 1.0}
    facts = _sku_not_found(failed_trace, product.name, query=f"Is the {product.name} in stock?")
    announced: list[str] = []

    def heard(sender: Any, *, trace_id: str, **_: Any) -> None:
        announced.append(trace_id)

    run_ended.connect(heard, dispatch_uid="test.replay_not_announced")
    try:
        passed, detail = _replay("pre_condition", sku_lookup(), facts)
    finally:
        run_ended.disconnect(dispatch_uid="test.replay_not_announced")

    assert passed, detail
    assert _replayed_run().pk is not None
    assert announced == []


@pytest.mark.parametrize("value", ["AWH-2041-BLK", None], ids=["already-an-id", "no-argument"])
def test_a_pre_condition_that_would_not_fire_fails(
    failed_trace: Any, product: Product, value: str | None
) -> None:
    facts = _sku_not_found(failed_trace, value)

    passed, detail = _replay("pre_condition", sku_lookup(), facts)

    assert (passed, detail) == (False, "the pre-condition would not fire on the recorded input")


def test_a_pre_condition_whose_lookup_input_is_invalid_fails(
    failed_trace: Any, product: Product
) -> None:
    # search_products wants at least two characters
    facts = _sku_not_found(failed_trace, "x")

    passed, detail = _replay("pre_condition", sku_lookup(), facts)

    assert not passed
    assert detail.startswith("lookup invalid: validator=minLength")


def test_a_pre_condition_whose_lookup_finds_nothing_fails(
    failed_trace: Any, product: Product
) -> None:
    facts = _sku_not_found(failed_trace, "Quantum Teapot Deluxe")

    passed, detail = _replay("pre_condition", sku_lookup(), facts)

    assert (passed, detail) == (
        False,
        "lookup search_products found nothing for 'Quantum Teapot Deluxe'",
    )


def test_a_pre_condition_whose_lookup_answers_no_json_fails(
    failed_trace: Any, product: Product, support_agent: Any, shop: str
) -> None:
    # a lookup endpoint answering an HTML page instead of JSON
    page = Tool.objects.create(
        name="lookup_page",
        description="Looks a sku up on a page.",
        params_schema={"type": "object", "properties": {"query": {"type": "string"}}},
        endpoint_template=shop.removesuffix("/sandbox/api") + "/accounts/login/",
    )
    page.allowed_agents.add(support_agent)
    facts = _sku_not_found(failed_trace, product.name)

    passed, detail = _replay("pre_condition", sku_lookup(call="lookup_page"), facts)

    assert (passed, detail) == (False, f"lookup lookup_page found nothing for {product.name!r}")


# --- validation rules ----------------------------------------------------------------
def test_a_validation_rule_passes_when_it_rejects_the_recorded_input(
    failed_trace: Any, product: Product, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"limit": 3},
        error_type="MISSING_REQUIRED_FIELD",
        query=f"Is the {product.name} in stock?",
    )

    passed, detail = _replay(
        "validation_rule", {"tool": "search_products", "schema": {"required": ["query"]}}, facts
    )

    assert passed, detail
    assert detail.split("; ") == [
        "the rule rejects the recorded input before the API call: 'query' is a required property",
        "no earlier successful call of search_products to check against",
        f"replay run {_replayed_run().pk}: finished (answered_from_data)",
    ]


def test_a_validation_rule_the_recorded_input_satisfies_fails(
    failed_trace: Any, support_agent: Any
) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "jacket"},
        error_type="MISSING_REQUIRED_FIELD",
    )

    passed, detail = _replay(
        "validation_rule", {"tool": "search_products", "schema": {"required": ["query"]}}, facts
    )

    assert (passed, detail) == (
        False,
        "the rule accepts the recorded input, so it would not have helped",
    )


# --- prompt hints: the whole request again --------------------------------------------
@pytest.mark.parametrize("orders_down", [False, True], ids=["upstream-up", "upstream-down"])
def test_a_prompt_hint_replays_the_whole_request_with_the_hint_applied(
    failed_trace: Any, order: Order, settings: Any, orders_down: bool
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    if orders_down:
        faultrule_set(endpoint="orders", rate_500=1.0)
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        query=f"Where is my order {order.order_id}?",
    )
    hint = {"text": "Quote the order id exactly as the customer gave it.", "error_type": "X"}

    passed, detail = _replay("prompt_hint", hint, facts)

    replay = Trace.objects.get(origin=Trace.Origin.REPLAY)
    original = Trace.objects.get(pk=facts.trace_id)
    assert replay.source == "replay" and replay.query == facts.query
    assert (replay.agent_id, replay.llm_backend, replay.llm_model, replay.customer_id) == (
        original.agent_id,
        original.llm_backend,
        original.llm_model,
        original.customer_id,
    )
    assert replay.policy_version.endswith("+replay")
    # the hint reached the model's prompt: the reasoning steps list it as applied
    applied = [a for step in replay.steps.all() for a in step.strategies_applied]
    assert {"id": 0, "kind": "prompt_hint", "error_type": "X"} in applied
    # the replay is not itself learned from
    assert not replay.proposals.exists()
    job = Job.objects.get(kind=Job.Kind.REPLAY)
    assert job.result_url == f"/traces/{replay.pk}/"
    if orders_down:
        # the run ends without a grounded answer
        assert not passed
        assert detail == f"replay run {replay.pk}: failed (failed), no grounded answer"
    else:
        assert passed, detail
        assert replay.status == "finished"
        assert detail == f"replay run {replay.pk}: finished (answered_from_data)"


def test_a_prompt_hint_from_a_random_fault_is_rejected_without_a_replay(
    failed_trace: Any, order: Order
) -> None:
    facts = _upstream_failure(failed_trace, order)
    hint = {"text": "Quote the order id exactly as the customer gave it.", "error_type": "X"}

    passed, detail = strategy_replay(proposal=_proposal("prompt_hint", hint), facts=facts)

    assert (passed, detail) == (
        False,
        "INTERNAL_SERVER_ERROR is a random fault: a prompt hint does not change the call, "
        "so it cannot beat no strategy on paired replays",
    )
    assert not Trace.objects.filter(origin=Trace.Origin.REPLAY).exists()


@pytest.mark.parametrize("error_type", ["RESPONSE_TOO_LARGE", "INVALID_ENDPOINT", "UNAUTHORIZED"])
def test_a_prompt_hint_for_a_failure_beyond_the_prompt_is_rejected_without_a_replay(
    failed_trace: Any, order: Order, error_type: str
) -> None:
    """An unseen fault (a 5 MB body now and then) met the catch-all hint, and one lucky
    replayed run sent that hint to review."""
    facts = replace(_upstream_failure(failed_trace, order), error_type=error_type)
    hint = {"text": "Quote the order id exactly as the customer gave it.", "error_type": "X"}

    passed, detail = strategy_replay(proposal=_proposal("prompt_hint", hint), facts=facts)

    assert not passed and detail.startswith(f"{error_type} comes from the upstream")
    assert not Trace.objects.filter(origin=Trace.Origin.REPLAY).exists()


# --- wait_retry: a random fault, judged on paired replays --------------------------------
@pytest.fixture
def rate_limited(failed_trace: Any, order: Order) -> FailureFacts:
    """A recorded 429 on the order lookup."""
    return _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=429,
        error_type="RATE_LIMITED",
        query=f"Where is my order {order.order_id}?",
    )


def _wait_retry(facts: FailureFacts, **bounds: Any) -> tuple[bool, str]:
    return _replay(
        "error_handler",
        {"tool": "get_order", "on": "RATE_LIMITED", "action": "wait_retry", **bounds},
        facts,
    )


def test_wait_retry_from_a_429_the_upstream_no_longer_sends_does_not_pass(
    rate_limited: FailureFacts,
) -> None:
    passed, detail = _wait_retry(rate_limited, max_retries=1, max_wait_s=5)
    assert not passed
    assert detail.endswith(_not_beaten(6, 6))


@pytest.mark.parametrize(
    ("max_wait_s", "requests"),
    [(5, 2 * RANDOM_FAULT_PAIRS), (1, 2 * RANDOM_FAULT_PAIRS), (0.5, RANDOM_FAULT_PAIRS)],
    ids=["waits-as-asked", "waits-exactly-its-cap", "keeps-to-its-cap"],
)
def test_wait_retry_waits_as_asked_within_its_cap_and_fails_while_the_upstream_refuses(
    failed_trace: Any, order: Order, settings: Any, max_wait_s: float, requests: int
) -> None:
    def refusing(request: ApiRequest) -> tuple[Any, ...]:
        return 429, {"error": "RATE_LIMITED"}, {"Retry-After": "1"}

    with RecordingAPI(respond=refusing) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(
            failed_trace,
            action_input={"order_id": order.order_id},
            status_code=429,
            error_type="RATE_LIMITED",
        )
        passed, detail = _wait_retry(facts, max_retries=1, max_wait_s=max_wait_s)

    assert not passed
    assert detail.endswith(_not_beaten(0, 0))
    # asked for 1 s: within a 5 s cap, or exactly at a 1 s one, each pair retried once; over
    # a 0.5 s cap, never
    assert len(api.requests) == requests


def test_wait_retry_on_a_recorded_call_that_cannot_go_out_again_does_not_pass(
    failed_trace: Any, order: Order
) -> None:
    # a recorded call without the order id its endpoint needs fails both ways
    facts = _facts(failed_trace, action_input={}, status_code=429, error_type="RATE_LIMITED")
    passed, detail = _wait_retry(facts, max_retries=1, max_wait_s=5)
    assert not passed
    assert detail.endswith(_not_beaten(0, 0))


def test_a_random_fault_is_replayed_with_the_arguments_the_call_sent(
    failed_trace: Any, order: Order, make_strategy: Any, settings: Any
) -> None:
    # given a live adapter that sends order ids as integers to the drifted order API
    settings.LLM_SIM_ERROR_RATES = {}
    settings.POLICY_PUBLISH = "at_once"
    from policies.services import strategy_activate

    strategy_activate(
        strategy=make_strategy(status="proposed"), author_kind="reviewer", at_once=True
    )
    faultrule_set(endpoint="orders", drift="require_int_id", rate_500=1.0)
    digits = int(order.order_id.removeprefix("#W"))
    # and a 500 recorded on the call as it went out (an integer the tool's schema refuses)
    facts = _facts(
        failed_trace,
        action_input={"order_id": digits},
        status_code=500,
        error_type="INTERNAL_SERVER_ERROR",
        query=f"Where is my order {order.order_id}?",
    )
    _cache("get_order", {"order_id": digits}, f'{{"status": "{order.status}"}}')

    passed, detail = _replay("error_handler", DEGRADE, facts)

    assert passed, detail
    assert f'paired replays of get_order {{"order_id": {digits}}}: 6 of 6 calls' in detail
    assert detail.endswith(": finished (answered_from_data)")


LIVE_RULE = {"type": "string", "pattern": "^A-\\d+$"}
CANDIDATE_RULE = {"type": "string", "pattern": "^B-\\d+$"}


def test_the_candidates_amendment_wins_over_an_active_one_of_the_same_version(db: None) -> None:
    """A replay runs the policy a run would get plus the candidate. Where both amend the
    same property at the same version, the candidate's rule is the one a call is checked
    against: the replay tests the candidate, not what is live already."""
    live_branch = {"tool": "get_order", "amend": {"order_id": LIVE_RULE}, "version": 1}
    policy, _ = Policy.objects.get_or_create(intent="", tool_name="get_order")
    live = Strategy.objects.create(
        policy=policy,
        kind="validation_rule",
        tool_name="get_order",
        root_cause="the API changed its order ids",
        strategy_update="check order ids against the new form",
        branch=live_branch,
        signature=branch_signature("validation_rule", live_branch),
        status=Strategy.Status.ACTIVE,
        origin="human",
    )
    policy_version_create(strategies=[live], author_kind="initial")
    candidate = {"tool": "get_order", "amend": {"order_id": CANDIDATE_RULE}, "version": 1}
    facts = FailureFacts(
        trace_id="t",
        query="q",
        agent_id=0,
        step_number=1,
        tool="get_order",
        action_input={"order_id": "B-1"},
        endpoint="",
        status_code=None,
        error_type="VALIDATION_ERROR",
        response_summary="",
        error_detail="",
    )

    replayed = _policy_with(_proposal("validation_rule", candidate), facts)

    amendments = replayed.schema_amendments["get_order"]
    assert len(amendments) == 2
    schema = schema_amend({"type": "object", "properties": {}}, amendments)
    assert schema["properties"]["order_id"] == CANDIDATE_RULE
