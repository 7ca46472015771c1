"""Reviewers read what a strategy does as a sentence, never as a Python dict."""

from __future__ import annotations

from typing import Any

import pytest

from policies.branches import branch_describe


@pytest.mark.parametrize(
    ("kind", "branch", "expected"),
    [
        (
            "adapter",
            {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"},
            "Before calling get_order: in order_id, keep only its digits, as a number.",
        ),
        (
            "validation_rule",
            {
                "tool": "get_stock",
                "schema": {
                    "type": "object",
                    "required": ["sku"],
                    "properties": {"sku": {"type": "string", "pattern": "^SKU-[0-9]+$"}},
                    "additionalProperties": False,
                },
            },
            "Before calling get_stock: refuse the call unless the input requires sku; "
            "sku: string matching ^SKU-[0-9]+$; no other fields.",
        ),
        (
            "pre_condition",
            {
                "tool": "get_stock",
                "arg": "sku",
                "not_pattern": "^SKU-",
                "call": "search_products",
                "input": {"q": "{value}"},
                "take": "results.0.sku",
                "assign": "sku",
            },
            "Before calling get_stock: when sku does not match ^SKU-, look it up with "
            'search_products(q="{value}") and use the result\'s results.0.sku as sku.',
        ),
        (
            "error_handler",
            {
                "tool": "get_order",
                "on": "TYPE_MISMATCH",
                "action": "retry_once",
                "transform": {"order_id": "digits_to_int"},
            },
            "When get_order fails with TYPE_MISMATCH: retry the call once, after changing "
            "order_id (keep only its digits, as a number).",
        ),
        (
            "error_handler",
            {"tool": "get_price", "on": "TIMEOUT", "action": "degrade_cache"},
            "When get_price fails with TIMEOUT: answer from the last cached result, marked "
            "as possibly out of date.",
        ),
        (
            "prompt_hint",
            {"text": "Ask for the order number first.", "intent": "order_status"},
            "Tells the model on every request for order_status requests: "
            "“Ask for the order number first.”",
        ),
    ],
)
def test_each_branch_kind_reads_as_a_sentence(
    kind: str, branch: dict[str, Any], expected: str
) -> None:
    text = branch_describe(kind, branch)
    assert text == expected
    assert "{'" not in text


def test_a_branch_that_cannot_apply_says_why() -> None:
    assert branch_describe("adapter", {"tool": "get_order", "field": "x"}) == (
        "Cannot be applied as written: missing 'transform'."
    )
