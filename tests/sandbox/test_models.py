import pytest
from django.core.exceptions import ValidationError

from sandbox.models import FaultRule
from tests.sandbox.factories import (
    ArticleFactory,
    InventoryFactory,
    OrderItemFactory,
    PromotionFactory,
    ReturnRequestFactory,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "rates",
    [
        {"rate_404": 1.0},
        {"rate_500": 0.5, "rate_slow": 0.5},
        {"rate_404": 0.1, "rate_500": 0.2, "rate_401": 0.7},
        {name: 1 / 6 for name in FaultRule.RATE_FIELDS},
    ],
)
def test_faultrule_accepts_rates_summing_to_at_most_one(rates):
    FaultRule(endpoint="orders", **rates).full_clean()


@pytest.mark.parametrize(
    "rates",
    [
        {"rate_404": 0.5, "rate_500": 0.51},
        {name: 0.2 for name in FaultRule.RATE_FIELDS},
    ],
)
def test_faultrule_rejects_rates_summing_above_one(rates):
    with pytest.raises(ValidationError, match=r"rates must sum to at most 1\.0"):
        FaultRule(endpoint="orders", **rates).full_clean()


def test_faultrule_defaults():
    rule = FaultRule(endpoint="orders")

    assert (rule.timeout_seconds, rule.slow_ms, rule.drift) == (10.0, 1500, "none")
    assert (rule.drift_from, rule.drift_to) == ("status", "shipping_status")
    assert rule.seed is None


def test_promotion_must_target_exactly_one_of_sku_or_product():
    promotion = PromotionFactory.build(sku=None, product=None)

    with pytest.raises(ValidationError):
        promotion.clean()


def test_str_of_every_model_is_readable():
    item = OrderItemFactory(sku__sku="AWH-2041-BLK", order__numeric_id=1234567)
    returned = ReturnRequestFactory(order=item.order, return_id="R00012345")
    stock = InventoryFactory(sku=item.sku, warehouse="WH-WEST", quantity=4)
    promotion = PromotionFactory(code="SAVE10", sku=item.sku)
    article = ArticleFactory(title="Return policy")

    assert str(item) == f"2 x {item.sku_id}"
    assert str(item.order) == "#W1234567 (delivered)"
    assert str(item.sku) == "AWH-2041-BLK"
    assert str(item.order.user).startswith(item.order.user.user_id)
    assert str(item.sku.product).startswith(item.sku.product.product_id)
    assert str(returned) == f"R00012345 for {item.order_id} (requested)"
    assert "WH-WEST" in str(stock)
    assert str(promotion) == "SAVE10 (10% off)"
    assert str(article) == "Return policy"
    assert str(FaultRule(endpoint="skus", enabled=False)) == "faults on skus (disabled)"
