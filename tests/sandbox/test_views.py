import json
from datetime import timedelta
from decimal import Decimal

import pytest

from sandbox.clock import SHOP_ANCHOR
from sandbox.models import Article, Order, ReturnRequest
from tests.sandbox.conftest import API
from tests.sandbox.factories import (
    ArticleFactory,
    InventoryFactory,
    OrderFactory,
    OrderItemFactory,
    ProductFactory,
    PromotionFactory,
    ReturnRequestFactory,
    ShopUserFactory,
    SkuFactory,
)

pytestmark = pytest.mark.django_db


def _post_return(client, body):
    return client.post(f"{API}/returns", data=json.dumps(body), content_type="application/json")


# --- users -------------------------------------------------------------------------------------


def test_user_detail(client):
    user = ShopUserFactory(user_id="U00001234", name="Ada Lovelace", tier="gold")

    response = client.get(f"{API}/users/U00001234")

    assert response.status_code == 200
    assert response.json() == {
        "user_id": "U00001234",
        "name": "Ada Lovelace",
        "email": user.email,
        "tier": "gold",
        "created_at": user.created_at.isoformat(),
    }


def test_unknown_user_is_404(client):
    response = client.get(f"{API}/users/U99999999")

    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "user U99999999 not found"}


def test_user_orders_newest_first_and_limited(client):
    user = ShopUserFactory()
    _old, new, newest = (
        OrderFactory(user=user, placed_at=SHOP_ANCHOR - timedelta(days=days)) for days in (30, 5, 1)
    )

    response = client.get(f"{API}/users/{user.user_id}/orders?limit=2")

    assert response.status_code == 200
    body = response.json()
    assert body["user_id"] == user.user_id
    assert [o["order_id"] for o in body["orders"]] == [newest.order_id, new.order_id]
    assert body["orders"][0] == {
        "order_id": newest.order_id,
        "status": "delivered",
        "placed_at": newest.placed_at.isoformat(),
        "total": 200.0,
        "currency": "USD",
    }


def test_user_orders_default_limit_is_five(client):
    user = ShopUserFactory()
    OrderFactory.create_batch(7, user=user)

    response = client.get(f"{API}/users/{user.user_id}/orders")

    assert len(response.json()["orders"]) == 5


@pytest.mark.parametrize("limit", ["five", "2.5", "1e3"])
def test_user_orders_non_integer_limit_is_type_mismatch(client, limit):
    user = ShopUserFactory()

    response = client.get(f"{API}/users/{user.user_id}/orders", {"limit": limit})

    assert response.status_code == 400
    assert response.json() == {
        "error": "type_mismatch",
        "field": "limit",
        "expected_type": "integer",
        "detail": "limit must be an integer",
    }


@pytest.mark.parametrize("limit", ["0", "21", "-3"])
def test_user_orders_out_of_range_limit_is_invalid(client, limit):
    user = ShopUserFactory()

    response = client.get(f"{API}/users/{user.user_id}/orders", {"limit": limit})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_parameter"
    assert response.json()["field"] == "limit"


def test_user_orders_of_unknown_user_is_404(client):
    response = client.get(f"{API}/users/U00000000/orders")

    assert response.status_code == 404


# --- orders ------------------------------------------------------------------------------------


def test_order_detail_with_url_encoded_id(client):
    item = OrderItemFactory(order__numeric_id=1234567, sku__sku="AWH-2041-BLK", quantity=2)
    order = item.order

    response = client.get(f"{API}/orders/%23W1234567")

    assert response.status_code == 200
    assert response.json() == {
        "order_id": "#W1234567",
        "user_id": order.user.user_id,
        "status": "delivered",
        "placed_at": order.placed_at.isoformat(),
        "items": [
            {
                "sku": "AWH-2041-BLK",
                "product_name": item.sku.product.name,
                "quantity": 2,
                "unit_price": 100.0,
            }
        ],
        "total": 200.0,
        "currency": "USD",
        "shipping": {
            "carrier": "UPS",
            "tracking_number": "1Z999AA10123456784",
            "estimated_delivery": order.estimated_delivery.isoformat(),
            "shipped_at": order.shipped_at.isoformat(),
            "delivered_at": order.delivered_at.isoformat(),
        },
    }


def test_pending_order_has_empty_shipping(client):
    OrderFactory(
        numeric_id=7654321,
        status=Order.Status.PENDING,
        carrier="",
        tracking_number="",
        shipped_at=None,
        delivered_at=None,
    )

    response = client.get(f"{API}/orders/%23W7654321")

    shipping = response.json()["shipping"]
    assert shipping["carrier"] is None
    assert shipping["tracking_number"] is None
    assert shipping["delivered_at"] is None


@pytest.mark.parametrize("bad_id", ["1234567", "W1234567", "%23W123", "%23X1234567", "order"])
def test_malformed_order_id_is_invalid_parameter(client, bad_id):
    response = client.get(f"{API}/orders/{bad_id}")

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_parameter"
    assert response.json()["field"] == "order_id"


def test_unknown_order_is_404(client):
    response = client.get(f"{API}/orders/%23W0000001")

    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "order #W0000001 not found"}


# --- products and skus ---------------------------------------------------------------------


def test_product_search_requires_every_word(client):
    headphones = ProductFactory(name="Aurora Wireless Headphones", brand="Sonora", category="Audio")
    SkuFactory(product=headphones, sku="AWH-2041-BLK", color="Black")
    ProductFactory(name="Aurora Camping Tent", brand="Basecamp", category="Outdoor")

    response = client.get(f"{API}/products", {"q": "aurora HEADPHONES"})

    assert response.status_code == 200
    assert response.json() == {
        "results": [
            {
                "product_id": headphones.product_id,
                "name": "Aurora Wireless Headphones",
                "brand": "Sonora",
                "category": "Audio",
                "skus": [{"sku": "AWH-2041-BLK", "color": "Black", "size": None}],
            }
        ]
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("aurora", 2),
        ("basecamp", 1),
        ("outdoor tents", 1),
        ("sonora tent", 0),
    ],
)
def test_product_search_matches_name_brand_category(client, query, expected):
    ProductFactory(name="Aurora Wireless Headphones", brand="Sonora", category="Audio")
    ProductFactory(name="Aurora Camping Tent", brand="Basecamp", category="Outdoor")

    response = client.get(f"{API}/products", {"q": query})

    assert len(response.json()["results"]) == expected


def test_product_search_honours_limit(client):
    ProductFactory.create_batch(4, brand="Sonora")

    response = client.get(f"{API}/products", {"q": "sonora", "limit": "3"})

    assert len(response.json()["results"]) == 3


@pytest.mark.parametrize("params", [{}, {"q": "  "}])
def test_product_search_without_q_is_missing_field(client, params):
    response = client.get(f"{API}/products", params)

    assert response.status_code == 400
    assert response.json()["error"] == "missing_required_field"
    assert response.json()["field"] == "q"


def test_product_detail_includes_prices(client):
    product = ProductFactory(product_id="P0042")
    SkuFactory(product=product, sku="AWH-2041-WHT", color="White", price=Decimal("149.99"))

    response = client.get(f"{API}/products/P0042")

    assert response.status_code == 200
    body = response.json()
    assert body["product_id"] == "P0042"
    assert body["description"] == product.description
    assert body["skus"] == [
        {"sku": "AWH-2041-WHT", "color": "White", "size": None, "price": 149.99, "currency": "USD"}
    ]


def test_unknown_product_is_404(client):
    assert client.get(f"{API}/products/P9999").status_code == 404


def test_sku_detail_applies_best_active_promotion(client):
    sku = SkuFactory(sku="AWH-2041-BLK", price=Decimal("200.00"))
    PromotionFactory(code="SAVE10", sku=sku, percent_off=10)
    best = PromotionFactory(code="AUDIO25", sku=None, product=sku.product, percent_off=25)
    PromotionFactory(
        code="OLD50",
        sku=sku,
        percent_off=50,
        starts_at=SHOP_ANCHOR - timedelta(days=30),
        ends_at=SHOP_ANCHOR - timedelta(days=1),
    )

    response = client.get(f"{API}/skus/AWH-2041-BLK")

    assert response.status_code == 200
    assert response.json() == {
        "sku": "AWH-2041-BLK",
        "product_id": sku.product.product_id,
        "product_name": sku.product.name,
        "color": "Black",
        "size": None,
        "price": 200.0,
        "currency": "USD",
        "promotions": [
            {"code": "AUDIO25", "percent_off": 25, "ends_at": best.ends_at.isoformat()},
            {"code": "SAVE10", "percent_off": 10, "ends_at": best.ends_at.isoformat()},
        ],
        "final_price": 150.0,
    }


def test_sku_without_promotion_keeps_price(client):
    SkuFactory(sku="AWH-2041-RED", price=Decimal("59.99"))

    body = client.get(f"{API}/skus/AWH-2041-RED").json()

    assert body["promotions"] == []
    assert body["final_price"] == 59.99


def test_product_name_passed_as_sku_is_404(client):
    SkuFactory(product__name="Aurora Wireless Headphones")

    response = client.get(f"{API}/skus/Aurora%20Wireless%20Headphones")

    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "detail": "sku 'Aurora Wireless Headphones' not found",
    }


# --- inventory and promotions ------------------------------------------------------------------


def test_inventory_sums_warehouses(client):
    sku = SkuFactory(sku="AWH-2041-BLK")
    InventoryFactory(sku=sku, warehouse="WH-EAST", quantity=3)
    InventoryFactory(sku=sku, warehouse="WH-WEST", quantity=4)

    response = client.get(f"{API}/inventory/AWH-2041-BLK")

    assert response.status_code == 200
    assert response.json() == {
        "sku": "AWH-2041-BLK",
        "available": 7,
        "in_stock": True,
        "warehouses": [{"code": "WH-EAST", "quantity": 3}, {"code": "WH-WEST", "quantity": 4}],
        "restock_date": None,
    }


def test_out_of_stock_inventory_reports_earliest_restock(client):
    sku = SkuFactory(sku="AWH-2041-NVY")
    later, sooner = SHOP_ANCHOR.date() + timedelta(days=20), SHOP_ANCHOR.date() + timedelta(days=6)
    InventoryFactory(sku=sku, warehouse="WH-EAST", quantity=0, restock_date=later)
    InventoryFactory(sku=sku, warehouse="WH-WEST", quantity=0, restock_date=sooner)

    body = client.get(f"{API}/inventory/AWH-2041-NVY").json()

    assert body["available"] == 0
    assert body["in_stock"] is False
    assert body["restock_date"] == sooner.isoformat()


def test_inventory_of_unknown_sku_is_404(client):
    response = client.get(f"{API}/inventory/NOPE-0000-BLK")

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_promotions_by_sku_lists_active_first(client):
    sku = SkuFactory()
    PromotionFactory(
        code="EXPIRED",
        sku=sku,
        starts_at=SHOP_ANCHOR - timedelta(days=20),
        ends_at=SHOP_ANCHOR - timedelta(days=10),
    )
    PromotionFactory(code="LIVE", sku=None, product=sku.product)
    PromotionFactory(code="ELSEWHERE")

    response = client.get(f"{API}/promotions", {"sku": sku.sku})

    results = response.json()["results"]
    assert [(p["code"], p["active"]) for p in results] == [("LIVE", True), ("EXPIRED", False)]
    assert results[0]["product_id"] == sku.product.product_id
    assert results[0]["sku"] is None


def test_promotions_by_product_include_sku_promotions(client):
    sku = SkuFactory()
    PromotionFactory(code="SKUDEAL", sku=sku)

    response = client.get(f"{API}/promotions", {"product_id": sku.product.product_id})

    assert [p["code"] for p in response.json()["results"]] == ["SKUDEAL"]


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({}, 400, "missing_required_field"),
        ({"sku": "NOPE-0000-BLK"}, 404, "not_found"),
        ({"product_id": "P9999"}, 404, "not_found"),
    ],
)
def test_promotions_errors(client, params, status, error):
    response = client.get(f"{API}/promotions", params)

    assert response.status_code == status
    assert response.json()["error"] == error


# --- returns -----------------------------------------------------------------------------------


def test_return_status_of_recent_delivery_is_eligible(client):
    order = OrderFactory(numeric_id=1111111)

    response = client.get(f"{API}/returns/%23W1111111")

    assert response.status_code == 200
    assert response.json() == {
        "order_id": "#W1111111",
        "eligible": True,
        "reason": "delivered within the last 30 days",
        "deadline": (order.delivered_at + timedelta(days=30)).date().isoformat(),
        "returns": [],
    }


@pytest.mark.parametrize(
    ("overrides", "reason_part"),
    [
        ({"delivered_at": SHOP_ANCHOR - timedelta(days=31)}, "return window closed"),
        ({"status": Order.Status.SHIPPED, "delivered_at": None}, "this order is shipped"),
        ({"status": Order.Status.CANCELLED, "delivered_at": None}, "this order is cancelled"),
        ({"status": Order.Status.RETURNED}, "already been returned"),
    ],
)
def test_return_status_ineligible_orders(client, overrides, reason_part):
    order = OrderFactory(**overrides)

    body = client.get(f"{API}/returns/{order.order_id.replace('#', '%23')}").json()

    assert body["eligible"] is False
    assert reason_part in body["reason"]


def test_return_status_lists_existing_returns(client):
    existing = ReturnRequestFactory(status=ReturnRequest.Status.APPROVED, skus=["AWH-2041-BLK"])

    body = client.get(f"{API}/returns/{existing.order.order_id.replace('#', '%23')}").json()

    assert body["eligible"] is False
    assert existing.return_id in body["reason"]
    assert body["returns"] == [
        {
            "return_id": existing.return_id,
            "status": "approved",
            "reason": "Wrong size",
            "skus": ["AWH-2041-BLK"],
            "created_at": existing.created_at.isoformat(),
            "refund_amount": 100.0,
        }
    ]


def test_rejected_return_does_not_block_a_new_one(client):
    rejected = ReturnRequestFactory(status=ReturnRequest.Status.REJECTED, refund_amount=None)

    body = client.get(f"{API}/returns/{rejected.order.order_id.replace('#', '%23')}").json()

    assert body["eligible"] is True


def test_create_return_for_whole_order(client):
    item = OrderItemFactory(order__numeric_id=2222222, sku__sku="AWH-2041-BLK", quantity=2)

    response = _post_return(client, {"order_id": "#W2222222", "reason": "Wrong size"})

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "requested"
    assert body["order_id"] == "#W2222222"
    assert body["skus"] == ["AWH-2041-BLK"]
    assert body["refund_amount"] == 200.0
    created = ReturnRequest.objects.get(return_id=body["return_id"])
    assert created.order == item.order
    assert created.reason == "Wrong size"


def test_create_return_for_some_skus(client):
    order = OrderFactory()
    OrderItemFactory(order=order, sku__sku="AAA-1000-BLK", quantity=1, unit_price=Decimal("30"))
    OrderItemFactory(order=order, sku__sku="BBB-2000-WHT", quantity=1, unit_price=Decimal("70"))

    response = _post_return(
        client, {"order_id": order.order_id, "reason": "Defective", "skus": ["BBB-2000-WHT"]}
    )

    assert response.status_code == 201
    assert response.json()["refund_amount"] == 70.0
    assert response.json()["skus"] == ["BBB-2000-WHT"]


def test_second_return_for_same_order_is_refused(client):
    item = OrderItemFactory()
    first = _post_return(client, {"order_id": item.order.order_id, "reason": "Wrong size"})

    second = _post_return(client, {"order_id": item.order.order_id, "reason": "Wrong size"})

    assert first.status_code == 201
    assert second.status_code == 409
    assert second.json()["error"] == "not_eligible"
    assert first.json()["return_id"] in second.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"reason": "Wrong size"}, "order_id"),
        ({"order_id": "#W5000000"}, "reason"),
        ({"order_id": None, "reason": "x"}, "order_id"),
    ],
)
def test_create_return_missing_field(client, body, field):
    response = _post_return(client, body)

    assert response.status_code == 400
    assert response.json()["error"] == "missing_required_field"
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    ("body", "field", "expected_type"),
    [
        ({"order_id": "#W5000000", "reason": 12}, "reason", "string"),
        (
            {"order_id": "#W5000000", "reason": "x", "skus": "AWH-2041-BLK"},
            "skus",
            "array",
        ),
        ({"order_id": "#W5000000", "reason": "x", "skus": [1, 2]}, "skus", "array"),
    ],
)
def test_create_return_wrong_types(client, body, field, expected_type):
    response = _post_return(client, body)

    assert response.status_code == 400
    assert response.json()["error"] == "type_mismatch"
    assert response.json()["field"] == field
    assert response.json()["expected_type"] == expected_type


@pytest.mark.parametrize("order_id", [1234567, "W1234567"])
def test_create_return_with_malformed_order_id(client, order_id):
    response = _post_return(client, {"order_id": order_id, "reason": "Wrong size"})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_parameter"
    assert response.json()["field"] == "order_id"


def test_create_return_for_unknown_order_is_404(client):
    response = _post_return(client, {"order_id": "#W0000002", "reason": "Wrong size"})

    assert response.status_code == 404


def test_create_return_for_sku_not_on_order(client):
    item = OrderItemFactory()

    response = _post_return(
        client, {"order_id": item.order.order_id, "reason": "x", "skus": ["ZZZ-9999-BLK"]}
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_parameter"
    assert response.json()["field"] == "skus"
    assert not ReturnRequest.objects.exists()


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]"])
def test_create_return_rejects_non_object_bodies(client, raw):
    response = client.post(f"{API}/returns", data=raw, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] in ("invalid_json", "type_mismatch")


def test_create_return_works_without_csrf_token(client):
    csrf_client = client.__class__(enforce_csrf_checks=True)
    item = OrderItemFactory()

    response = _post_return(csrf_client, {"order_id": item.order.order_id, "reason": "x"})

    assert response.status_code == 201


# --- articles ----------------------------------------------------------------------------------


def test_article_search_ranks_by_word_overlap(client):
    ArticleFactory(slug="return-policy", title="Return policy", body="Return within 30 days.")
    ArticleFactory(slug="refund-timing", title="Refunds", body="Refunds after the return arrives.")
    ArticleFactory(slug="gift-cards", title="Gift cards", body="Gift cards never expire.")

    response = client.get(f"{API}/articles", {"q": "how do I return an item?"})

    assert response.status_code == 200
    results = response.json()["results"]
    assert [a["slug"] for a in results] == ["return-policy", "refund-timing"]
    assert results[0] == {
        "slug": "return-policy",
        "title": "Return policy",
        "category": "faq",
        "summary": "Return within 30 days.",
    }


def test_article_summary_is_truncated(client):
    ArticleFactory(title="Warranty", body="warranty " * 100)

    summary = client.get(f"{API}/articles", {"q": "warranty"}).json()["results"][0]["summary"]

    assert len(summary) <= 201
    assert summary.endswith("…")


def test_article_search_requires_q(client):
    response = client.get(f"{API}/articles")

    assert response.status_code == 400
    assert response.json()["field"] == "q"


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("return window", "return-policy"),
        ("how long does shipping take", "shipping-times"),
        ("price match", "price-match"),
        ("warranty", "warranty"),
        ("cancel my order", "cancel-order"),
        ("item arrived damaged", "damaged-items"),
        ("gift card", "gift-cards"),
        ("international shipping", "international-shipping"),
        ("payment methods", "payment-methods"),
    ],
)
def test_generated_articles_answer_common_questions(client, shop, query, expected_first):
    results = client.get(f"{API}/articles", {"q": query}).json()["results"]

    assert results[0]["slug"] == expected_first


def test_article_detail(client):
    article = ArticleFactory(slug="warranty", category=Article.Category.POLICY)

    response = client.get(f"{API}/articles/warranty")

    assert response.json() == {
        "slug": "warranty",
        "title": article.title,
        "category": "policy",
        "body": article.body,
        "updated_at": article.updated_at.isoformat(),
    }


def test_unknown_article_is_404(client):
    assert client.get(f"{API}/articles/no-such-thing").status_code == 404


# --- generic -----------------------------------------------------------------------------------


def test_unknown_path_is_json_404(client):
    response = client.get(f"{API}/nothing/here")

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_wrong_method_is_json_405(client):
    response = client.delete(f"{API}/products?q=x")

    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
    assert response["Allow"] == "GET"


def test_every_generated_order_is_served(client, shop):
    # Smoke check over generated data: every order, its user and its skus resolve.
    for order in Order.objects.select_related("user").prefetch_related("items__sku"):
        encoded = order.order_id.replace("#", "%23")
        assert client.get(f"{API}/orders/{encoded}").status_code == 200
        assert client.get(f"{API}/returns/{encoded}").status_code == 200
        assert client.get(f"{API}/users/{order.user.user_id}/orders").status_code == 200
        for item in order.items.all():
            assert client.get(f"{API}/skus/{item.sku.sku}").status_code == 200
            assert client.get(f"{API}/inventory/{item.sku.sku}").status_code == 200


# --- input the database cannot take ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "users/%00",
        "users/U0000%001/orders",
        "products/%00",
        "products?q=%00",
        "skus/%00",
        "inventory/%00",
        "promotions?sku=%00",
        "promotions?product_id=%00",
        "articles/%00",
        "articles?q=a&%00=1",
    ],
)
def test_a_nul_character_in_path_or_query_is_a_400(client, path):
    response = client.get(f"{API}/{path}")

    assert response.status_code == 400
    assert response.json() == {
        "error": "invalid_parameter",
        "detail": "NUL characters are not allowed",
    }


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param('"reason": "broken\\u0000"', id="nul-reason"),
        pytest.param('"reason": "\\ud800"', id="lone-surrogate-reason"),
        pytest.param('"reason": "x", "skus": ["\\u0000"]', id="nul-sku"),
        pytest.param('"reason": "x", "skus": [' * 50_000, id="deep-nesting"),
        pytest.param('"reason": "x", "skus": NaN', id="nan"),
    ],
)
def test_create_return_refuses_bodies_it_cannot_store(client, fields):
    item = OrderItemFactory()

    response = client.post(
        f"{API}/returns",
        data=f'{{"order_id": "{item.order.order_id}", {fields}}}',
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["error"] in ("invalid_json", "invalid_parameter")
    assert not ReturnRequest.objects.exists()


@pytest.mark.parametrize(("length", "status"), [(500, 201), (501, 400), (100_000, 400)])
def test_create_return_reason_longer_than_the_column_is_a_400(client, length, status):
    # PostgreSQL refuses a value longer than the column: that was a 500 before.
    item = OrderItemFactory()

    response = _post_return(client, {"order_id": item.order.order_id, "reason": "r" * length})

    assert response.status_code == status
    if status == 400:
        assert response.json()["error"] == "invalid_parameter"
        assert response.json()["field"] == "reason"
        assert "500" in response.json()["detail"]
        assert not ReturnRequest.objects.exists()
