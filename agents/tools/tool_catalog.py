"""The demo shop's tools, as code. ``tools_sync`` writes them to Tool rows admins manage.

Endpoints are templates: ``{sandbox}`` is the configured SANDBOX_BASE_URL and ``{name}``
placeholders are filled from (URL-quoted) arguments; the remaining arguments become the
query string (GET) or the JSON body (POST). The model never supplies an endpoint.
"""

from __future__ import annotations

from typing import Any

from agents.tools.registry import ToolDefinition

ORDER_ID = {"type": "string", "pattern": r"^#W\d{7}$", "description": "Order id like #W1234567"}
USER_ID = {"type": "string", "pattern": r"^U\d{8}$", "description": "User id like U00001234"}
SKU = {
    "type": "string",
    "pattern": r"^[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}$",
    "description": "SKU code like AWH-2041-BLK (not the product name)",
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


SANDBOX_TOOLS: list[ToolDefinition] = [
    ToolDefinition(
        name="get_order",
        description=(
            "When a customer asks where an order is, whether it shipped, its tracking number "
            "or delivery date: returns the order's status, items and shipping details."
        ),
        params_schema=_object({"order_id": ORDER_ID}, ["order_id"]),
        endpoint="{sandbox}/orders/{order_id}",
        key_fields=[
            "order_id",
            "status",
            "shipping_status",
            "placed_at",
            "total",
            "items",
            "shipping.carrier",
            "shipping.tracking_number",
            "shipping.estimated_delivery",
            "shipping.delivered_at",
        ],
    ),
    ToolDefinition(
        name="list_user_orders",
        description=(
            "When a customer gives their user id but no order id: lists their most recent "
            "orders, newest first."
        ),
        params_schema=_object(
            {"user_id": USER_ID, "limit": {"type": "integer", "minimum": 1, "maximum": 20}},
            ["user_id"],
        ),
        endpoint="{sandbox}/users/{user_id}/orders",
    ),
    ToolDefinition(
        name="search_products",
        description=(
            "When a customer names a product: finds products by name words and returns "
            "their product ids and SKU codes. Use it to get a SKU before price or stock calls."
        ),
        params_schema=_object(
            {
                "query": {"type": "string", "minLength": 2, "maxLength": 100},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            ["query"],
        ),
        endpoint="{sandbox}/products",
        query_map={"query": "q"},
        key_fields=[
            "results.product_id",
            "results.name",
            "results.brand",
            "results.skus.sku",
            "results.skus.color",
            "results.skus.size",
        ],
    ),
    ToolDefinition(
        name="get_sku_price",
        description=(
            "When a customer asks what something costs or about discounts: returns the price, "
            "active promotions and final price of one SKU code."
        ),
        params_schema=_object({"sku": SKU}, ["sku"]),
        endpoint="{sandbox}/skus/{sku}",
        key_fields=["sku", "product_name", "color", "size", "price", "final_price", "promotions"],
    ),
    ToolDefinition(
        name="check_inventory",
        description=(
            "When a customer asks whether something is in stock or when it will be back: "
            "returns stock per warehouse for one SKU code."
        ),
        params_schema=_object({"sku": SKU}, ["sku"]),
        endpoint="{sandbox}/inventory/{sku}",
    ),
    ToolDefinition(
        name="get_return_status",
        description=(
            "When a customer wants to return an order or asks about a refund: returns whether "
            "the order is eligible for return, the deadline and existing return requests."
        ),
        params_schema=_object({"order_id": ORDER_ID}, ["order_id"]),
        endpoint="{sandbox}/returns/{order_id}",
    ),
    ToolDefinition(
        name="search_articles",
        description=(
            "When a customer asks about a policy or a general how-to (shipping times, return "
            "window, warranty, payment): searches the FAQ and policy articles."
        ),
        params_schema=_object({"query": {"type": "string", "minLength": 2}}, ["query"]),
        endpoint="{sandbox}/articles",
        query_map={"query": "q"},
    ),
]
