"""factory_boy factories for precise sandbox scenarios; dates are relative to the shop anchor."""

from datetime import timedelta
from decimal import Decimal

import factory

from sandbox.clock import SHOP_ANCHOR
from sandbox.models import (
    Article,
    Inventory,
    Order,
    OrderItem,
    Product,
    Promotion,
    ReturnRequest,
    ShopUser,
    Sku,
)


class ShopUserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ShopUser

    user_id = factory.Sequence(lambda n: f"U{90000000 + n:08d}")
    name = factory.Sequence(lambda n: f"Test Customer {n}")
    email = factory.Sequence(lambda n: f"customer{n}@example.com")
    tier = ShopUser.Tier.STANDARD
    created_at = SHOP_ANCHOR - timedelta(days=400)


class ProductFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Product

    product_id = factory.Sequence(lambda n: f"P{9000 + n:04d}")
    name = factory.Sequence(lambda n: f"Aurora Wireless Headphones {n}")
    brand = "Sonora"
    category = "Audio"
    description = "Over-ear wireless headphones."


class SkuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Sku

    sku = factory.Sequence(lambda n: f"AWH-{2000 + n:04d}-BLK")
    product = factory.SubFactory(ProductFactory)
    color = "Black"
    size = ""
    price = Decimal("100.00")
    currency = "USD"


class InventoryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Inventory

    sku = factory.SubFactory(SkuFactory)
    warehouse = "WH-EAST"
    quantity = 10
    restock_date = None


class PromotionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Promotion

    code = factory.Sequence(lambda n: f"TEST{n}")
    sku = factory.SubFactory(SkuFactory)
    product = None
    percent_off = 10
    starts_at = SHOP_ANCHOR - timedelta(days=5)
    ends_at = SHOP_ANCHOR + timedelta(days=5)


class OrderFactory(factory.django.DjangoModelFactory):
    """A delivered order, five days before the anchor: inside the return window."""

    class Meta:
        model = Order

    numeric_id = factory.Sequence(lambda n: 5000000 + n)
    order_id = factory.LazyAttribute(lambda o: f"#W{o.numeric_id:07d}")
    user = factory.SubFactory(ShopUserFactory)
    status = Order.Status.DELIVERED
    placed_at = SHOP_ANCHOR - timedelta(days=10)
    carrier = "UPS"
    tracking_number = "1Z999AA10123456784"
    estimated_delivery = (SHOP_ANCHOR - timedelta(days=5)).date()
    shipped_at = SHOP_ANCHOR - timedelta(days=9)
    delivered_at = SHOP_ANCHOR - timedelta(days=5)
    total = Decimal("200.00")
    currency = "USD"


class OrderItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = OrderItem

    order = factory.SubFactory(OrderFactory)
    sku = factory.SubFactory(SkuFactory)
    quantity = 2
    unit_price = Decimal("100.00")


class ReturnRequestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ReturnRequest

    return_id = factory.Sequence(lambda n: f"R{80000000 + n:08d}")
    order = factory.SubFactory(OrderFactory)
    status = ReturnRequest.Status.REQUESTED
    reason = "Wrong size"
    skus = factory.LazyFunction(list)
    created_at = SHOP_ANCHOR - timedelta(days=1)
    refund_amount = Decimal("100.00")


class ArticleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Article

    slug = factory.Sequence(lambda n: f"article-{n}")
    title = factory.Sequence(lambda n: f"Article {n}")
    category = Article.Category.FAQ
    body = "Some help text."
    updated_at = SHOP_ANCHOR - timedelta(days=3)
