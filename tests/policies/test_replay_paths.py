"""The replay's less travelled paths, each against a real HTTP API on loopback
(``RecordingAPI``, through ``SANDBOX_BASE_URL``): error handlers replayed on a failure that
is not a random fault, the paired replays of handlers and call-changing strategies, the
regression replay's counts, and the schema-amendment replay's refusals."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.models import Tool, ToolResultCache
from agents.repairs import RepairContext
from agents.runtime import call_signature
from policies.reflexion import FailureFacts, Proposal, failures_of_trace
from policies.replay import (
    RANDOM_FAULT_PAIRS,
    _paired_replay,
    _regression_replay,
    _repair_context_at,
    _strategy_replay,
    strategy_replay,
)
from tests.branches import sku_lookup
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = "#W1000001"
SHOWN = f'get_order {{"order_id": "{ORDER}"}}'
N = RANDOM_FAULT_PAIRS


@pytest.fixture
def agent(support_agent: Any, error_rules: Any) -> Any:
    return support_agent


def _facts(failed_trace: Any, **kwargs: Any) -> FailureFacts:
    [facts] = failures_of_trace(failed_trace(**kwargs))
    return facts


def _proposal(kind: str, branch: dict[str, Any]) -> Proposal:
    return Proposal(kind=kind, branch=branch, root_cause="r", strategy_update="s", origin="test")


def _cache(tool: str, arguments: dict[str, Any], body: str) -> None:
    key = hashlib.sha256(call_signature(tool, arguments).encode()).hexdigest()
    ToolResultCache.objects.create(signature=key, tool_name=tool, arguments=arguments, body=body)


def _paired(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    return async_to_sync(_paired_replay)(proposal, facts)


def _counts(with_strategy: int, without: int, wins: int, losses: int, p: str) -> str:
    return (
        f"{with_strategy} of {N} calls succeeded with the strategy, {without} of {N} without "
        f"({wins} pair{'' if wins == 1 else 's'} won, {losses} lost, "
        f"one-sided sign test p = {p})"
    )


def _orders(request: ApiRequest) -> list[str]:
    return [request.path.rsplit("/", 1)[-1]]


# --- error handlers on a failure that is not a random fault: the repaired call ----------
def test_a_handover_on_a_missing_order_replays_as_handing_over(
    failed_trace: Any, agent: Any
) -> None:
    facts = _facts(failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND")
    branch = {"tool": "get_order", "on": "RESOURCE_NOT_FOUND", "action": "handover"}

    assert _strategy_replay(_proposal("error_handler", branch), facts) == (
        True,
        "hands the request over to a person instead of failing",
    )


DEGRADE_404 = {"tool": "get_order", "on": "RESOURCE_NOT_FOUND", "action": "degrade_cache"}


def test_a_degrade_handler_with_nothing_cached_for_the_call_fails(
    failed_trace: Any, agent: Any
) -> None:
    facts = _facts(failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND")
    _cache("get_order", {"order_id": "#W0000000"}, '{"status": "pending"}')

    assert _strategy_replay(_proposal("error_handler", DEGRADE_404), facts) == (
        False,
        "inconclusive: nothing cached for this call: the handler has nothing to serve",
    )


@pytest.mark.parametrize(
    ("status", "upstream"), [(200, "recovered"), (404, "still failing")], ids=["up", "down"]
)
def test_a_degrade_handler_with_a_cached_result_serves_it_and_says_how_upstream_is(
    failed_trace: Any, agent: Any, settings: Any, status: int, upstream: str
) -> None:
    with RecordingAPI(respond=lambda request: (status, {"order_id": ORDER})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND")
        _cache("get_order", {"order_id": ORDER}, '{"status": "shipped"}')

        passed, detail = _strategy_replay(_proposal("error_handler", DEGRADE_404), facts)

    assert (passed, detail) == (
        True,
        f"serves cached data when the call fails (upstream {upstream}: {SHOWN} -> {status})",
    )
    assert [r.path.rsplit("/", 1)[-1] for r in api.requests] == ["%23W1000001"]


def _wait_retry(**bounds: Any) -> Proposal:
    branch = {"tool": "get_order", "on": "QUOTA_EXCEEDED", "action": "wait_retry", **bounds}
    return _proposal("error_handler", branch)


def test_wait_retry_waits_the_retry_after_and_passes_when_the_second_call_succeeds(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    def once_limited(request: ApiRequest) -> tuple[Any, ...]:
        if len(api.requests) == 1:
            return 429, {"error": "RATE_LIMITED"}, {"Retry-After": "0"}
        return 200, {"order_id": ORDER, "status": "shipped"}

    with RecordingAPI(respond=once_limited) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace, status_code=429, error_type="QUOTA_EXCEEDED")

        passed, detail = _strategy_replay(_wait_retry(max_retries=2, max_wait_s=5), facts)

    assert (passed, detail) == (True, f"{SHOWN} -> 429, after 0 s: 200")
    assert len(api.requests) == 2


def test_wait_retry_does_not_wait_longer_than_its_cap(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    def limited(request: ApiRequest) -> tuple[Any, ...]:
        return 429, {"error": "RATE_LIMITED"}, {"Retry-After": "60"}

    with RecordingAPI(respond=limited) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace, status_code=429, error_type="QUOTA_EXCEEDED")

        passed, detail = _strategy_replay(_wait_retry(max_retries=3, max_wait_s=5), facts)

    assert (passed, detail) == (False, f"{SHOWN} -> 429, asked to wait 60 s, over the 5 s cap")
    assert len(api.requests) == 1


def test_wait_retry_without_a_retry_after_backs_off_and_fails_while_refused(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    with RecordingAPI(respond=lambda request: (503, {"error": "down"})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace, status_code=503, error_type="QUOTA_EXCEEDED")

        passed, detail = _strategy_replay(_wait_retry(max_retries=1, max_wait_s=5), facts)

    # no Retry-After: the first retry waits 2**0 = 1 s
    assert (passed, detail) == (False, f"{SHOWN} -> 503, after 1 s: 503")
    assert len(api.requests) == 2


def test_wait_retry_on_an_input_the_schema_refuses_fails_without_a_call(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    with RecordingAPI() as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(
            failed_trace,
            action_input={"order_id": "#w1000001"},
            status_code=429,
            error_type="QUOTA_EXCEEDED",
        )

        passed, detail = _strategy_replay(_wait_retry(max_retries=1), facts)

    assert not passed
    assert detail.startswith("SCHEMA_VIOLATION: ")
    assert not api.requests


def test_a_strategy_the_repaired_call_cannot_replay_says_so(failed_trace: Any, agent: Any) -> None:
    # strategy_replay refuses these before any stage; the call stage refuses them too
    facts = _facts(failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND")
    pray = {"tool": "get_order", "on": "RESOURCE_NOT_FOUND", "action": "pray"}

    assert _strategy_replay(_proposal("error_handler", pray), facts) == (
        False,
        "cannot replay a error_handler",
    )
    assert _strategy_replay(_proposal("wish", {"tool": "get_order"}), facts) == (
        False,
        "cannot replay a wish",
    )


# --- error handlers on a random fault: paired replays -----------------------------------
def _down(failed_trace: Any, **kwargs: Any) -> FailureFacts:
    values: dict[str, Any] = {"status_code": 500, "error_type": "INTERNAL_SERVER_ERROR"}
    values.update(kwargs)
    return _facts(failed_trace, **values)


def test_retry_once_with_a_transform_beats_an_upstream_that_fails_every_other_call(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    def every_other(request: ApiRequest) -> tuple[Any, ...]:
        if len(api.requests) % 2:
            return 500, {"error": "boom"}
        return 200, {"order_id": ORDER}

    branch = {
        "tool": "get_order",
        "on": "INTERNAL_SERVER_ERROR",
        "action": "retry_once",
        "transform": {"order_id": "strip"},
    }
    with RecordingAPI(respond=every_other) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _paired(_proposal("error_handler", branch), _down(failed_trace))

    assert passed, detail
    assert detail.endswith(_counts(N, 0, N, 0, "0.0156"))
    assert len(api.requests) == 2 * N


def test_a_handler_acts_on_an_upstream_it_cannot_reach_at_all(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    # an upstream that refuses connections: no HTTP status, the executor's own error code
    # is what classifies the failure, and the degrade handler is written for exactly that
    with RecordingAPI(respond=lambda request: (200, {"order_id": ORDER})) as api:
        gone = api.base_url
    settings.SANDBOX_BASE_URL = gone
    _cache("get_order", {"order_id": ORDER}, '{"status": "shipped"}')
    degrade = {
        "tool": "get_order",
        "on": "CONNECTION_ERROR",
        "action": "degrade_cache",
    }
    facts = _down(failed_trace, status_code=None, error_type="CONNECTION_ERROR")

    passed, detail = _paired(_proposal("error_handler", degrade), facts)

    assert passed, detail
    assert detail.endswith(_counts(N, 0, N, 0, "0.0156"))


@pytest.mark.parametrize(
    "branch",
    [
        # the transformed retry is an integer id the tool's schema refuses: never sent
        {"action": "retry_once", "transform": {"order_id": "digits_to_int"}},
        # a 500 is not a 429 or 503: wait_retry does not retry it
        {"action": "wait_retry", "max_retries": 2, "max_wait_s": 1},
        # the other tool is not one the agent may call
        {"action": "call_tool", "call": "drop_tables", "input": {"query": "$arg"}},
    ],
    ids=["retry-invalid", "wait-not-429", "call-not-allowed"],
)
def test_a_handler_that_cannot_act_on_a_500_does_not_beat_no_strategy(
    failed_trace: Any, agent: Any, settings: Any, branch: dict[str, Any]
) -> None:
    handler = {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", **branch}
    with RecordingAPI(respond=lambda request: (500, {"error": "boom"})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _paired(_proposal("error_handler", handler), _down(failed_trace))

    assert not passed
    assert detail.endswith(_counts(0, 0, 0, 0, "1"))
    # only the bare calls went out
    assert len(api.requests) == N


def test_call_tool_beats_an_inventory_that_is_down_by_searching_instead(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    def inventory_down(request: ApiRequest) -> tuple[Any, ...]:
        if "/inventory/" in request.path:
            return 500, {"error": "boom"}
        return 200, {"results": [{"name": "Cap", "skus": [{"sku": "CAP-0001-BL"}]}]}

    handler = {
        "tool": "check_inventory",
        "on": "INTERNAL_SERVER_ERROR",
        "action": "call_tool",
        "call": "search_products",
        "input": {"query": "$arg"},
    }
    with RecordingAPI(respond=inventory_down) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _down(failed_trace, tool="check_inventory", action_input={"sku": "Blue Cap"})
        passed, detail = _paired(_proposal("error_handler", handler), facts)

    assert passed, detail
    assert detail.endswith(_counts(N, 0, N, 0, "0.0156"))
    searches = [r for r in api.requests if "/inventory/" not in r.path]
    assert len(searches) == N
    assert all(r.query.get("q") == ["Blue Cap"] for r in searches)


def test_a_random_fault_on_a_tool_the_agent_lacks_is_not_replayed(
    failed_trace: Any, agent: Any
) -> None:
    facts = _down(failed_trace, tool="partner_orders")
    handler = {"tool": "partner_orders", "on": "INTERNAL_SERVER_ERROR", "action": "retry_once"}

    passed, detail = _paired(_proposal("error_handler", handler), facts)

    assert not passed
    assert detail.startswith("TOOL_NOT_ALLOWED: ")


# --- call-changing strategies on a random fault: paired replays -----------------------
def _int_ids_only(request: ApiRequest) -> tuple[Any, ...]:
    if request.path.rsplit("/", 1)[-1].isdigit():
        return 200, {"order_id": ORDER}
    return 500, {"error": "boom"}


def test_an_adapter_that_changes_the_call_is_paired_against_the_bare_call(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    with RecordingAPI(respond=_int_ids_only) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _paired(_proposal("adapter", branch), _down(failed_trace))

    assert passed, detail
    assert detail.endswith(_counts(N, 0, N, 0, "0.0156"))
    # which call went first alternates pair by pair
    firsts = [api.requests[2 * i].path.endswith("/1000001") for i in range(N)]
    assert firsts == [False, True] * (N // 2)


def test_a_rule_that_blocks_the_call_loses_every_pair(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    rule = {"tool": "get_order", "schema": {"required": ["customer_id"]}}
    with RecordingAPI(respond=lambda request: (200, {"order_id": ORDER})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _paired(_proposal("validation_rule", rule), _down(failed_trace))

    assert not passed
    assert detail.endswith(_counts(0, N, 0, N, "1"))
    assert len(api.requests) == N


def _shop(found: Any) -> Any:
    def respond(request: ApiRequest) -> tuple[Any, ...]:
        if request.path.endswith("/products"):
            return 200, found
        sku = request.path.rsplit("/", 1)[-1]
        return (200, {"sku": sku}) if sku == "CAP-0001-BL" else (500, {"error": "boom"})

    return respond


@pytest.mark.parametrize(
    ("sku", "found", "with_strategy", "lookups"),
    [
        ("Blue Cap", {"results": [{"skus": [{"sku": "CAP-0001-BL"}]}]}, N, N),
        ("Blue Cap", {"results": []}, 0, N),  # found nothing: unchanged
        ("Blue Cap", ["not", "an", "object"], 0, N),  # nothing to take: unchanged
        ("x", {"results": []}, 0, 0),  # the lookup input is invalid: unchanged
        ("CAP-0002-RD", {"results": []}, 0, 0),  # already an id: does not fire
    ],
    ids=["found", "found-nothing", "not-an-object", "lookup-invalid", "already-an-id"],
)
def test_a_pre_condition_on_a_random_fault_wins_only_when_its_lookup_repairs_the_call(
    failed_trace: Any,
    agent: Any,
    settings: Any,
    sku: str,
    found: Any,
    with_strategy: int,
    lookups: int,
) -> None:
    with RecordingAPI(respond=_shop(found)) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _down(failed_trace, tool="check_inventory", action_input={"sku": sku})
        passed, detail = _paired(_proposal("pre_condition", sku_lookup()), facts)

    assert passed is (with_strategy == N)
    wins = with_strategy
    p = "0.0156" if wins else "1"
    assert detail.endswith(_counts(with_strategy, 0, wins, 0, p))
    assert len([r for r in api.requests if r.path.endswith("/products")]) == lookups


# --- the regression replay ----------------------------------------------------------------
def _good_call(agent: Any, tool: str, arguments: dict[str, Any]) -> None:
    """A successful call of ``tool`` recorded in a run."""
    trace = trace_create(agent_id=agent.pk, query="q", llm_backend="simulated")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        tool_name=tool,
        action_input=arguments,
        status_code=200,
        ok=True,
        started_at=timezone.now(),
    )


def _regression(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    return async_to_sync(_regression_replay)(proposal, facts)


def test_a_schema_amendment_keeps_good_calls_it_still_accepts(
    failed_trace: Any, agent: Any
) -> None:
    # the same call twice counts once
    for order_id in ["#W1000002", "#W1000003", "#W1000002"]:
        _good_call(agent, "get_order", {"order_id": order_id})
    facts = _facts(failed_trace, action_input={"order_id": "1000001"}, error_type="X")
    amend = {"tool": "get_order", "amend": {"order_id": {"type": "string"}}, "version": 2}

    assert _regression(_proposal("validation_rule", amend), facts) == (
        True,
        "2 recent good calls of get_order pass with the strategy "
        "(0 changed and replayed, 2 left as they were)",
    )


def test_an_amendment_that_refuses_good_calls_blocks_them(failed_trace: Any, agent: Any) -> None:
    # the good calls are still accepted as they were: the amendment is to blame
    _good_call(agent, "get_order", {"order_id": ORDER})
    facts = _facts(failed_trace, action_input={"order_id": "1000001"}, error_type="X")
    amend = {"tool": "get_order", "amend": {"order_id": {"type": "string", "pattern": r"^\d+$"}}}
    with RecordingAPI(respond=lambda request: (200, {"order_id": ORDER})) as api:
        from django.conf import settings

        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _regression(_proposal("validation_rule", amend), facts)

    assert not passed
    assert detail.startswith(f"blocks 1 of 1 recent good calls of get_order: {SHOWN} (blocked: ")


def test_the_regression_replay_counts_replayed_inconclusive_and_kept_calls(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    # given good calls: one the adapter leaves alone (already an integer), one the API
    # accepts changed, one whose changed call meets a 503 twice
    _good_call(agent, "get_order", {"order_id": 1000004})
    _good_call(agent, "get_order", {"order_id": "#W1000003"})
    _good_call(agent, "get_order", {"order_id": "#W1000002"})

    def respond(request: ApiRequest) -> tuple[Any, ...]:
        order_id = request.path.rsplit("/", 1)[-1]
        if order_id in {"1000002", "%23W1000002"}:
            return 503, {"error": "busy"}
        return 200, {"order_id": order_id}

    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    with RecordingAPI(respond=respond) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace)
        passed, detail = _regression(_proposal("adapter", branch), facts)

    assert (passed, detail) == (
        True,
        "3 recent good calls of get_order pass with the strategy (1 changed and replayed, "
        "1 left as they were, 1 inconclusive (random faults))",
    )
    # the 503 got one more try; a random fault on the changed call counts neither way, so
    # the call was not sent as it was
    busy = [r.path for r in api.requests if r.path.endswith("1000002")]
    assert busy == ["/api/orders/1000002"] * 2


def test_a_changed_call_refused_while_the_bare_one_meets_a_random_fault_is_inconclusive(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    _good_call(agent, "get_order", {"order_id": "#W1000002"})

    def respond(request: ApiRequest) -> tuple[Any, ...]:
        order_id = request.path.rsplit("/", 1)[-1]
        return (400, {"error": "bad id"}) if order_id.isdigit() else (502, {"error": "gw"})

    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    with RecordingAPI(respond=respond) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        passed, detail = _regression(_proposal("adapter", branch), _facts(failed_trace))

    assert (passed, detail) == (
        True,
        "1 recent good call of get_order passes with the strategy (0 changed and replayed, "
        "0 left as they were, 1 inconclusive (random faults))",
    )


def test_a_good_call_the_upstream_cannot_be_reached_for_is_inconclusive(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    # a refused connection is a random fault like a 5xx: it says nothing of the strategy
    _good_call(agent, "get_order", {"order_id": "#W1000002"})
    with RecordingAPI() as api:
        gone = api.base_url
    settings.SANDBOX_BASE_URL = gone
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}

    passed, detail = _regression(_proposal("adapter", branch), _facts(failed_trace))

    assert (passed, detail) == (
        True,
        "1 recent good call of get_order passes with the strategy (0 changed and replayed, "
        "0 left as they were, 1 inconclusive (random faults))",
    )


def test_good_calls_of_a_suspended_tool_are_not_counted(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    _good_call(agent, "get_order", {"order_id": "#W1000002"})
    Tool.objects.filter(name="get_order").update(suspended_until=timezone.now().replace(year=2999))
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}

    passed, detail = _regression(_proposal("adapter", branch), _facts(failed_trace))

    assert (passed, detail) == (
        True,
        "0 recent good calls of get_order pass with the strategy "
        "(0 changed and replayed, 0 left as they were)",
    )


# --- the schema-amendment replay, and runs from outside ---------------------------------
AMEND = {"tool": "partner", "amend": {"order_id": {"type": "string"}}}


def test_an_amendment_for_a_tool_the_agent_lacks_fails(failed_trace: Any, agent: Any) -> None:
    facts = _facts(failed_trace, tool="partner_orders", error_type="X")
    amend = {**AMEND, "tool": "partner_orders"}

    assert _strategy_replay(_proposal("validation_rule", amend), facts) == (
        False,
        "partner_orders is not a tool of this agent",
    )


def test_an_amendment_the_tool_schema_makes_unnecessary_fails(
    failed_trace: Any, agent: Any
) -> None:
    facts = _facts(failed_trace, action_input={"order_id": ORDER}, error_type="X")

    assert _strategy_replay(
        _proposal("validation_rule", {**AMEND, "tool": "get_order"}), facts
    ) == (
        False,
        "the tool's own schema already accepts the recorded input",
    )


def test_a_run_ingested_over_otlp_is_not_replayed(failed_trace: Any, agent: Any) -> None:
    facts = _facts(failed_trace)
    Trace.objects.filter(pk=facts.trace_id).update(origin=Trace.Origin.EXTERNAL)
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}

    passed, detail = strategy_replay(proposal=_proposal("adapter", branch), facts=facts)

    assert not passed
    assert detail.startswith("not replayed: the run was ingested over OTLP")
    assert not Trace.objects.filter(origin=Trace.Origin.REPLAY).exists()


def test_a_pre_condition_whose_lookup_answers_no_json_leaves_the_call_as_it_was(
    live_sandbox: str, small_shop: Any, failed_trace: Any, agent: Any
) -> None:
    from sandbox.services import faultrule_set

    # a lookup endpoint answering an HTML page instead of JSON, and an inventory that is down
    page = Tool.objects.create(
        name="lookup_page",
        description="Looks a sku up on a page.",
        params_schema={"type": "object", "properties": {"query": {"type": "string"}}},
        endpoint_template=live_sandbox.removesuffix("/sandbox/api") + "/accounts/login/",
    )
    page.allowed_agents.add(agent)
    faultrule_set(endpoint="inventory", rate_500=1.0)
    facts = _down(failed_trace, tool="check_inventory", action_input={"sku": "Blue Cap"})

    passed, detail = _paired(_proposal("pre_condition", sku_lookup(call="lookup_page")), facts)

    assert not passed
    assert detail.endswith(_counts(0, 0, 0, 0, "1"))


def test_a_prompt_hint_whose_replayed_run_meets_its_error_again_fails(
    failed_trace: Any, agent: Any, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    hint = {"text": "Quote the order id exactly.", "error_type": "RESOURCE_NOT_FOUND"}
    with RecordingAPI(respond=lambda request: (404, {"error": "no such order"})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND")
        passed, detail = strategy_replay(proposal=_proposal("prompt_hint", hint), facts=facts)

    replay = Trace.objects.get(origin=Trace.Origin.REPLAY)
    assert not passed
    assert detail.startswith(f"replay run {replay.pk}: ")
    assert detail.endswith(", RESOURCE_NOT_FOUND again")
    assert replay.steps.filter(error_type="RESOURCE_NOT_FOUND").exists()
    assert api.requests


def test_the_context_of_a_run_deleted_since_it_failed_is_empty(db: None) -> None:
    # retention may delete a run between its failure and the replay: nothing is made up
    gone = "0b7e1f3a-9c2d-4e5f-8a6b-1c2d3e4f5a6b"
    assert _repair_context_at(gone, 3) == RepairContext(query="", customer_id="", facts=())
