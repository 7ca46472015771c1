"""HTTP API of the sandbox shop. Views parse and validate input, then call selectors/services."""

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from functools import wraps
from typing import Any

from django.contrib.auth import authenticate
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from sandbox import selectors, services
from sandbox.clock import shop_now
from sandbox.faults import inject_faults, request_requires_int_id
from sandbox.idempotency import idempotent
from sandbox.models import (
    ORDER_ID_PATTERN,
    Article,
    ContractDrift,
    FaultRule,
    Order,
    Product,
    Promotion,
    ReturnRequest,
    Sku,
)

USER_ORDERS_MAX_LIMIT = 20
SEARCH_MAX_LIMIT = 50
ARTICLES_MAX_LIMIT = 20
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


# --- responses -----------------------------------------------------------------------------


def _error(status: int, error: str, detail: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail, **extra}, status=status)


def _not_found(detail: str) -> JsonResponse:
    return _error(404, "not_found", detail)


def _missing(field: str, detail: str | None = None) -> JsonResponse:
    return _error(400, "missing_required_field", detail or f"{field} is required", field=field)


def _type_mismatch(field: str, expected: str, detail: str) -> JsonResponse:
    return _error(400, "type_mismatch", detail, field=field, expected_type=expected)


def _money(value: Decimal | None) -> float | None:
    # JSON numbers are what API clients compare and add up; two decimals are exact enough.
    return None if value is None else float(value)


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


View = Callable[..., HttpResponse]


def allow_methods(*methods: str) -> Callable[[View], View]:
    """Like ``require_http_methods`` but answers 405 in the API's JSON error shape.

    It also refuses a NUL character anywhere in the path or query: no id or search text can
    contain one, and PostgreSQL fails on it instead of finding nothing.
    """

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = _error(
                    405, "method_not_allowed", f"{request.method} is not allowed here"
                )
                response["Allow"] = ", ".join(methods)
                return response
            query = [text for key, values in request.GET.lists() for text in (key, *values)]
            if any("\x00" in text for text in (request.path, *query)):
                return _error(400, "invalid_parameter", "NUL characters are not allowed")
            return view(request, *args, **kwargs)

        # Read by sandbox/openapi.py to list each route's methods.
        wrapped.allowed_methods = methods  # type: ignore[attr-defined]
        return wrapped

    return decorator


# --- parameter parsing -------------------------------------------------------------------


def _refuse_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _unstorable_text(text: str) -> bool:
    """PostgreSQL text cannot hold NUL, nor UTF-8 a lone surrogate (JSON's "\\ud800")."""
    return "\x00" in text or _LONE_SURROGATE.search(text) is not None


def _unstorable_strings(data: Any) -> bool:
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and _unstorable_text(value):
            return True
        if isinstance(value, dict):
            pending.extend([*value.keys(), *value.values()])
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _json_body(request: HttpRequest, *, empty: bytes) -> Any | JsonResponse:
    """The request body as JSON, or a 400 in the API's error shape.

    Python's parser takes NaN and Infinity (and turns 1e999 into inf), which no JSON client
    sends and no rate or duration can be, and raises RecursionError on deep nesting.
    """
    try:
        body = json.loads(
            request.body or empty,
            parse_constant=_refuse_json_constant,
            parse_float=_finite_float,
        )
    except RecursionError:
        return _error(400, "invalid_json", "request body is nested too deeply")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
        return _error(400, "invalid_json", f"request body must be a JSON object: {exc}")
    if _unstorable_strings(body):
        return _error(
            400, "invalid_parameter", "strings must not contain NUL characters or lone surrogates"
        )
    return body


def _limit_param(request: HttpRequest, *, default: int, maximum: int) -> int | JsonResponse:
    raw = request.GET.get("limit")
    if raw is None or raw == "":
        return default
    try:
        limit = int(raw)
    except ValueError:
        return _type_mismatch("limit", "integer", "limit must be an integer")
    if not 1 <= limit <= maximum:
        return _error(
            400, "invalid_parameter", f"limit must be between 1 and {maximum}", field="limit"
        )
    return limit


def _order_lookup(request: HttpRequest, raw: Any) -> dict[str, Any] | JsonResponse:
    """Turn an order reference into selector kwargs, honouring require_int_id drift."""
    if request_requires_int_id(request):
        if isinstance(raw, bool):
            raw = str(raw)
        if isinstance(raw, int):
            return {"numeric_id": raw}
        if isinstance(raw, str) and raw.isdigit():
            return {"numeric_id": int(raw)}
        return _type_mismatch("order_id", "integer", f"order_id must be an integer, got {raw!r}")
    if not isinstance(raw, str) or not re.match(ORDER_ID_PATTERN, raw):
        return _error(
            400,
            "invalid_parameter",
            f"order_id must look like '#W' followed by 7 digits (e.g. #W1234567), got {raw!r}",
            field="order_id",
        )
    return {"order_id": raw}


# --- payloads ------------------------------------------------------------------------------


def _sku_brief(sku: Sku) -> dict[str, Any]:
    return {"sku": sku.sku, "color": sku.color, "size": sku.size or None}


def _product_brief(product: Product) -> dict[str, Any]:
    return {
        "product_id": product.product_id,
        "name": product.name,
        "brand": product.brand,
        "category": product.category,
        "skus": [_sku_brief(sku) for sku in product.skus.all()],
    }


def _promotion_payload(promotion: Promotion) -> dict[str, Any]:
    return {
        "code": promotion.code,
        "percent_off": promotion.percent_off,
        "sku": promotion.sku.sku if promotion.sku else None,
        "product_id": promotion.product.product_id if promotion.product else None,
        "starts_at": _iso(promotion.starts_at),
        "ends_at": _iso(promotion.ends_at),
        "active": promotion.starts_at <= shop_now() < promotion.ends_at,
    }


def _return_payload(return_request: ReturnRequest) -> dict[str, Any]:
    return {
        "return_id": return_request.return_id,
        "status": return_request.status,
        "reason": return_request.reason,
        "skus": return_request.skus,
        "created_at": _iso(return_request.created_at),
        "refund_amount": _money(return_request.refund_amount),
    }


def _article_summary(article: Article) -> str:
    if len(article.body) <= 200:
        return article.body
    return article.body[:200].rsplit(" ", 1)[0] + "…"


# --- shop endpoints ------------------------------------------------------------------------


@allow_methods("GET")
@inject_faults("users")
def user_detail(request: HttpRequest, user_id: str) -> HttpResponse:
    user = selectors.shopuser_get(user_id=user_id)
    if user is None:
        return _not_found(f"user {user_id} not found")
    return JsonResponse(
        {
            "user_id": user.user_id,
            "name": user.name,
            "email": user.email,
            "tier": user.tier,
            "created_at": _iso(user.created_at),
        }
    )


@allow_methods("GET")
@inject_faults("user_orders")
def user_orders(request: HttpRequest, user_id: str) -> HttpResponse:
    limit = _limit_param(request, default=5, maximum=USER_ORDERS_MAX_LIMIT)
    if isinstance(limit, JsonResponse):
        return limit
    user = selectors.shopuser_get(user_id=user_id)
    if user is None:
        return _not_found(f"user {user_id} not found")
    orders = selectors.shopuser_orders(user=user, limit=limit)
    return JsonResponse(
        {
            "user_id": user.user_id,
            "orders": [
                {
                    "order_id": order.order_id,
                    "status": order.status,
                    "placed_at": _iso(order.placed_at),
                    "total": _money(order.total),
                    "currency": order.currency,
                }
                for order in orders
            ],
        }
    )


def _order_or_error(request: HttpRequest, raw: Any) -> Order | JsonResponse:
    lookup = _order_lookup(request, raw)
    if isinstance(lookup, JsonResponse):
        return lookup
    order = selectors.order_get(**lookup)
    if order is None:
        return _not_found(f"order {raw} not found")
    return order


@allow_methods("GET")
@inject_faults("orders")
def order_detail(request: HttpRequest, order_id: str) -> HttpResponse:
    order = _order_or_error(request, order_id)
    if isinstance(order, JsonResponse):
        return order
    return JsonResponse(
        {
            "order_id": order.order_id,
            "user_id": order.user.user_id,
            "status": order.status,
            "placed_at": _iso(order.placed_at),
            "items": [
                {
                    "sku": item.sku.sku,
                    "product_name": item.sku.product.name,
                    "quantity": item.quantity,
                    "unit_price": _money(item.unit_price),
                }
                for item in order.items.all()
            ],
            "total": _money(order.total),
            "currency": order.currency,
            "shipping": {
                "carrier": order.carrier or None,
                "tracking_number": order.tracking_number or None,
                "estimated_delivery": _iso(order.estimated_delivery),
                "shipped_at": _iso(order.shipped_at),
                "delivered_at": _iso(order.delivered_at),
            },
        }
    )


@allow_methods("GET")
@inject_faults("products")
def product_search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    if not query:
        return _missing("q", "q (search text) is required")
    limit = _limit_param(request, default=10, maximum=SEARCH_MAX_LIMIT)
    if isinstance(limit, JsonResponse):
        return limit
    products = selectors.product_search(query=query, limit=limit)
    return JsonResponse({"results": [_product_brief(product) for product in products]})


@allow_methods("GET")
@inject_faults("product_detail")
def product_detail(request: HttpRequest, product_id: str) -> HttpResponse:
    product = selectors.product_get(product_id=product_id)
    if product is None:
        return _not_found(f"product {product_id!r} not found")
    return JsonResponse(
        {
            "product_id": product.product_id,
            "name": product.name,
            "brand": product.brand,
            "category": product.category,
            "description": product.description,
            "skus": [
                {**_sku_brief(sku), "price": _money(sku.price), "currency": sku.currency}
                for sku in product.skus.all()
            ],
        }
    )


@allow_methods("GET")
@inject_faults("skus")
def sku_detail(request: HttpRequest, sku: str) -> HttpResponse:
    found = selectors.sku_get(sku=sku)
    if found is None:
        return _not_found(f"sku {sku!r} not found")
    promotions = selectors.sku_active_promotions(sku=found)
    return JsonResponse(
        {
            "sku": found.sku,
            "product_id": found.product.product_id,
            "product_name": found.product.name,
            "color": found.color,
            "size": found.size or None,
            "price": _money(found.price),
            "currency": found.currency,
            "promotions": [
                {
                    "code": promotion.code,
                    "percent_off": promotion.percent_off,
                    "ends_at": _iso(promotion.ends_at),
                }
                for promotion in promotions
            ],
            "final_price": _money(selectors.sku_final_price(sku=found, promotions=promotions)),
        }
    )


@allow_methods("GET")
@inject_faults("inventory")
def inventory_detail(request: HttpRequest, sku: str) -> HttpResponse:
    found = selectors.sku_get(sku=sku)
    if found is None:
        return _not_found(f"sku {sku!r} not found")
    stock = selectors.sku_inventory(sku=found)
    available = sum(row.quantity for row in stock)
    restock_dates = [row.restock_date for row in stock if row.restock_date is not None]
    return JsonResponse(
        {
            "sku": found.sku,
            "available": available,
            "in_stock": available > 0,
            "warehouses": [{"code": row.warehouse, "quantity": row.quantity} for row in stock],
            "restock_date": _iso(min(restock_dates)) if available == 0 and restock_dates else None,
        }
    )


@allow_methods("GET")
@inject_faults("promotions")
def promotion_list(request: HttpRequest) -> HttpResponse:
    sku_code = request.GET.get("sku", "").strip()
    product_id = request.GET.get("product_id", "").strip()
    if sku_code:
        sku = selectors.sku_get(sku=sku_code)
        if sku is None:
            return _not_found(f"sku {sku_code!r} not found")
        promotions = selectors.promotion_list(sku=sku)
    elif product_id:
        product = selectors.product_get(product_id=product_id)
        if product is None:
            return _not_found(f"product {product_id!r} not found")
        promotions = selectors.promotion_list(product=product)
    else:
        return _missing("sku", "pass sku or product_id")
    return JsonResponse({"results": [_promotion_payload(promotion) for promotion in promotions]})


@allow_methods("GET")
@inject_faults("returns")
def return_status(request: HttpRequest, order_id: str) -> HttpResponse:
    order = _order_or_error(request, order_id)
    if isinstance(order, JsonResponse):
        return order
    eligibility = selectors.order_return_eligibility(order=order)
    return JsonResponse(
        {
            "order_id": order.order_id,
            "eligible": eligibility.eligible,
            "reason": eligibility.reason,
            "deadline": _iso(eligibility.deadline),
            "returns": [_return_payload(r) for r in selectors.order_returns(order=order)],
        }
    )


# The column's length: PostgreSQL refuses a longer value instead of truncating it.
RETURN_REASON_MAX_LENGTH = ReturnRequest._meta.get_field("reason").max_length or 0


@csrf_exempt
@allow_methods("POST")
@idempotent("returns_create")
@inject_faults("returns_create")
def return_create(request: HttpRequest) -> HttpResponse:
    body = _json_body(request, empty=b"null")
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict):
        return _type_mismatch("body", "object", "request body must be a JSON object")
    for field in ("order_id", "reason"):
        if body.get(field) is None:
            return _missing(field)
    reason = body["reason"]
    if not isinstance(reason, str):
        return _type_mismatch("reason", "string", f"reason must be a string, got {reason!r}")
    if not reason.strip():
        return _error(400, "invalid_parameter", "reason must not be empty", field="reason")
    if len(reason.strip()) > RETURN_REASON_MAX_LENGTH:
        return _error(
            400,
            "invalid_parameter",
            f"reason must be at most {RETURN_REASON_MAX_LENGTH} characters",
            field="reason",
        )
    skus = body.get("skus")
    if skus is not None and (
        not isinstance(skus, list) or not all(isinstance(code, str) for code in skus)
    ):
        return _type_mismatch("skus", "array", "skus must be a list of SKU code strings")
    order = _order_or_error(request, body["order_id"])
    if isinstance(order, JsonResponse):
        return order
    try:
        created = services.return_request_create(order=order, reason=reason.strip(), skus=skus)
    except services.ReturnNotAllowed as refused:
        status = 409 if refused.code == "not_eligible" else 400
        extra = {"field": "skus"} if refused.code == "invalid_parameter" else {}
        return _error(status, refused.code, refused.detail, **extra)
    return JsonResponse(
        {
            "return_id": created.return_id,
            "order_id": order.order_id,
            "status": created.status,
            "skus": created.skus,
            "refund_amount": _money(created.refund_amount),
        },
        status=201,
    )


@allow_methods("GET")
@inject_faults("articles")
def article_search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    if not query:
        return _missing("q", "q (search text) is required")
    limit = _limit_param(request, default=5, maximum=ARTICLES_MAX_LIMIT)
    if isinstance(limit, JsonResponse):
        return limit
    articles = selectors.article_search(query=query, limit=limit)
    return JsonResponse(
        {
            "results": [
                {
                    "slug": article.slug,
                    "title": article.title,
                    "category": article.category,
                    "summary": _article_summary(article),
                }
                for article in articles
            ]
        }
    )


@allow_methods("GET")
@inject_faults("article_detail")
def article_detail(request: HttpRequest, slug: str) -> HttpResponse:
    article = selectors.article_get(slug=slug)
    if article is None:
        return _not_found(f"article {slug!r} not found")
    return JsonResponse(
        {
            "slug": article.slug,
            "title": article.title,
            "category": article.category,
            "body": article.body,
            "updated_at": _iso(article.updated_at),
        }
    )


def unknown_endpoint(request: HttpRequest, rest: str = "") -> HttpResponse:
    return _not_found(f"no sandbox endpoint at {request.path}")


# --- fault administration -------------------------------------------------------------------


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


# Declared on FaultRule.Meta; the project's roles hand it to ops and admins. Being staff
# is not enough: faults break every agent's tool calls and feed the learning loop.
INJECT_FAULTS = "sandbox.inject_faults"
_NEEDS_PERMISSION = f"the {INJECT_FAULTS} permission is required"


def _fault_injector_or_error(request: HttpRequest) -> JsonResponse | None:
    """Allow holders of the inject-faults permission via HTTP Basic, or via the session
    (then with the usual CSRF check)."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
            username, _, password = decoded.partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return _error(403, "forbidden", "malformed Basic credentials")
        user = authenticate(request, username=username, password=password)
        if user is None or not user.has_perm(INJECT_FAULTS):
            return _error(403, "forbidden", _NEEDS_PERMISSION)
        return None
    scheme = header.split(" ", 1)[0]
    if scheme:
        # An ops user with an /api/ token would otherwise read "permission required".
        return _error(
            403,
            "forbidden",
            f"the fault API takes HTTP Basic or a signed-in session, not {scheme!r} credentials",
        )
    if not request.user.has_perm(INJECT_FAULTS):
        return _error(403, "forbidden", _NEEDS_PERMISSION)
    if request.method not in SAFE_METHODS:
        check = _CsrfCheck(lambda _request: HttpResponse())
        check.process_request(request)
        reason = check.process_view(request, None, (), {})  # type: ignore[arg-type]
        if reason:
            return _error(403, "forbidden", f"CSRF check failed: {reason}")
    return None


# The JSON type of each settable field. Checked before the model sees the value, because
# the model coerces (1.5 -> 1, 1 -> True) or skips blank values (null, [] in a CharField)
# that the database then refuses.
_FAULTRULE_FIELD_TYPES = {
    "enabled": "boolean",
    **dict.fromkeys(FaultRule.RATE_FIELDS, "number"),
    "timeout_seconds": "number",
    "slow_ms": "integer",
    "seed": "integer",
    "drift": "string",
    "drift_from": "string",
    "drift_to": "string",
}
_ARTICLE = {"boolean": "a", "number": "a", "integer": "an", "string": "a"}


def _has_json_type(value: Any, expected: str) -> bool:
    # bool is an int subclass; True must not silently become a rate of 1.0.
    if isinstance(value, bool):
        return expected == "boolean"
    if expected == "number":
        return isinstance(value, int | float)
    if expected == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "string":
        return isinstance(value, str)
    return False


def _faultrule_payload(rule: FaultRule) -> dict[str, Any]:
    return {
        "endpoint": rule.endpoint,
        "enabled": rule.enabled,
        **{name: getattr(rule, name) for name in FaultRule.RATE_FIELDS},
        "timeout_seconds": rule.timeout_seconds,
        "slow_ms": rule.slow_ms,
        "drift": rule.drift,
        "drift_from": rule.drift_from,
        "drift_to": rule.drift_to,
        "seed": rule.seed,
        "updated_at": _iso(rule.updated_at),
    }


def _validation_error(error: ValidationError, code: str = "invalid_fault_rule") -> JsonResponse:
    fields = error.message_dict if hasattr(error, "error_dict") else {"__all__": error.messages}
    detail = "; ".join(
        message if name == "__all__" else f"{name}: {message}"
        for name, messages in fields.items()
        for message in messages
    )
    return _error(400, code, detail, fields=fields)


@csrf_exempt
@allow_methods("GET")
def faultrule_index(request: HttpRequest) -> HttpResponse:
    denied = _fault_injector_or_error(request)
    if denied is not None:
        return denied
    return JsonResponse(
        {
            "results": [_faultrule_payload(rule) for rule in selectors.faultrule_list()],
            "endpoints": list(FaultRule.Endpoint.values),
        }
    )


@csrf_exempt
@allow_methods("GET", "PUT", "PATCH", "DELETE")
def faultrule_detail(request: HttpRequest, endpoint: str) -> HttpResponse:
    denied = _fault_injector_or_error(request)
    if denied is not None:
        return denied
    if endpoint not in FaultRule.Endpoint.values:
        known = ", ".join(FaultRule.Endpoint.values)
        return _not_found(f"unknown endpoint {endpoint!r}; expected one of {known}")
    if request.method == "GET":
        rule = selectors.faultrule_get(endpoint=endpoint)
        if rule is None:
            return _not_found(f"no fault rule for {endpoint!r}")
        return JsonResponse(_faultrule_payload(rule))
    if request.method == "DELETE":
        deleted = services.faultrule_clear(endpoint=endpoint)
        return JsonResponse({"endpoint": endpoint, "deleted": deleted > 0})
    body = _json_body(request, empty=b"{}")
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict):
        return _type_mismatch("body", "object", "request body must be a JSON object")
    body.pop("endpoint", None)
    unknown = sorted(set(body) - services.FAULTRULE_SETTABLE_FIELDS)
    if unknown:
        return _validation_error(ValidationError({name: "unknown field" for name in unknown}))
    for name, value in body.items():
        expected = _FAULTRULE_FIELD_TYPES[name]
        if not (value is None and name == "seed") and not _has_json_type(value, expected):
            return _type_mismatch(name, expected, f"{name} must be {_ARTICLE[expected]} {expected}")
    try:
        rule = services.faultrule_set(endpoint=endpoint, replace=request.method == "PUT", **body)
    except ValidationError as error:
        return _validation_error(error)
    return JsonResponse(_faultrule_payload(rule))


_DRIFT_FIELD_TYPES = {
    "endpoint": "string",
    "kind": "string",
    "enabled": "boolean",
    "param": "string",
    "old": "string",
    "new": "string",
    "pattern": "string",
    "layout": "string",
    "retry_after_s": "number",
    "note": "string",
}


def _drift_payload(drift: ContractDrift) -> dict[str, Any]:
    return {
        "id": drift.pk,
        "endpoint": drift.endpoint,
        "kind": drift.kind,
        "enabled": drift.enabled,
        "param": drift.param,
        "old": drift.old,
        "new": drift.new,
        "values": drift.values,
        "pattern": drift.pattern,
        "layout": drift.layout,
        "retry_after_s": drift.retry_after_s,
        "note": drift.note,
        "updated_at": _iso(drift.updated_at),
    }


def _drift_fields_or_error(body: Any) -> dict[str, Any] | JsonResponse:
    if not isinstance(body, dict):
        return _type_mismatch("body", "object", "request body must be a JSON object")
    body.pop("id", None)
    unknown = sorted(set(body) - services.DRIFT_SETTABLE_FIELDS)
    if unknown:
        return _validation_error(
            ValidationError({name: "unknown field" for name in unknown}), "invalid_drift"
        )
    for name, value in body.items():
        if name == "values":
            if not isinstance(value, list | dict):
                return _type_mismatch(name, "array", "values must be a list or an object")
            continue
        expected = _DRIFT_FIELD_TYPES[name]
        if not _has_json_type(value, expected):
            return _type_mismatch(name, expected, f"{name} must be {_ARTICLE[expected]} {expected}")
    return body


def _drift_write(request: HttpRequest, *, drift_id: int | None) -> JsonResponse:
    """Create a drift (no ``drift_id``: 201) or change one (200) from the JSON body."""
    body = _json_body(request, empty=b"{}")
    if isinstance(body, JsonResponse):
        return body
    fields = _drift_fields_or_error(body)
    if isinstance(fields, JsonResponse):
        return fields
    try:
        drift = services.contractdrift_set(drift_id=drift_id, **fields)
    except ValidationError as error:
        return _validation_error(error, "invalid_drift")
    return JsonResponse(_drift_payload(drift), status=201 if drift_id is None else 200)


@csrf_exempt
@allow_methods("GET", "POST", "DELETE")
def drift_index(request: HttpRequest) -> HttpResponse:
    """List the contract drifts, add one (POST), or remove them all (DELETE)."""
    denied = _fault_injector_or_error(request)
    if denied is not None:
        return denied
    if request.method == "DELETE":
        return JsonResponse({"deleted": services.contractdrift_delete()})
    if request.method == "POST":
        return _drift_write(request, drift_id=None)
    return JsonResponse(
        {
            "results": [_drift_payload(drift) for drift in selectors.contractdrift_list()],
            "kinds": {kind.value: kind.label for kind in ContractDrift.Kind},
            "layouts": list(ContractDrift.Layout.values),
            "endpoints": list(FaultRule.Endpoint.values),
        }
    )


@csrf_exempt
@allow_methods("GET", "PATCH", "DELETE")
def drift_detail(request: HttpRequest, drift_id: int) -> HttpResponse:
    denied = _fault_injector_or_error(request)
    if denied is not None:
        return denied
    if request.method == "DELETE":
        # Idempotent, like the fault API: deleting what is gone says so with a 200.
        return JsonResponse(
            {"id": drift_id, "deleted": services.contractdrift_delete(drift_id=drift_id) > 0}
        )
    drift = ContractDrift.objects.filter(pk=drift_id).first()
    if drift is None:
        return _not_found(f"no contract drift {drift_id}")
    if request.method == "GET":
        return JsonResponse(_drift_payload(drift))
    return _drift_write(request, drift_id=drift_id)


@allow_methods("GET")
def openapi_document(request: HttpRequest) -> HttpResponse:
    """The API's OpenAPI 3.1 document, with this server as its base URL."""
    from sandbox.openapi import sandbox_openapi

    return JsonResponse(sandbox_openapi(server_url=request.build_absolute_uri("./")))
