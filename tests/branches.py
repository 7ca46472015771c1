"""Policy branches that several test modules publish or replay."""

from __future__ import annotations

from typing import Any

#: The sandbox's SKU format (``AWH-2041-BLK``); a value outside it is a product name.
SKU_PATTERN = r"^[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}$"


def sku_lookup(**overrides: Any) -> dict[str, Any]:
    """A pre-condition that, when ``check_inventory`` gets a ``sku`` outside the SKU
    format, searches the products for it and sends the first match's SKU instead."""
    branch: dict[str, Any] = {
        "tool": "check_inventory",
        "arg": "sku",
        "not_pattern": SKU_PATTERN,
        "call": "search_products",
        "input": {"query": "$arg"},
        "take": "results.0.skus.0.sku",
        "assign": "sku",
    }
    branch.update(overrides)
    return branch


def search_for_sku() -> dict[str, Any]:
    """An error handler that, when ``check_inventory`` finds no such SKU, searches the
    products with the value sent instead."""
    return {
        "tool": "check_inventory",
        "on": "RESOURCE_NOT_FOUND",
        "action": "call_tool",
        "call": "search_products",
        "input": {"query": "$arg"},
    }
