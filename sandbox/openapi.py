"""The sandbox shop API as an OpenAPI 3.1 document, generated from its routes.

Paths, path parameters and methods come from ``sandbox.urls`` (the ``allow_methods``
decorator records each view's methods); what a route cannot say (an operation id, a
summary, query parameters, a request body) comes from ``OPERATIONS``, keyed by route
name. A public route missing from ``OPERATIONS`` is an error, so the document cannot drift
from the routes silently. The fault-injection and contract-drift routes are operator
controls, not shop API, and are left out.
"""

from __future__ import annotations

import re
from typing import Any

from django.urls import URLPattern

from sandbox.views import (
    ARTICLES_MAX_LIMIT,
    RETURN_REASON_MAX_LENGTH,
    SEARCH_MAX_LIMIT,
    USER_ORDERS_MAX_LIMIT,
)

HIDDEN_ROUTES = {"faults", "fault_detail", "drifts", "drift_detail", "unknown", "openapi"}
PATH_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")

ORDER_ID = {"type": "string", "pattern": r"^#W\d{7}$", "description": "Order id like #W1234567"}
USER_ID = {"type": "string", "pattern": r"^U\d{8}$", "description": "User id like U00001234"}
SKU = {"type": "string", "description": "SKU code like AWH-2041-BLK"}
PATH_SCHEMAS = {"order_id": ORDER_ID, "user_id": USER_ID, "sku": SKU}


def _limit(maximum: int) -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": maximum},
    }


def _q(description: str) -> dict[str, Any]:
    return {
        "name": "q",
        "in": "query",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 2, "maxLength": 100},
    }


# Route name -> (method -> what the route itself cannot tell).
OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "users": {"GET": {"operationId": "getUser", "summary": "A shop user's profile"}},
    "user_orders": {
        "GET": {
            "operationId": "listUserOrders",
            "summary": "A user's most recent orders, newest first",
            "parameters": [_limit(USER_ORDERS_MAX_LIMIT)],
        }
    },
    "orders": {
        "GET": {
            "operationId": "getOrder",
            "summary": "An order's status, items and shipping details (carrier, tracking)",
        }
    },
    "products": {
        "GET": {
            "operationId": "searchProducts",
            "summary": "Products whose name matches the search words, with their SKU codes",
            "parameters": [_q("Product name words"), _limit(SEARCH_MAX_LIMIT)],
        }
    },
    "product_detail": {"GET": {"operationId": "getProduct", "summary": "One product and its SKUs"}},
    "skus": {
        "GET": {
            "operationId": "getSkuPrice",
            "summary": "Price, active promotions and final price of one SKU",
        }
    },
    "inventory": {
        "GET": {"operationId": "checkInventory", "summary": "Stock per warehouse of one SKU"}
    },
    "promotions": {
        "GET": {
            "operationId": "listPromotions",
            "summary": "Active promotions, optionally for one SKU or product",
            "parameters": [
                {"name": "sku", "in": "query", "schema": {"type": "string"}},
                {"name": "product_id", "in": "query", "schema": {"type": "string"}},
            ],
        }
    },
    "returns_create": {
        "POST": {
            "operationId": "createReturn",
            "summary": "Open a return request for an order",
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": (
                        "Sent again with the same request, the first response comes back "
                        "(Idempotent-Replayed: true) and no second return is opened"
                    ),
                    "schema": {"type": "string", "maxLength": 255},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "order_id": ORDER_ID,
                                "reason": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": RETURN_REASON_MAX_LENGTH,
                                },
                                "skus": {"type": "array", "items": {"type": "string"}},
                            },
                            "required": ["order_id", "reason"],
                        }
                    }
                },
            },
        }
    },
    "returns": {
        "GET": {
            "operationId": "getReturnStatus",
            "summary": "Whether an order can be returned, the deadline and its return requests",
        }
    },
    "articles": {
        "GET": {
            "operationId": "searchArticles",
            "summary": "Search the FAQ and policy articles",
            "parameters": [_q("Search words"), _limit(ARTICLES_MAX_LIMIT)],
        }
    },
    "article_detail": {"GET": {"operationId": "getArticle", "summary": "One help article"}},
}


def sandbox_openapi(*, server_url: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the sandbox API served at ``server_url``."""
    from sandbox.urls import urlpatterns

    paths: dict[str, Any] = {}
    for pattern in urlpatterns:
        if not isinstance(pattern, URLPattern) or pattern.name in HIDDEN_ROUTES:
            continue
        route = str(pattern.pattern)
        names = PATH_CONVERTER.findall(route)
        path = "/" + PATH_CONVERTER.sub(lambda match: "{" + match.group(1) + "}", route)
        methods = getattr(pattern.callback, "allowed_methods", ("GET",))
        documented = OPERATIONS.get(pattern.name or "")
        if documented is None:
            raise LookupError(f"sandbox route {pattern.name!r} is not described in OPERATIONS")
        item: dict[str, Any] = {}
        for method in methods:
            extra = dict(documented[method])
            path_parameters = [
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": PATH_SCHEMAS.get(name, {"type": "string"}),
                }
                for name in names
            ]
            item[method.lower()] = {
                **extra,
                "parameters": [*path_parameters, *extra.get("parameters", [])],
                "responses": {
                    "200": {"description": "The resource, as JSON"},
                    "default": {"description": 'An error: {"error": ..., "detail": ...}'},
                },
            }
        paths[path] = item
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sandbox shop API", "version": "1"},
        "servers": [{"url": server_url.rstrip("/")}],
        "paths": paths,
    }
