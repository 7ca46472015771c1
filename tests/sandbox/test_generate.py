import re
from decimal import Decimal

import pytest
from django.db.models import Count, Sum

from sandbox.clock import SHOP_ANCHOR
from sandbox.generate import shop_generate
from sandbox.models import (
    Article,
    FaultRule,
    Inventory,
    Order,
    OrderItem,
    Product,
    Promotion,
    ReturnRequest,
    ShopUser,
    Sku,
)

SMALL = {"users": 20, "orders": 40, "products": 6}


def _snapshot() -> dict[str, list]:
    return {
        "users": list(ShopUser.objects.order_by("user_id").values_list("user_id", "name", "tier")),
        "skus": list(Sku.objects.order_by("sku").values_list("sku", "product__name", "price")),
        "orders": list(
            Order.objects.order_by("order_id").values_list(
                "order_id", "user__user_id", "status", "total", "tracking_number", "placed_at"
            )
        ),
        "items": list(
            OrderItem.objects.order_by("order__order_id", "sku__sku").values_list(
                "order__order_id", "sku__sku", "quantity"
            )
        ),
        "stock": list(
            Inventory.objects.order_by("sku__sku", "warehouse").values_list(
                "sku__sku", "warehouse", "quantity"
            )
        ),
        "promotions": list(Promotion.objects.order_by("code").values_list("code", "percent_off")),
        "returns": list(
            ReturnRequest.objects.order_by("return_id").values_list("return_id", "status")
        ),
    }


@pytest.mark.django_db
def test_same_seed_reproduces_identical_shop():
    # given a shop generated from seed 11
    first_counts = shop_generate(seed=11, **SMALL)
    first = _snapshot()

    # when the same seed generates again
    second_counts = shop_generate(seed=11, **SMALL)

    # then every id, status and price is the same
    assert second_counts == first_counts
    assert _snapshot() == first


@pytest.mark.django_db
def test_different_seed_gives_different_shop():
    shop_generate(seed=11, **SMALL)
    first = _snapshot()

    shop_generate(seed=12, **SMALL)

    second = _snapshot()
    assert second["users"] != first["users"]
    assert second["orders"] != first["orders"]
    assert second["skus"] != first["skus"]


@pytest.mark.django_db
def test_regenerating_replaces_shop_rows_but_keeps_fault_rules():
    FaultRule.objects.create(endpoint=FaultRule.Endpoint.ORDERS, rate_500=0.5)
    shop_generate(seed=1, **SMALL)

    counts = shop_generate(seed=2, users=5, orders=8, products=3)

    assert ShopUser.objects.count() == counts["users"] == 5
    assert Order.objects.count() == counts["orders"] == 8
    assert Product.objects.count() == 3
    assert Article.objects.count() == counts["articles"]
    assert FaultRule.objects.filter(endpoint="orders").exists()


@pytest.mark.django_db
def test_full_default_size_has_requested_counts_and_realistic_mix():
    # when the default-sized shop is generated
    counts = shop_generate()

    # then the requested sizes are there
    assert counts["users"] == ShopUser.objects.count() == 500
    assert counts["orders"] == Order.objects.count() == 1000
    assert counts["products"] == Product.objects.count() == 50
    assert counts["articles"] == Article.objects.count() >= 25
    assert counts["order_items"] == OrderItem.objects.count() > 1000
    # and most orders are delivered or shipped, with every other status present
    by_status = dict(Order.objects.values_list("status").annotate(n=Count("id")))
    assert by_status["delivered"] + by_status["shipped"] > 700
    for status in ("pending", "processing", "cancelled", "returned"):
        assert by_status.get(status, 0) > 0, status
    # and products have several SKUs, some out of stock everywhere
    assert min(Product.objects.annotate(n=Count("skus")).values_list("n", flat=True)) >= 2
    out_of_stock = Sku.objects.annotate(stock=Sum("inventory__quantity")).filter(stock=0).count()
    assert 0 < out_of_stock < Sku.objects.count() / 3
    # and a few promotions are active at the anchor, and some orders have returns
    active = Promotion.objects.filter(starts_at__lte=SHOP_ANCHOR, ends_at__gt=SHOP_ANCHOR)
    assert 2 <= active.count() <= 12
    assert ReturnRequest.objects.filter(order__status="returned").count() == by_status["returned"]
    assert ReturnRequest.objects.filter(order__status="delivered").exists()


@pytest.mark.django_db
def test_generated_ids_follow_their_formats(shop):
    user_ids = ShopUser.objects.values_list("user_id", flat=True)
    product_ids = Product.objects.values_list("product_id", flat=True)
    return_ids = ReturnRequest.objects.values_list("return_id", flat=True)

    assert all(re.fullmatch(r"U\d{8}", value) for value in user_ids)
    assert all(re.fullmatch(r"P\d{4}", value) for value in product_ids)
    assert all(re.fullmatch(r"R\d{8}", value) for value in return_ids)
    assert all(
        re.fullmatch(r"#W\d{7}", order_id) and int(order_id[2:]) == numeric_id
        for order_id, numeric_id in Order.objects.values_list("order_id", "numeric_id")
    )


@pytest.mark.django_db
def test_sku_codes_are_opaque_codes_not_product_names(shop):
    for sku in Sku.objects.select_related("product"):
        # The pattern the agents' tool schema enforces for SKU arguments.
        assert re.fullmatch(r"[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}", sku.sku), sku.sku
        assert sku.product.name.lower() not in sku.sku.lower()
        assert sku.currency == "USD"


@pytest.mark.django_db
def test_generated_orders_are_internally_consistent(shop):
    for order in Order.objects.prefetch_related("items"):
        assert order.total == sum(
            (item.unit_price * item.quantity for item in order.items.all()), Decimal("0")
        )
        assert order.placed_at <= SHOP_ANCHOR
        assert order.user.created_at < order.placed_at
        shipped = order.status in ("shipped", "delivered", "returned")
        assert bool(order.tracking_number) is shipped
        assert (order.delivered_at is not None) is (order.status in ("delivered", "returned"))
        if order.delivered_at is not None:
            assert order.shipped_at < order.delivered_at <= SHOP_ANCHOR


@pytest.mark.parametrize(
    "kwargs",
    [{"users": 0}, {"products": 0}, {"orders": -1}, {"products": 100_000}],
)
@pytest.mark.django_db
def test_invalid_sizes_are_rejected(kwargs):
    with pytest.raises(ValueError):
        shop_generate(**{**SMALL, **kwargs})
