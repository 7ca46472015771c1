"""A tool's JSON Schema that the API's contract has left behind: the loop proposes a
versioned amendment, the replay checks it against the API, and the runtime validates (and
prompts) with the amended schema."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.utils import timezone

from agents.policy_runtime import SchemaAmendment, schema_amend
from agents.tools.tool_catalog import ORDER_ID
from policies.branches import branch_describe, branch_errors, runtime_policy_compile
from policies.reflexion import (
    analyze_stale_schema,
    failures_of_trace,
    quality_gates,
    value_pattern,
)
from tests.branches import search_for_sku, sku_lookup
from traces.models import Step
from traces.services import trace_create

pytestmark = pytest.mark.django_db

SCHEMA_REFUSAL = (
    "SCHEMA_VIOLATION: validator=pattern path=order_id: '1000001' does not match '^#W\\\\d{7}$'"
)


def _step(trace: Any, **fields: Any) -> None:
    fields.setdefault("tool_name", "get_order")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        started_at=timezone.now(),
        **fields,
    )


def _earlier(support_agent: Any, **fields: Any) -> None:
    _step(
        trace_create(agent_id=support_agent.pk, query="earlier", llm_backend="simulated"), **fields
    )


def _refused(support_agent: Any, value: str) -> Any:
    trace = trace_create(
        agent_id=support_agent.pk, query=f"Where is order {value}?", llm_backend="simulated"
    )
    _step(
        trace,
        action_input={"order_id": value},
        ok=False,
        error_type="INVALID_PARAMETER",
        error_detail=SCHEMA_REFUSAL.replace("1000001", value),
    )
    [facts] = failures_of_trace(trace)
    return facts


def _api_said_no_prefix(support_agent: Any, *, refused_by: str = "get_order") -> None:
    """Calls in the old form worked, then ``refused_by``'s API started refusing the prefix."""
    for number in ("#W1000002", "#W1000003"):
        _earlier(
            support_agent,
            action_input={"order_id": number},
            ok=True,
            status_code=200,
            response_summary="{}",
        )
    _earlier(
        support_agent,
        tool_name=refused_by,
        action_input={"order_id": "#W1000004"},
        ok=False,
        status_code=400,
        error_type="INVALID_PARAMETER",
        response_summary=json.dumps({"detail": "order_id must not start with '#W'"}),
    )


@pytest.fixture
def api_said_no_prefix(support_agent: Any) -> None:
    _api_said_no_prefix(support_agent)


def test_value_pattern() -> None:
    assert value_pattern("1234567") == r"^\d{7}$"
    assert value_pattern("ord-12") == r"^[a-z]+\-\d{2}$"
    assert value_pattern("1" * 200) == r"^\d{200}$"


@pytest.mark.parametrize("value", ["1" * 200 + "abc", "1" * 5000, "ab-" * 100])
def test_a_long_value_shapes_its_pattern_by_its_head_and_still_matches_it(value: str) -> None:
    """Only the first 200 characters shape the pattern (model output is unbounded); the
    pattern then leaves its end open, so the value the API accepted is not refused by the
    rule learnt from it."""
    pattern = value_pattern(value)

    assert re.match(pattern, value) is not None
    assert not pattern.endswith("$")
    assert value_pattern(value) == value_pattern(value[:200])[:-1]


def test_a_value_the_api_wants_but_the_schema_refuses_amends_the_schema(
    support_agent: Any, api_said_no_prefix: None
) -> None:
    facts = _refused(support_agent, "1000001")

    proposal = analyze_stale_schema(facts)

    assert proposal is not None and proposal.origin == "analyzer:stale_schema"
    assert proposal.kind == "validation_rule"
    assert proposal.branch == {
        "tool": "get_order",
        "amend": {"order_id": {"anyOf": [ORDER_ID, {"type": "string", "pattern": r"^\d{7}$"}]}},
        "version": 1,
    }
    assert branch_errors(proposal.kind, proposal.branch) == []
    assert not any(quality_gates(proposal, facts).values())
    assert "version 1" in branch_describe(proposal.kind, proposal.branch)


def test_a_product_name_where_an_id_belongs_is_not_a_stale_schema(
    support_agent: Any, api_said_no_prefix: None
) -> None:
    # It does not start with '#W' either, but no repair makes it an order id.
    facts = _refused(support_agent, "Blue Hoodie")

    assert analyze_stale_schema(facts) is None


def test_without_what_the_api_said_the_schema_is_not_stale(support_agent: Any) -> None:
    facts = _refused(support_agent, "1000001")

    assert analyze_stale_schema(facts) is None


def test_what_another_tool_s_api_said_does_not_make_this_schema_stale(
    support_agent: Any,
) -> None:
    # The same argument name on another tool: that API's contract is not get_order's.
    _api_said_no_prefix(support_agent, refused_by="cancel_order")
    facts = _refused(support_agent, "1000001")

    assert analyze_stale_schema(facts) is None


def test_the_runtime_policy_validates_with_the_amended_schema() -> None:
    branch = {
        "tool": "get_order",
        "amend": {"order_id": {"anyOf": [ORDER_ID, {"type": "string", "pattern": r"^\d{7}$"}]}},
        "version": 2,
    }
    policy = runtime_policy_compile(version="v", strategies=[(7, "validation_rule", branch, "")])
    [amendment] = policy.schema_amendments["get_order"]
    assert amendment == SchemaAmendment(7, branch["amend"], 2)
    assert policy.validation_rules == {}
    schema = {"type": "object", "properties": {"order_id": ORDER_ID}, "required": ["order_id"]}
    amended = schema_amend(schema, (amendment,))
    assert amended["properties"]["order_id"]["anyOf"][1]["pattern"] == r"^\d{7}$"
    assert schema["properties"]["order_id"] is ORDER_ID  # the tool's own schema is untouched


@pytest.mark.parametrize(
    ("branch", "error"),
    [
        ({"tool": "t", "amend": {}}, "amend must map"),
        ({"tool": "t", "amend": {"x": {"type": "nope"}}}, "amend.x is invalid"),
        ({"tool": "t", "amend": {"x": {"type": "string"}}, "version": 0}, "version"),
        ({"tool": "t", "amend": {"x": {}}, "schema": {"type": "object"}}, "either"),
        ({"tool": "t"}, "either"),
    ],
)
def test_invalid_amendments_are_refused(branch: dict, error: str) -> None:
    assert any(error in message for message in branch_errors("validation_rule", branch))


def test_the_llm_reflexion_schema_covers_amendments_and_wait_retry() -> None:
    from jsonschema import Draft202012Validator

    from policies.reflexion import reflexion_json_schema

    schema = reflexion_json_schema(["get_order", "get_sku_price"])
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    base = {"root_cause": "r", "strategy_update": "s", "kind": "validation_rule"}
    amend = {"tool": "get_order", "amend": {"order_id": {"type": "string"}}, "version": 2}
    wait = {
        "tool": "get_sku_price",
        "on": "SERVICE_UNAVAILABLE",
        "action": "wait_retry",
        "max_retries": 1,
        "max_wait_s": 4,
    }
    assert validator.is_valid({**base, "branch": amend})
    assert validator.is_valid({**base, "kind": "error_handler", "branch": wait})
    # The bounds are enforced by constrained decoding too: one retry, at most 60 s.
    assert not validator.is_valid(
        {**base, "kind": "error_handler", "branch": {**wait, "max_retries": 3}}
    )
    assert not validator.is_valid({**base, "branch": {**amend, "tool": "unknown_tool"}})
    for branch in (amend, wait):
        kind = "validation_rule" if "amend" in branch else "error_handler"
        assert branch_errors(kind, branch) == []


def test_the_llm_reflexion_schema_refuses_what_the_branch_checks_refuse() -> None:
    from jsonschema import Draft202012Validator

    from policies.reflexion import reflexion_json_schema

    validator = Draft202012Validator(reflexion_json_schema(["get_order", "get_sku_price"]))
    base = {"root_cause": "r", "strategy_update": "s", "kind": "validation_rule"}
    amend = {"tool": "get_order", "amend": {"order_id": {"type": "string"}}}
    assert validator.is_valid({**base, "branch": amend, "cited_trace_ids": ["t-1"]})

    # An amendment maps each property to a schema, not to a type name.
    flat = {**amend, "amend": {"order_id": "string"}}
    assert not validator.is_valid({**base, "branch": flat})
    assert branch_errors("validation_rule", flat) != []
    # The cited ids are a list, even of one.
    assert not validator.is_valid({**base, "branch": amend, "cited_trace_ids": "t-1"})
    # A wait under a second is a wait: the schema admits what the branch checks admit.
    wait = {
        "tool": "get_sku_price",
        "on": "RATE_LIMITED",
        "action": "wait_retry",
        "max_retries": 1,
        "max_wait_s": 0.5,
    }
    assert branch_errors("error_handler", wait) == []
    assert validator.is_valid({**base, "kind": "error_handler", "branch": wait})


RETRY_AS_DIGITS = {
    "tool": "get_order",
    "on": "TYPE_MISMATCH",
    "action": "retry_once",
    "transform": {"order_id": "digits_to_int"},
}
# Every branch shape the engine can publish, as the reflexion model would send it.
BRANCHES = [
    ("prompt_hint", {"text": "Send get_order the order id as digits", "error_type": "TIMEOUT"}),
    ("validation_rule", {"tool": "get_order", "schema": {"required": ["order_id"]}}),
    ("validation_rule", {"tool": "get_order", "amend": {"order_id": {"type": "string"}}}),
    ("pre_condition", sku_lookup()),
    ("error_handler", {"tool": "get_order", "on": "TIMEOUT", "action": "handover"}),
    ("error_handler", RETRY_AS_DIGITS),
    ("error_handler", search_for_sku()),
    ("adapter", {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}),
    (
        "adapter",
        {
            "tool": "get_order",
            "field": "order_id",
            "steps": [{"op": "strip_prefix", "value": "#W"}],
        },
    ),
]
TOOLS = ["check_inventory", "get_order", "search_products"]


def _reply(kind: str, branch: Any, **fields: Any) -> dict[str, Any]:
    return {"root_cause": "r", "strategy_update": "s", "kind": kind, "branch": branch, **fields}


@pytest.mark.parametrize("tools", [TOOLS, []], ids=["tool enum", "no tools"])
@pytest.mark.parametrize(("kind", "branch"), BRANCHES)
def test_every_branch_shape_the_checks_accept_fits_the_reflexion_schema(
    kind: str, branch: dict[str, Any], tools: list[str]
) -> None:
    from jsonschema import Draft202012Validator

    from policies.reflexion import reflexion_json_schema

    schema = reflexion_json_schema(tools)
    Draft202012Validator.check_schema(schema)
    assert branch_errors(kind, branch) == []
    assert Draft202012Validator(schema).is_valid(_reply(kind, branch)), (kind, branch)


@pytest.mark.parametrize(
    ("kind", "branch"),
    [
        ("prompt_hint", {"text": 5}),
        ("validation_rule", {"tool": "get_order", "schema": "required: order_id"}),
        ("validation_rule", {"tool": 7, "schema": {}}),
        ("pre_condition", {**sku_lookup(), "arg": 1}),
        ("pre_condition", {k: v for k, v in sku_lookup().items() if k != "call"}),
        ("error_handler", {"tool": "get_order", "on": "TIMEOUT", "action": "reboot"}),
        ("error_handler", {**RETRY_AS_DIGITS, "transform": {"order_id": "shout"}}),
    ],
)
def test_the_reflexion_schema_refuses_what_constrained_decoding_must_rule_out(
    kind: str, branch: dict[str, Any]
) -> None:
    from jsonschema import Draft202012Validator

    from policies.reflexion import reflexion_json_schema

    validator = Draft202012Validator(reflexion_json_schema(TOOLS))
    assert not validator.is_valid(_reply(kind, branch)), (kind, branch)
    assert branch_errors(kind, branch) != []


def test_the_reflexion_schema_wants_text_for_the_root_cause_and_update() -> None:
    from jsonschema import Draft202012Validator

    from policies.reflexion import reflexion_json_schema

    validator = Draft202012Validator(reflexion_json_schema(TOOLS))
    kind, branch = BRANCHES[0]
    assert validator.is_valid(_reply(kind, branch))
    assert not validator.is_valid({**_reply(kind, branch), "root_cause": 5})
    assert not validator.is_valid({**_reply(kind, branch), "strategy_update": ["s"]})
    assert not validator.is_valid({**_reply(kind, branch), "cited_fields": [5]})
