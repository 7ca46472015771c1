"""Replay and confidence measure correctness, not "finished without that error".

Everything runs through the real paths: the sandbox served over HTTP by the live server,
real runs of the simulated model through the runtime, the Reflexion engine, the replay and
the confidence bookkeeping on the real database. Nothing feeds confidence by hand.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents.services import run_execute
from policies.models import ReflexionProposal, Strategy, StrategyConfidenceEvent
from policies.reflexion import FailureFacts, Proposal, failures_of_trace, reflexion_run
from policies.replay import (
    RANDOM_FAULT_PAIRS,
    REGRESSION_CALLS,
    sign_test_p,
    strategy_replay,
)
from policies.services import strategy_activate
from sandbox.models import Order, Product
from sandbox.services import faultrule_set
from tests.agents.test_runtime_repairs import partner_search
from tests.branches import sku_lookup
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.models import Job, Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)

# A validation rule like the one the renamed-parameter drift produced: it demands an
# argument the tool's calls never carry, so it blocks every product search.
HARMFUL_RULE = {"tool": "search_products", "schema": {"required": ["q"]}}


@pytest.fixture
def shop(live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any) -> str:
    return live_sandbox


@pytest.fixture
def no_model_mistakes(settings: Any) -> None:
    settings.LLM_SIM_ERROR_RATES = {}


def _run(agent: Any, query: str) -> Trace:
    """A customer's run through the real runtime; its end scores the strategies it applied."""
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="simulated")
    async_to_sync(run_execute)(trace_id=str(trace.pk))  # reflect=True: as in production
    trace.refresh_from_db()
    return trace


def _products(count: int) -> list[Product]:
    products = list(Product.objects.order_by("product_id")[:count])
    assert len(products) == count
    return products


def _facts(failed_trace: Any, **kwargs: Any) -> FailureFacts:
    [facts] = failures_of_trace(failed_trace(**kwargs))
    return facts


def _proposal(kind: str, branch: dict[str, Any]) -> Proposal:
    return Proposal(kind=kind, branch=branch, root_cause="r", strategy_update="s", origin="test")


# --- the regression replay -------------------------------------------------------------
def test_the_regression_replay_rejects_a_rule_that_blocks_good_calls(
    shop: str, support_agent: Any, failed_trace: Any, no_model_mistakes: None
) -> None:
    # given product searches that worked, made by real runs
    for product in _products(3):
        trace = _run(support_agent, f"Is the {product.name} in stock?")
        assert trace.outcome == "answered_from_data", trace.final_answer
    good = trace.steps.filter(tool_name="search_products", ok=True).count()
    assert good >= 1
    # and a recorded search the API refused for a missing field "q" (no status: the
    # analyzer reads the field from the error, as it did for the renamed parameter)
    trace = failed_trace(
        tool="search_products",
        action_input={"query": "jacket"},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body=json.dumps({"error": "MISSING_REQUIRED_FIELD", "field": "q"}),
        query="Do you sell jackets?",
    )

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    # the analyzer proposed the harmful rule; it rejects the recorded input (the old
    # replay's only check) but blocks every good search, so it is not learned
    assert record.origin == "analyzer:missing_field"
    assert record.payload["branch"] == HARMFUL_RULE
    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    assert record.reason.startswith("replay failed: blocks 3 of 3 recent good calls of ")
    assert 'search_products {"query": ' in record.reason
    assert "(blocked: 'q' is a required property)" in record.reason
    assert not Strategy.objects.exists()
    job = Job.objects.filter(kind=Job.Kind.REPLAY).latest("pk")
    assert (job.status, job.done, job.total) == ("finished", 3, 3)


def test_the_regression_replay_checks_at_most_the_five_newest_distinct_calls(
    shop: str, support_agent: Any, failed_trace: Any, no_model_mistakes: None
) -> None:
    for product in _products(REGRESSION_CALLS + 1):
        _run(support_agent, f"Is the {product.name} in stock?")
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"limit": 3},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        query="Do you sell jackets?",
    )

    passed, detail = strategy_replay(
        proposal=_proposal("validation_rule", HARMFUL_RULE), facts=facts
    )

    assert not passed
    assert detail.startswith(f"blocks {REGRESSION_CALLS} of {REGRESSION_CALLS} recent good calls")
    # the oldest product's search is the sixth call: not replayed
    oldest = _products(1)[0]
    assert oldest.name not in detail


def test_a_rule_good_calls_satisfy_passes_the_regression_replay_and_the_run(
    shop: str, support_agent: Any, failed_trace: Any, no_model_mistakes: None
) -> None:
    product = _products(1)[0]
    _run(support_agent, f"Is the {product.name} in stock?")
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"limit": 3},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        query=f"Is the {product.name} in stock?",
    )
    rule = {"tool": "search_products", "schema": {"required": ["query"]}}

    passed, detail = strategy_replay(proposal=_proposal("validation_rule", rule), facts=facts)

    assert passed, detail
    stage1, stage2, stage3 = detail.split("; ")
    assert stage1.startswith("the rule rejects the recorded input")
    assert stage2 == (
        "1 recent good call of search_products passes with the strategy "
        "(0 changed and replayed, 1 left as they were)"
    )
    replay = Trace.objects.get(origin=Trace.Origin.REPLAY)
    assert stage3 == f"replay run {replay.pk}: finished (answered_from_data)"


# An API that knows two stock-keeping codes, one of them zero-padded.
PADDED_STOCK = {"A-1": 4, "0042": 7}


def padded_stock_api(request: ApiRequest) -> tuple[int, Any]:
    if request.path.startswith("/api/orders/"):
        # the order question the failed run served, asked again by the replayed run
        return 200, {"order_id": "#W1000001", "status": "shipped", "placed_at": "2026-11-20"}
    sku = request.path.rsplit("/", 1)[-1]
    if sku in PADDED_STOCK:
        return 200, {"sku": sku, "in_stock": PADDED_STOCK[sku]}
    return 404, {"detail": f"unknown sku {sku!r}"}


@pytest.mark.parametrize("stale", [False, True], ids=["still-good", "refused-anyway"])
def test_the_regression_replay_rejects_an_adapter_that_breaks_good_calls(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any, stale: bool
) -> None:
    from agents.models import Tool
    from traces.models import Step

    settings.LLM_SIM_ERROR_RATES = {}
    # "0099" worked once; the API no longer knows it, with or without the repair
    code = "0099" if stale else "0042"
    with RecordingAPI(respond=padded_stock_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        tool = Tool.objects.create(
            name="partner_stock",
            description="Partner stock API.",
            method="GET",
            params_schema={"type": "object", "properties": {"sku": {"type": "string"}}},
            endpoint_template="{sandbox}/stock/{sku}",
        )
        tool.allowed_agents.add(support_agent)
        # given a recorded good call with the zero-padded code (as a run recorded it)
        good = failed_trace(tool="partner_stock", action_input={"sku": code})
        Step.objects.filter(trace=good).update(ok=True, status_code=200, error_type="")
        # and a failed call with zeros in front of a code that has none
        facts = _facts(
            failed_trace,
            tool="partner_stock",
            action_input={"sku": "00A-1"},
            status_code=404,
            error_type="RESOURCE_NOT_FOUND",
        )
        strip_zeros = {
            "tool": "partner_stock",
            "field": "sku",
            "steps": [{"op": "trim", "chars": "0"}],
        }

        passed, detail = strategy_replay(proposal=_proposal("adapter", strip_zeros), facts=facts)

    stock = [r.path.rsplit("/", 1)[-1] for r in api.requests if "/stock/" in r.path]
    # the repaired call, the good call repaired, then the good call as it was sent
    assert stock == ["A-1", "42" if not stale else "99", code]
    if stale:
        # not the repair's doing: the good call fails without it too
        assert passed, detail
        assert detail.split("; ")[1] == (
            "1 recent good call of partner_stock passes with the strategy (0 changed and "
            "replayed, 0 left as they were, 1 no longer accepted without it either)"
        )
        return
    # the repair fixes the failed call, and breaks the padded code that still works
    assert not passed
    assert detail == (
        'blocks 1 of 1 recent good calls of partner_stock: partner_stock {"sku": "0042"} '
        '(sent as {"sku": "42"} -> 404)'
    )
    assert not Trace.objects.filter(origin=Trace.Origin.REPLAY).exists()


# --- random faults: paired replays ----------------------------------------------------
def test_a_retry_learned_from_one_lucky_429_is_rejected(
    shop: str, failed_trace: Any, no_model_mistakes: None
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    # given one recorded 429 of an upstream that answers again
    trace = failed_trace(
        action_input={"order_id": order.order_id},
        status_code=429,
        error_type="RATE_LIMITED",
        query=f"Where is my order {order.order_id}?",
    )

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    # the simulated reflexion proposes "retry once"; every bare call succeeds as well, so
    # the retry does not beat no strategy and nothing is published
    assert record.payload["branch"] == {
        "tool": "get_order",
        "on": "RATE_LIMITED",
        "action": "retry_once",
    }
    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    n = RANDOM_FAULT_PAIRS
    assert record.reason == (
        f"replay failed: RATE_LIMITED is a random fault: the strategy does not beat no "
        f'strategy on {n} paired replays of get_order {{"order_id": "{order.order_id}"}}: '
        f"{n} of {n} calls succeeded with the strategy, {n} of {n} without "
        "(0 pairs won, 0 lost, one-sided sign test p = 1)"
    )
    assert not Strategy.objects.exists()


def test_a_retry_that_cannot_help_a_persistent_429_is_rejected(
    shop: str, failed_trace: Any
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    faultrule_set(endpoint="orders", rate_429=1.0)
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        status_code=429,
        error_type="RATE_LIMITED",
    )

    passed, detail = strategy_replay(
        proposal=_proposal(
            "error_handler", {"tool": "get_order", "on": "RATE_LIMITED", "action": "retry_once"}
        ),
        facts=facts,
    )

    assert not passed
    assert detail.endswith(
        f"0 of {RANDOM_FAULT_PAIRS} calls succeeded with the strategy, 0 of "
        f"{RANDOM_FAULT_PAIRS} without (0 pairs won, 0 lost, one-sided sign test p = 1)"
    )


def _flaky_proxy(sandbox: str) -> Any:
    """An upstream that refuses every other request with a 429 asking for no wait, and
    passes the others to the sandbox."""
    count = {"n": 0}

    def respond(request: ApiRequest) -> tuple[Any, ...]:
        count["n"] += 1
        if count["n"] % 2 == 1:
            return 429, {"error": "RATE_LIMITED", "detail": "slow down"}, {"Retry-After": "0"}
        path = request.path.removeprefix("/api")
        answer = httpx.get(sandbox + path, params=request.query, timeout=10)
        return answer.status_code, answer.json()

    return respond


def test_a_wait_retry_that_beats_no_strategy_on_paired_replays_passes(
    shop: str, failed_trace: Any, settings: Any, no_model_mistakes: None
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    with RecordingAPI(respond=_flaky_proxy(shop)) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        facts = _facts(
            failed_trace,
            action_input={"order_id": order.order_id},
            status_code=429,
            error_type="RATE_LIMITED",
            query=f"Where is my order {order.order_id}?",
        )
        passed, detail = strategy_replay(
            proposal=_proposal(
                "error_handler",
                {"tool": "get_order", "on": "RATE_LIMITED", "action": "wait_retry"},
            ),
            facts=facts,
        )

    assert passed, detail
    paired, run = detail.split("; ")
    n = RANDOM_FAULT_PAIRS
    assert paired.endswith(
        f"{n} of {n} calls succeeded with the strategy, 0 of {n} without "
        f"({n} pairs won, 0 lost, one-sided sign test p = {sign_test_p(n, 0):.3g})"
    )
    replay = Trace.objects.get(origin=Trace.Origin.REPLAY)
    assert run == f"replay run {replay.pk}: finished (answered_from_data)"
    # the handler acted in the replayed run too: its 429 was retried
    handled = replay.steps.filter(tool_name="get_order", ok=True).latest("step_number")
    assert handled.details["handler"] == "wait_retry"


def test_the_paired_counts_read_as_words() -> None:
    from policies.replay import PairedResult

    result = PairedResult(((False, True), (True, True), (True, False), (False, False)))
    assert (result.with_strategy, result.without, result.wins, result.losses) == (2, 2, 1, 1)
    assert not result.passed
    assert result.describe() == (
        "2 of 4 calls succeeded with the strategy, 2 of 4 without "
        "(1 pair won, 1 lost, one-sided sign test p = 0.75)"
    )


@pytest.mark.parametrize(
    ("wins", "losses", "p"),
    [(0, 0, 1.0), (6, 0, 1 / 64), (5, 0, 1 / 32), (5, 1, 7 / 64), (3, 3, 42 / 64)],
)
def test_the_sign_test_is_the_exact_one_sided_binomial_tail(
    wins: int, losses: int, p: float
) -> None:
    assert sign_test_p(wins, losses) == pytest.approx(p)


# --- the replayed run must end grounded --------------------------------------------------
def test_a_repaired_call_whose_replayed_run_ends_without_a_grounded_answer_fails(
    shop: str, failed_trace: Any, no_model_mistakes: None
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    # given the order lookup drifted to integer ids and the return service is down
    faultrule_set(endpoint="orders", drift="require_int_id")
    faultrule_set(endpoint="returns", rate_500=1.0)
    # and a return request that failed on the order lookup
    facts = _facts(
        failed_trace,
        action_input={"order_id": order.order_id},
        query=f"Can I return my order {order.order_id}?",
    )
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}

    passed, detail = strategy_replay(proposal=_proposal("adapter", branch), facts=facts)

    # the repaired call succeeds, but the request still gets no grounded answer
    assert not passed
    replay = Trace.objects.get(origin=Trace.Origin.REPLAY)
    assert (replay.status, replay.outcome) == ("failed", "failed")
    assert detail == f"replay run {replay.pk}: failed (failed), no grounded answer"
    job = Job.objects.filter(kind=Job.Kind.REPLAY).latest("pk")
    # stopped at the run, the last of its three stages
    assert (job.status, job.done, job.total) == ("finished", 3, 3)
    assert job.result_url == f"/traces/{replay.pk}/"
    assert job.message == f"failed: {detail}"
    # with the return service back, the same strategy passes
    faultrule_set(endpoint="returns", rate_500=0.0)
    passed, detail = strategy_replay(proposal=_proposal("adapter", branch), facts=facts)
    assert passed, detail
    digits = int(order.order_id.removeprefix("#W"))
    call, regression, run = detail.split("; ")
    assert call == f'get_order {{"order_id": {digits}}} -> 200'
    assert regression == "no earlier successful call of get_order to check against"
    assert run.startswith("replay run ") and run.endswith(": finished (answered_from_data)")


# --- confidence moves with real outcomes ---------------------------------------------------
def test_a_harmful_rule_falls_to_deprecation_through_real_runs(
    shop: str, support_agent: Any, make_strategy: Any, settings: Any, no_model_mistakes: None
) -> None:
    settings.POLICY_PUBLISH = "at_once"
    rule = make_strategy(
        kind="validation_rule",
        branch=HARMFUL_RULE,
        error_type="MISSING_REQUIRED_FIELD",
        status=Strategy.Status.PROPOSED,
    )
    strategy_activate(strategy=rule, author_kind="reviewer")
    products = _products(4)

    for product in products[:3]:
        trace = _run(support_agent, f"Is the {product.name} in stock?")
        # the rule blocked the search the run needed: no grounded answer
        blocked = trace.steps.filter(error_detail__contains=f"policy rule S{rule.pk}:")
        assert blocked.exists()
        assert trace.outcome not in ("answered_from_data", "answered_without_data")

    rule.refresh_from_db()
    events = StrategyConfidenceEvent.objects.filter(strategy=rule).order_by("id")
    assert [(e.old, e.new, e.reason) for e in events] == [
        (0.7, 0.55, "failure"),
        (0.55, 0.4, "failure"),
        (0.4, 0.25, "failure"),
    ]
    assert rule.status == Strategy.Status.DEPRECATED
    # deprecated, it no longer stands in the way: the next run answers
    trace = _run(support_agent, f"Is the {products[3].name} in stock?")
    assert trace.outcome == "answered_from_data"
    assert not trace.steps.filter(error_detail__contains=f"policy rule S{rule.pk}:").exists()


def test_a_rule_that_checks_calls_without_blocking_them_is_not_scored(
    shop: str, support_agent: Any, make_strategy: Any, settings: Any, no_model_mistakes: None
) -> None:
    settings.POLICY_PUBLISH = "at_once"
    rule = make_strategy(
        kind="validation_rule",
        branch={"tool": "search_products", "schema": {"required": ["query"]}},
        error_type="MISSING_REQUIRED_FIELD",
        status=Strategy.Status.PROPOSED,
    )
    strategy_activate(strategy=rule, author_kind="reviewer")

    trace = _run(support_agent, f"Is the {_products(1)[0].name} in stock?")

    assert trace.outcome == "answered_from_data"
    rule.refresh_from_db()
    assert (rule.applications, rule.confidence) == (0, 0.7)


def test_an_adapter_that_acted_in_a_grounded_run_gains_confidence(
    shop: str, support_agent: Any, make_strategy: Any, settings: Any
) -> None:
    settings.POLICY_PUBLISH = "at_once"
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    faultrule_set(endpoint="orders", drift="require_int_id")
    adapter = make_strategy(status=Strategy.Status.PROPOSED)
    strategy_activate(strategy=adapter, author_kind="reviewer")

    settings.LLM_SIM_ERROR_RATES = {}
    trace = _run(support_agent, f"Where is my order {order.order_id}?")

    assert trace.outcome == "answered_from_data"
    acted = [
        step
        for step in trace.steps.filter(tool_name="get_order")
        if {"id": adapter.pk, "kind": "adapter"} in step.strategies_applied
    ]
    assert acted and all(step.ok for step in acted)
    adapter.refresh_from_db()
    assert (adapter.applications, adapter.successes) == (len(acted), len(acted))
    assert adapter.confidence > 0.7


def test_a_pre_condition_leaves_good_calls_that_already_carry_an_id_as_they_were(
    shop: str, support_agent: Any, failed_trace: Any, no_model_mistakes: None, settings: Any
) -> None:
    # a customer's run checked the stock with a real SKU: a good call the regression replay
    # reads back, whose SKU already matches the pattern, so the lookup must not fire on it
    product = _products(1)[0]
    _run(support_agent, f"Is the {product.name} in stock?")
    good = Step.objects.filter(tool_name="check_inventory", ok=True, phase="action")
    assert good.exists()
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={"sku": product.name},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        query=f"Is the {product.name} in stock?",
    )
    lookup = sku_lookup()
    settings.LLM_SIM_ERROR_RATES = {"name_for_sku": 1.0}

    passed, detail = strategy_replay(proposal=_proposal("pre_condition", lookup), facts=facts)

    assert passed, detail
    calls = good.values_list("action_input", flat=True).distinct().count()
    stage2 = detail.split("; ")[1]
    assert stage2.endswith(f"(0 changed and replayed, {calls} left as they were)"), stage2


def transitional_search_api(request: ApiRequest) -> tuple[int, Any]:
    """A search API between two contracts: it takes the old ``term`` and the new ``q``, both
    in the query string, and refuses a search that carries neither."""
    term = (request.query.get("q") or request.query.get("term") or [""])[0]
    if not term:
        return 400, {"detail": "q is required"}
    return 200, {"results": [{"name": term.title()}]}


RENAME_TERM = {"tool": "partner_search", "steps": [{"op": "rename", "from": "term", "to": "q"}]}


def _search_failure(failed_trace: Any) -> FailureFacts:
    """A partner_search call the partner refused: it wants ``q`` now, not ``term``."""
    return _facts(
        failed_trace,
        tool="partner_search",
        action_input={"term": "scarf"},
        status_code=400,
        error_type="MISSING_REQUIRED_FIELD",
    )


def test_the_regression_replay_sends_a_renamed_argument_where_the_adapter_moved_it(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    from policies.replay import _regression_replay

    settings.LLM_SIM_ERROR_RATES = {}
    with RecordingAPI(respond=transitional_search_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_search(support_agent)
        good = failed_trace(tool="partner_search", action_input={"term": "cap"})
        Step.objects.filter(trace=good).update(ok=True, status_code=200, error_type="")
        facts = _search_failure(failed_trace)

        passed, detail = async_to_sync(_regression_replay)(_proposal("adapter", RENAME_TERM), facts)

    # the renamed argument kept the query-string location of the one it replaced
    assert [request.query for request in api.requests] == [{"q": ["cap"]}]
    assert passed, detail
    assert detail == (
        "1 recent good call of partner_search passes with the strategy "
        "(1 changed and replayed, 0 left as they were)"
    )


def test_the_replay_of_the_failed_call_sends_a_renamed_argument_where_the_tool_had_it(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    """The replay of the failed call applies an adapter as the runtime does: a renamed
    argument keeps the location the tool declares for the one it replaces."""
    from policies.replay import _replay_tool_call

    settings.LLM_SIM_ERROR_RATES = {}
    with RecordingAPI(respond=transitional_search_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_search(support_agent)
        facts = _search_failure(failed_trace)

        passed, detail = async_to_sync(_replay_tool_call)(_proposal("adapter", RENAME_TERM), facts)

    assert [request.query for request in api.requests] == [{"q": ["scarf"]}], detail
    assert passed, detail
