"""Contract changes no code names, learned end to end: a failed call against a real HTTP
API on loopback goes through Reflexion, the evidence proposer proposes a repair, and the
replay of that repair against the same API passes (or, when the repair does not help,
fails and nothing is learned)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.models import Tool
from policies.models import Strategy
from policies.reflexion import reflexion_run
from tests.fakes.recording_api import ApiRequest, RecordingAPI

pytestmark = pytest.mark.django_db(transaction=True)

LOWERCASE_ONLY = {"errors": [{"field": "sku", "message": "must be lowercase"}]}
RENAMED = {"detail": [{"type": "missing", "loc": ["query", "q"], "msg": "Field required"}]}


ORDER = {"order_id": "#W1000001", "status": "shipped", "placed_at": "2026-11-20"}


def order_lookup(request: ApiRequest) -> tuple[int, Any] | None:
    """The same API also answers the order question the failed run served: the replay runs
    that request again and needs a grounded answer (the simulated model asks the sandbox's
    order tool, not the partner tool)."""
    if request.path.startswith("/api/orders/"):
        return 200, ORDER
    return None


def lowercase_api(request: ApiRequest) -> tuple[int, Any]:
    if (answer := order_lookup(request)) is not None:
        return answer
    sku = request.path.rsplit("/", 1)[-1]
    if sku != sku.lower():
        return 400, LOWERCASE_ONLY
    return 200, {"sku": sku, "in_stock": 3}


def renamed_api(request: ApiRequest) -> tuple[int, Any]:
    if (answer := order_lookup(request)) is not None:
        return answer
    if "q" not in request.query:
        return 422, RENAMED
    return 200, {"results": [{"sku": "cap-1"}]}


def partner_tool(agent: Any, **fields: Any) -> Tool:
    tool = Tool.objects.create(description="Partner API.", method="GET", **fields)
    tool.allowed_agents.add(agent)
    return tool


def learn(
    failed_trace: Any, *, tool: str, arguments: dict[str, Any], status: int, body: Any
) -> Any:
    trace = failed_trace(
        tool=tool,
        action_input=arguments,
        status_code=status,
        error_type="INVALID_PARAMETER",
        body=json.dumps(body),
    )
    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=False)
    return record


def test_a_case_change_is_learned_from_the_error_message(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    with RecordingAPI(respond=lowercase_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_tool(
            support_agent,
            name="partner_stock",
            params_schema={"type": "object", "properties": {"sku": {"type": "string"}}},
            endpoint_template="{sandbox}/stock/{sku}",
        )
        record = learn(
            failed_trace,
            tool="partner_stock",
            arguments={"sku": "CAP-0001-BL"},
            status=400,
            body=LOWERCASE_ONLY,
        )
    assert record.outcome == "added", record.reason
    assert record.origin == "analyzer:evidence"
    strategy = Strategy.objects.get(pk=record.strategy_id)
    assert strategy.branch == {"tool": "partner_stock", "field": "sku", "transform": "lower"}
    assert strategy.replay_status == "passed" and "-> 200" in strategy.replay_detail
    stock = [r for r in api.requests if r.path.startswith("/api/stock/")]
    assert stock[-1].path.endswith("/stock/cap-0001-bl")
    assert "replay run " in strategy.replay_detail  # the request ran again, grounded


def test_a_renamed_query_parameter_is_learned_and_replayed_on_the_wire(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    with RecordingAPI(respond=renamed_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_tool(
            support_agent,
            name="partner_search",
            params_schema={"type": "object", "properties": {"query": {"type": "string"}}},
            endpoint_template="{sandbox}/search",
            param_locations={"query": "query"},
            source=Tool.Source.IMPORT,
        )
        record = learn(
            failed_trace,
            tool="partner_search",
            arguments={"query": "cap"},
            status=422,
            body=RENAMED,
        )
    assert record.outcome == "added", record.reason
    strategy = Strategy.objects.get(pk=record.strategy_id)
    assert strategy.branch["steps"] == [{"op": "rename", "from": "query", "to": "q", "in": "query"}]
    assert strategy.replay_status == "passed"
    searches = [r for r in api.requests if r.path.endswith("/search")]
    assert searches[-1].query == {"q": ["cap"]}


def test_a_repair_the_api_still_refuses_is_not_learned(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    def stubborn(request: ApiRequest) -> tuple[int, Any]:
        return 400, LOWERCASE_ONLY  # refuses even the lower-cased value

    with RecordingAPI(respond=stubborn) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_tool(
            support_agent,
            name="partner_stock",
            params_schema={"type": "object", "properties": {"sku": {"type": "string"}}},
            endpoint_template="{sandbox}/stock/{sku}",
        )
        record = learn(
            failed_trace,
            tool="partner_stock",
            arguments={"sku": "CAP-0001-BL"},
            status=400,
            body=LOWERCASE_ONLY,
        )
    assert record.outcome == "rejected"
    assert record.reason.startswith("replay failed")
    assert not Strategy.objects.exists()


NEW_PREFIX = {"detail": "order_id must start with 'ORD-'"}


def new_prefix_api(request: ApiRequest) -> tuple[int, Any]:
    if (answer := order_lookup(request)) is not None:
        return answer
    order_id = request.path.rsplit("/", 1)[-1]
    if not order_id.startswith("ORD-"):
        return 400, NEW_PREFIX
    if not order_id.removeprefix("ORD-").isdigit():
        return 400, {"detail": f"order_id {order_id} is malformed"}
    return 200, {"order_id": order_id, "status": "shipped"}


def test_the_replay_picks_among_the_repairs_the_evidence_supports(
    failed_trace: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    from policies.models import ReflexionProposal

    with RecordingAPI(respond=new_prefix_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_tool(
            support_agent,
            name="partner_order",
            params_schema={"type": "object", "properties": {"order_id": {"type": "string"}}},
            endpoint_template="{sandbox}/partner/orders/{order_id}",
        )
        record = learn(
            failed_trace,
            tool="partner_order",
            arguments={"order_id": "#W1000001"},
            status=400,
            body=NEW_PREFIX,
        )
    # "must start with 'ORD-'" fits both adding the prefix and replacing '#W' by it; the
    # simpler one was refuted by the API, the next one passed.
    assert record.outcome == "added", record.reason
    strategy = Strategy.objects.get(pk=record.strategy_id)
    assert strategy.branch["steps"] == [
        {"op": "strip_prefix", "value": "#W"},
        {"op": "add_prefix", "value": "ORD-"},
    ]
    refuted = ReflexionProposal.objects.exclude(pk=record.pk).get()
    assert refuted.outcome == "rejected"
    assert refuted.reason.startswith("replay refuted this candidate")
    assert refuted.payload["branch"]["steps"] == [{"op": "add_prefix", "value": "ORD-"}]
    partner = [r for r in api.requests if r.path.startswith("/api/partner/")]
    paths = [r.path.rsplit("/", 1)[-1] for r in partner]
    assert paths == ["ORD-%23W1000001", "ORD-1000001"]  # as sent: URL-quoted
