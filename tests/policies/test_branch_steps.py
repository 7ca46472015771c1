"""Adapter branches that carry repair steps: validated with clear errors, compiled into the
runtime policy, described for reviewers, and kept through a policy document round trip."""

from __future__ import annotations

from typing import Any

import pytest

from agents.policy_runtime import apply_adapters
from agents.repairs import RepairContext
from policies.branches import (
    branch_describe,
    branch_errors,
    branch_fields,
    branch_slot,
    runtime_policy_compile,
)
from policies.documents import policy_document_parse, policy_document_render
from tests.policies.test_documents import entry_make

STRIP_AND_PAD = {
    "tool": "get_order",
    "field": "order_id",
    "steps": [
        {"op": "strip_prefix", "value": "#W"},
        {"op": "zero_pad", "width": 9},
    ],
}
RENAME = {"tool": "search_products", "steps": [{"op": "rename", "from": "query", "to": "q"}]}


@pytest.mark.parametrize("branch", [STRIP_AND_PAD, RENAME])
def test_a_branch_with_valid_steps_compiles(branch: dict[str, Any]) -> None:
    assert branch_errors("adapter", branch) == []


def test_a_named_transform_and_steps_combine_in_that_order() -> None:
    branch = {
        "tool": "get_order",
        "field": "order_id",
        "transform": "strip",
        "steps": [{"op": "case", "to": "upper"}],
    }
    assert branch_errors("adapter", branch) == []
    policy = runtime_policy_compile(version="v1", strategies=[(5, "adapter", branch, "")])
    (rule,) = policy.adapters["get_order"]
    assert apply_adapters((rule,), {"order_id": " #w12 "})[0] == {"order_id": "#W12"}


@pytest.mark.parametrize(
    ("branch", "errors"),
    [
        ({"tool": "get_order"}, ["missing 'transform' or 'steps'"]),
        ({"tool": "get_order", "field": "x"}, ["missing 'transform'"]),
        ({"tool": "get_order", "transform": "strip"}, ["missing 'field'"]),
        (
            {"tool": "get_order", "steps": [{"op": "trim"}]},
            ["steps: step 1 (trim): a value transform needs a 'field' (or the adapter's field)"],
        ),
        (
            {"tool": "get_order", "field": "x", "steps": [{"op": "zero_pad", "width": 99}]},
            ["steps: step 1 (zero_pad): width must be an integer 1..64"],
        ),
        (
            {
                "tool": "get_order",
                "field": "x",
                "steps": [{"op": "regex_replace", "pattern": "(a+)+b"}],
            },
            [
                "steps: step 1 (regex_replace): nested quantifiers are not allowed "
                "(they can backtrack for ever)"
            ],
        ),
        ({"tool": "get_order", "field": "x", "steps": "trim"}, ["steps: steps must be a list"]),
        ({"field": "x", "steps": [{"op": "trim"}]}, ["a adapter needs the tool it applies to"]),
    ],
)
def test_invalid_steps_are_refused_with_clear_errors(
    branch: dict[str, Any], errors: list[str]
) -> None:
    found = branch_errors("adapter", branch)
    assert [e[: len(x)] for e, x in zip(found, errors, strict=False)] == errors
    assert len(found) == len(errors)


def test_an_invalid_branch_never_reaches_the_runtime() -> None:
    bad = {"tool": "get_order", "field": "x", "steps": [{"op": "scale", "factor": 0}]}
    policy = runtime_policy_compile(version="v1", strategies=[(1, "adapter", bad, "")])
    assert policy.adapters == {}


def test_compiled_steps_use_the_runs_context() -> None:
    branch = {
        "tool": "get_orders",
        "steps": [{"op": "add", "name": "customer_id", "from": "customer", "in": "query"}],
    }
    policy = runtime_policy_compile(version="v1", strategies=[(9, "adapter", branch, "")])
    args, fired = apply_adapters(
        policy.adapters["get_orders"], {}, RepairContext(customer_id="C-1")
    )
    assert args == {"customer_id": "C-1"}
    assert fired[0]["strategy"] == 9 and fired[0]["locations"] == {"customer_id": "query"}


def test_steps_read_as_a_sentence_and_as_fields() -> None:
    assert branch_describe("adapter", STRIP_AND_PAD) == (
        "Before calling get_order: remove the prefix '#W' from order_id; then left-pad "
        "order_id with '0' to 9 characters."
    )
    assert branch_describe("adapter", RENAME) == "Before calling search_products: send query as q."
    assert ("Steps", "send query as q") in branch_fields("adapter", RENAME)


def test_a_steps_only_adapter_has_a_slot_of_the_arguments_it_touches() -> None:
    assert branch_slot("adapter", RENAME) == "adapter|search_products||q,query"
    assert branch_slot("adapter", STRIP_AND_PAD) == "adapter|get_order||order_id"


def test_steps_survive_a_policy_document_round_trip() -> None:
    entry = entry_make(4, "adapter", branch=STRIP_AND_PAD)
    text = policy_document_render(number=2, parent=1, strategies=[entry])
    parsed = policy_document_parse(text)
    (back,) = parsed.entries
    assert back.branch == STRIP_AND_PAD
    assert policy_document_render(number=2, parent=1, strategies=parsed.entries) == text
