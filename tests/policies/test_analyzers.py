"""What the deterministic analyzers leave alone (so the model is asked), and the
facts-anchored gate on a failure without a status code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.reflexion import (
    Proposal,
    analyze_missing_field,
    analyze_name_for_id,
    analyze_type_mismatch,
    failures_of_trace,
    gate_facts_anchored,
)

pytestmark = pytest.mark.django_db

INT_BODY = {"error": "type_mismatch", "field": "order_id", "expected_type": "integer"}


def _facts(failed_trace: Any, **kwargs: Any) -> Any:
    [facts] = failures_of_trace(failed_trace(**kwargs))
    return facts


@pytest.mark.parametrize(
    ("status_code", "body"),
    [
        (404, INT_BODY),
        (400, {**INT_BODY, "expected_type": "string"}),
        (400, {**INT_BODY, "field": "customer_id"}),
        (400, ["order_id", "integer"]),
        (400, None),
    ],
    ids=["not-a-400", "not-integer", "field-not-sent", "body-not-an-object", "no-body"],
)
def test_type_mismatch_needs_a_400_naming_an_integer_field_that_was_sent(
    failed_trace: Any, status_code: int, body: Any
) -> None:
    facts = _facts(
        failed_trace,
        status_code=status_code,
        body=json.dumps(body) if body is not None else "not json",
    )

    assert analyze_type_mismatch(facts) is None


def test_a_missing_field_is_read_from_the_validator_message_without_a_json_body(
    failed_trace: Any,
) -> None:
    trace = failed_trace(
        tool="search_products",
        action_input={"limit": 3},
        error_type="MISSING_REQUIRED_FIELD",
        body="not json",
    )
    trace.steps.update(
        error_detail="validator=required path=(root): 'query' is a required property"
    )
    [facts] = failures_of_trace(trace)

    proposal = analyze_missing_field(facts)

    assert proposal is not None
    assert proposal.branch == {"tool": "search_products", "schema": {"required": ["query"]}}


def test_a_missing_field_nobody_names_is_left_to_the_model(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"limit": 3},
        error_type="MISSING_REQUIRED_FIELD",
        body=json.dumps({"error": "bad request"}),
    )

    assert analyze_missing_field(facts) is None


@pytest.mark.parametrize(
    ("tool", "value"),
    [
        ("check_inventory", "ZZZ-00-X"),  # a malformed id, not a name
        ("get_order", "my blue jacket order"),  # a name, but no tool looks order ids up
        ("check_inventory", 12345),  # not text at all
    ],
)
def test_name_for_id_needs_a_name_and_a_tool_to_look_it_up(
    failed_trace: Any, tool: str, value: Any
) -> None:
    arg = "sku" if tool == "check_inventory" else "order_id"
    facts = _facts(
        failed_trace,
        tool=tool,
        action_input={arg: value},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
    )

    assert analyze_name_for_id(facts) is None


def test_a_proposal_that_names_nothing_of_a_failure_without_status_is_not_anchored(
    failed_trace: Any,
) -> None:
    facts = _facts(failed_trace, status_code=None, error_type="TIMEOUT")
    vague = Proposal(
        kind="prompt_hint",
        branch={"text": "Be careful."},
        root_cause="it broke",
        strategy_update="be careful",
        origin="test",
    )

    assert gate_facts_anchored(vague, facts) == (
        "names nothing from the trace (tool, error type, argument or status)"
    )
    # naming the tool is enough
    vague.strategy_update = "be careful with get_order"
    assert gate_facts_anchored(vague, facts) == ""


def test_a_proposal_of_an_unknown_kind_is_not_actionable() -> None:
    from policies.reflexion import gate_actionable

    wish = Proposal(
        kind="wish", branch={}, root_cause="get_order failed", strategy_update="x", origin="t"
    )

    assert gate_actionable(wish) == "unknown kind 'wish'"
