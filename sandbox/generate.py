"""Deterministic generator of the sandbox shop.

Everything comes from one ``random.Random(seed)`` and the fixed anchor of ``sandbox.clock``,
never from the wall clock or hash-ordered sets, so a seed always yields the same ids,
statuses and prices.
"""

import random
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction

from sandbox.articles import ARTICLES
from sandbox.clock import RETURN_WINDOW_DAYS, SHOP_ANCHOR
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

BATCH_SIZE = 1000

FIRST_NAMES = (
    "Olivia",
    "Liam",
    "Emma",
    "Noah",
    "Ava",
    "Elijah",
    "Sophia",
    "James",
    "Isabella",
    "Lucas",
    "Mia",
    "Mateo",
    "Amelia",
    "Ethan",
    "Harper",
    "Aiden",
    "Evelyn",
    "Mason",
    "Abigail",
    "Logan",
    "Emily",
    "Jackson",
    "Ella",
    "Sebastian",
    "Chloe",
    "Daniel",
    "Priya",
    "Wei",
    "Fatima",
    "Omar",
    "Yuki",
    "Diego",
    "Sofia",
    "Arjun",
    "Mei",
    "Kofi",
    "Ingrid",
    "Luca",
    "Nadia",
    "Hiro",
)
LAST_NAMES = (
    "Smith",
    "Johnson",
    "Williams",
    "Brown",
    "Jones",
    "Garcia",
    "Miller",
    "Davis",
    "Rodriguez",
    "Martinez",
    "Hernandez",
    "Lopez",
    "Gonzalez",
    "Wilson",
    "Anderson",
    "Thomas",
    "Taylor",
    "Moore",
    "Jackson",
    "Martin",
    "Lee",
    "Perez",
    "Thompson",
    "White",
    "Harris",
    "Clark",
    "Nguyen",
    "Patel",
    "Kim",
    "Chen",
    "Okafor",
    "Novak",
    "Rossi",
    "Tanaka",
    "Silva",
    "Cohen",
)
NAME_WORDS = (
    "Aurora",
    "Nimbus",
    "Summit",
    "Vertex",
    "Cascade",
    "Ember",
    "Harbor",
    "Lumen",
    "Orbit",
    "Pioneer",
    "Quartz",
    "Sierra",
    "Tundra",
    "Zephyr",
    "Atlas",
    "Beacon",
    "Cobalt",
    "Drift",
    "Echo",
    "Falcon",
    "Glacier",
    "Horizon",
    "Juniper",
    "Kestrel",
    "Meridian",
    "Nova",
    "Onyx",
    "Prism",
    "Ridge",
    "Solstice",
    "Terra",
    "Vista",
    "Willow",
    "Canyon",
    "Polar",
    "Sequoia",
)

# category -> (brands, items, colours, sizes, price range in whole dollars)
CATALOGUE: dict[
    str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[int, int]]
] = {
    "Audio": (
        ("Sonora", "Acoustix", "Bellwave"),
        (
            "Wireless Headphones",
            "Bluetooth Speaker",
            "Noise-Cancelling Earbuds",
            "Studio Headphones",
            "Soundbar",
            "Portable Speaker",
        ),
        ("Black", "White", "Silver", "Navy", "Rose"),
        (),
        (39, 349),
    ),
    "Electronics": (
        ("Voltiq", "Northbyte", "Kinetix"),
        (
            "Smart Watch",
            "Fitness Tracker",
            "Action Camera",
            "E-Reader",
            "Power Bank",
            "Wireless Charger",
            "Tablet Stand",
        ),
        ("Black", "Silver", "Graphite", "White", "Blue"),
        (),
        (19, 399),
    ),
    "Home & Kitchen": (
        ("Hearthly", "Casa Nord", "Kiln & Co"),
        (
            "Ceramic Mug Set",
            "Throw Blanket",
            "Desk Lamp",
            "Coffee Grinder",
            "Chef Knife",
            "Air Purifier",
            "Cast Iron Skillet",
        ),
        ("White", "Sage", "Charcoal", "Terracotta", "Oat"),
        (),
        (15, 249),
    ),
    "Apparel": (
        ("Trailform", "Northline", "Urbanweave"),
        (
            "Rain Jacket",
            "Wool Sweater",
            "Fleece Hoodie",
            "Cotton T-Shirt",
            "Chino Pants",
            "Puffer Vest",
        ),
        ("Black", "Navy", "Olive", "Grey", "Red"),
        ("XS", "S", "M", "L", "XL"),
        (19, 189),
    ),
    "Footwear": (
        ("Stridewell", "Peakstep", "Trailform"),
        ("Running Shoes", "Hiking Boots", "Trail Sneakers", "Slip-On Loafers"),
        ("Black", "Grey", "Blue", "Tan", "White"),
        ("7", "8", "9", "10", "11", "12"),
        (49, 219),
    ),
    "Outdoor": (
        ("Basecamp", "Alpenglow", "Ridgeline"),
        (
            "Camping Tent",
            "Sleeping Bag",
            "Trekking Poles",
            "Insulated Water Bottle",
            "Daypack",
            "Camp Stove",
        ),
        ("Green", "Orange", "Grey", "Blue", "Black"),
        (),
        (24, 429),
    ),
}

COLOR_CODES = {
    "Black": "BLK",
    "White": "WHT",
    "Silver": "SLV",
    "Navy": "NVY",
    "Rose": "RSE",
    "Graphite": "GPH",
    "Blue": "BLU",
    "Sage": "SGE",
    "Charcoal": "CHR",
    "Terracotta": "TRC",
    "Oat": "OAT",
    "Olive": "OLV",
    "Grey": "GRY",
    "Red": "RED",
    "Tan": "TAN",
    "Green": "GRN",
    "Orange": "ORG",
}
# Sized variants put colour and size in one 2-4 character code (NVM, BK10) so every SKU
# has three parts and fits the tool schema ^[A-Z]{2,4}-\d{4}-[A-Z0-9]{2,4}$.
SIZED_COLOR_CODES = {
    "Black": "BK",
    "White": "WH",
    "Silver": "SV",
    "Navy": "NV",
    "Rose": "RS",
    "Graphite": "GP",
    "Blue": "BL",
    "Sage": "SG",
    "Charcoal": "CH",
    "Terracotta": "TC",
    "Oat": "OT",
    "Olive": "OL",
    "Grey": "GY",
    "Red": "RD",
    "Tan": "TN",
    "Green": "GN",
    "Orange": "OR",
}
WAREHOUSES = ("WH-EAST", "WH-WEST", "WH-CENTRAL")
CARRIERS = ("UPS", "FedEx", "USPS", "DHL")
RETURN_REASONS = (
    "Item arrived damaged",
    "Wrong size",
    "Changed my mind",
    "Not as described",
    "Defective, stopped working",
    "Arrived too late",
    "Received the wrong item",
    "Better price elsewhere",
)
PROMO_WORDS = ("SAVE", "FALL", "HOLIDAY", "FLASH", "WELCOME", "VIP", "WEEKEND", "CLEAR")


def shop_generate(
    *, seed: int = 42, users: int = 500, orders: int = 1000, products: int = 50
) -> dict[str, int]:
    """Replace all shop data (not fault rules) by a world generated from ``seed``.

    Returns the number of rows created per kind.
    """
    if users < 1 or products < 1 or orders < 0:
        raise ValueError("need users >= 1, products >= 1 and orders >= 0")
    max_products = len(NAME_WORDS) * sum(len(spec[1]) for spec in CATALOGUE.values())
    if products > max_products:
        raise ValueError(f"at most {max_products} products can be generated")
    rng = random.Random(seed)
    with transaction.atomic():
        _shop_delete()
        product_rows = _products_create(rng, count=products)
        sku_rows = _skus_create(rng, products=product_rows)
        inventory_count = _inventory_create(rng, skus=sku_rows)
        promotion_count = _promotions_create(rng, products=product_rows, skus=sku_rows)
        user_rows = _users_create(rng, count=users)
        order_rows, item_count = _orders_create(rng, count=orders, users=user_rows, skus=sku_rows)
        return_count = _returns_create(rng, orders=order_rows)
        article_count = _articles_create()
    return {
        "users": len(user_rows),
        "products": len(product_rows),
        "skus": len(sku_rows),
        "inventory": inventory_count,
        "promotions": promotion_count,
        "orders": len(order_rows),
        "order_items": item_count,
        "returns": return_count,
        "articles": article_count,
    }


def _shop_delete() -> None:
    # Leaves first, so each delete has nothing left to cascade into.
    for model in (ReturnRequest, OrderItem, Order, Promotion, Inventory, Sku, Product, ShopUser):
        model.objects.all().delete()
    Article.objects.all().delete()


def _whole_seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def _products_create(rng: random.Random, *, count: int) -> list[Product]:
    categories = sorted(CATALOGUE)
    names: set[str] = set()
    model_numbers = rng.sample(range(1000, 10000), count)
    rows = []
    for index in range(count):
        category = categories[index % len(categories)]
        brands, items, *_ = CATALOGUE[category]
        while True:
            name = f"{rng.choice(NAME_WORDS)} {rng.choice(items)}"
            if name not in names:
                names.add(name)
                break
        item = name.split(" ", 1)[1]
        rows.append(
            Product(
                product_id=f"P{index + 1:04d}",
                name=name,
                brand=rng.choice(brands),
                category=category,
                description=(
                    f"The {name} is a {item.lower()} built for everyday use. "
                    f"Model {model_numbers[index]}, backed by our standard warranty."
                ),
            )
        )
    created = Product.objects.bulk_create(rows, batch_size=BATCH_SIZE)
    # Remember each product's model number for its SKU codes.
    for product, model_number in zip(created, model_numbers, strict=True):
        product._model_number = model_number  # type: ignore[attr-defined]
    return created


def _initials(name: str) -> str:
    return "".join(word[0] for word in name.replace("-", " ").split() if word[0].isalpha()).upper()


def _skus_create(rng: random.Random, *, products: list[Product]) -> list[Sku]:
    rows = []
    for product in products:
        _, _, colours, sizes, (low, high) = CATALOGUE[product.category]
        base = Decimal(rng.randint(low, high)) + Decimal("0.99")
        prefix = f"{_initials(product.name)}-{product._model_number}"  # type: ignore[attr-defined]
        chosen_colours = rng.sample(colours, rng.randint(2, 3) if sizes else rng.randint(2, 4))
        chosen_sizes = list(sizes[rng.randint(0, 1) :]) if sizes else [""]
        if sizes and len(chosen_sizes) > 4:
            chosen_sizes = chosen_sizes[:4]
        for colour in chosen_colours:
            # Some colours are a premium finish.
            premium = Decimal(rng.choice((0, 0, 0, 10, 20)))
            for size in chosen_sizes:
                variant = f"{SIZED_COLOR_CODES[colour]}{size}" if size else COLOR_CODES[colour]
                code = f"{prefix}-{variant}"
                rows.append(
                    Sku(
                        sku=code,
                        product=product,
                        color=colour,
                        size=size,
                        price=base + premium,
                        currency="USD",
                    )
                )
    return Sku.objects.bulk_create(rows, batch_size=BATCH_SIZE)


def _inventory_create(rng: random.Random, *, skus: list[Sku]) -> int:
    rows = []
    for sku in skus:
        warehouses = sorted(rng.sample(WAREHOUSES, rng.randint(1, 3)))
        out_of_stock = rng.random() < 0.15
        for warehouse in warehouses:
            if out_of_stock:
                restock = (
                    (SHOP_ANCHOR + timedelta(days=rng.randint(3, 45))).date()
                    if rng.random() < 0.75
                    else None
                )
                rows.append(
                    Inventory(sku=sku, warehouse=warehouse, quantity=0, restock_date=restock)
                )
            else:
                rows.append(Inventory(sku=sku, warehouse=warehouse, quantity=rng.randint(1, 180)))
    Inventory.objects.bulk_create(rows, batch_size=BATCH_SIZE)
    return len(rows)


def _promotions_create(rng: random.Random, *, products: list[Product], skus: list[Sku]) -> int:
    count = max(3, min(12, len(products) // 4))
    codes: set[str] = set()
    rows = []
    for index in range(count):
        percent = rng.choice((5, 10, 15, 20, 25, 30))
        code = f"{rng.choice(PROMO_WORDS)}{percent}"
        # Rare clashes get a suffix rather than a redraw, to keep the draw sequence simple.
        suffix = 2
        while code in codes:
            code = f"{code.rstrip('0123456789-')}{percent}-{suffix}"
            suffix += 1
        codes.add(code)
        # Two thirds are active at the anchor, the rest expired or upcoming.
        phase = ("active", "active", "expired", "upcoming")[index % 4]
        if phase == "active":
            starts = SHOP_ANCHOR - timedelta(days=rng.randint(1, 20))
            ends = SHOP_ANCHOR + timedelta(days=rng.randint(2, 30))
        elif phase == "expired":
            ends = SHOP_ANCHOR - timedelta(days=rng.randint(1, 40))
            starts = ends - timedelta(days=rng.randint(3, 21))
        else:
            starts = SHOP_ANCHOR + timedelta(days=rng.randint(2, 20))
            ends = starts + timedelta(days=rng.randint(3, 14))
        on_sku = rng.random() < 0.5
        rows.append(
            Promotion(
                code=code,
                sku=rng.choice(skus) if on_sku else None,
                product=None if on_sku else rng.choice(products),
                percent_off=percent,
                starts_at=starts,
                ends_at=ends,
            )
        )
    Promotion.objects.bulk_create(rows, batch_size=BATCH_SIZE)
    return len(rows)


def _users_create(rng: random.Random, *, count: int) -> list[ShopUser]:
    numbers = rng.sample(range(10**7, 10**8), count)
    tiers = (ShopUser.Tier.STANDARD, ShopUser.Tier.SILVER, ShopUser.Tier.GOLD)
    seen: dict[str, int] = {}
    rows = []
    for number in numbers:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        handle = f"{first.lower()}.{last.lower()}"
        seen[handle] = seen.get(handle, 0) + 1
        rows.append(
            ShopUser(
                user_id=f"U{number:08d}",
                name=f"{first} {last}",
                email=f"{handle}{seen[handle] if seen[handle] > 1 else ''}@example.com",
                tier=rng.choices(tiers, weights=(70, 20, 10))[0],
                created_at=SHOP_ANCHOR
                - timedelta(days=rng.randint(400, 1800), seconds=rng.randint(0, 86399)),
            )
        )
    return ShopUser.objects.bulk_create(rows, batch_size=BATCH_SIZE)


def _order_status(rng: random.Random, *, age_days: float) -> str:
    status = Order.Status
    if age_days < 1.5:
        return rng.choices((status.PENDING, status.PROCESSING, status.CANCELLED), (65, 30, 5))[0]
    if age_days < 3:
        return rng.choices((status.PROCESSING, status.SHIPPED, status.CANCELLED), (55, 40, 5))[0]
    if age_days < 8:
        return rng.choices((status.SHIPPED, status.DELIVERED, status.CANCELLED), (55, 40, 5))[0]
    return rng.choices((status.DELIVERED, status.CANCELLED, status.RETURNED), (85, 7, 8))[0]


def _tracking_number(rng: random.Random, carrier: str) -> str:
    if carrier == "UPS":
        return "1Z" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(16))
    if carrier == "FedEx":
        return "".join(rng.choice("0123456789") for _ in range(12))
    if carrier == "USPS":
        return "9400" + "".join(rng.choice("0123456789") for _ in range(18))
    return "".join(rng.choice("0123456789") for _ in range(10))


def _shipping_fill(rng: random.Random, order: Order, *, age_days: float) -> None:
    """Set carrier, tracking and dates consistent with the order's status and age."""
    placed: datetime = order.placed_at
    if order.status in (Order.Status.PENDING, Order.Status.PROCESSING):
        order.estimated_delivery = (placed + timedelta(days=rng.randint(4, 7))).date()
        return
    if order.status == Order.Status.CANCELLED:
        return
    order.carrier = rng.choices(CARRIERS, weights=(40, 30, 20, 10))[0]
    order.tracking_number = _tracking_number(rng, order.carrier)
    ship_delay = rng.uniform(0.2, min(1.5, age_days * 0.8))
    order.shipped_at = _whole_seconds(placed + timedelta(days=ship_delay))
    if order.status == Order.Status.SHIPPED:
        order.estimated_delivery = (order.shipped_at + timedelta(days=rng.randint(2, 6))).date()
        return
    # Delivered or returned: age >= 3 days leaves room for at least one day of transit.
    transit = rng.uniform(1.0, min(6.0, age_days - ship_delay - 0.1))
    order.delivered_at = _whole_seconds(order.shipped_at + timedelta(days=transit))
    order.estimated_delivery = (order.shipped_at + timedelta(days=rng.randint(2, 6))).date()


def _orders_create(
    rng: random.Random, *, count: int, users: list[ShopUser], skus: list[Sku]
) -> tuple[list[Order], int]:
    numbers = rng.sample(range(10**6, 10**7), count)
    # A long tail: some customers order often, many only once or twice.
    user_weights = [rng.paretovariate(1.5) for _ in users]
    orders: list[Order] = []
    lines: list[list[tuple[Sku, int]]] = []
    for number in numbers:
        recent = rng.random() < 0.2
        age_days = rng.uniform(0, 14) if recent else rng.uniform(14, 365)
        order = Order(
            order_id=f"#W{number:07d}",
            numeric_id=number,
            user=rng.choices(users, weights=user_weights)[0],
            status=_order_status(rng, age_days=age_days),
            placed_at=_whole_seconds(SHOP_ANCHOR - timedelta(days=age_days)),
            currency="USD",
        )
        _shipping_fill(rng, order, age_days=age_days)
        chosen = rng.sample(skus, min(len(skus), rng.choices((1, 2, 3, 4), (55, 28, 12, 5))[0]))
        order_lines = [(sku, rng.choices((1, 2, 3), (80, 15, 5))[0]) for sku in chosen]
        order.total = sum((sku.price * quantity for sku, quantity in order_lines), Decimal("0"))
        orders.append(order)
        lines.append(order_lines)
    created = Order.objects.bulk_create(orders, batch_size=BATCH_SIZE)
    items = [
        OrderItem(order=order, sku=sku, quantity=quantity, unit_price=sku.price)
        for order, order_lines in zip(created, lines, strict=True)
        for sku, quantity in order_lines
    ]
    OrderItem.objects.bulk_create(items, batch_size=BATCH_SIZE)
    for order, order_lines in zip(created, lines, strict=True):
        order._lines = order_lines  # type: ignore[attr-defined]
    return created, len(items)


def _returns_create(rng: random.Random, *, orders: list[Order]) -> int:
    window_start = SHOP_ANCHOR - timedelta(days=RETURN_WINDOW_DAYS)
    numbers = iter(rng.sample(range(10**7, 10**8), len(orders)))
    rows = []
    for order in orders:
        lines: list[tuple[Sku, int]] = order._lines  # type: ignore[attr-defined]
        if order.delivered_at is None:
            continue
        if order.status == Order.Status.RETURNED:
            status = rng.choices(
                (ReturnRequest.Status.REFUNDED, ReturnRequest.Status.RECEIVED), (80, 20)
            )[0]
        elif (
            order.status == Order.Status.DELIVERED
            and order.delivered_at is not None
            and order.delivered_at >= window_start
            and rng.random() < 0.12
        ):
            # Returns still in progress, inside the return window.
            status = rng.choice(
                (
                    ReturnRequest.Status.REQUESTED,
                    ReturnRequest.Status.APPROVED,
                    ReturnRequest.Status.REJECTED,
                )
            )
        else:
            continue
        returned = rng.sample(lines, rng.randint(1, len(lines)))
        amount = sum((sku.price * quantity for sku, quantity in returned), Decimal("0"))
        created_at = order.delivered_at + timedelta(
            days=rng.uniform(0.5, max(0.6, min(25.0, (SHOP_ANCHOR - order.delivered_at).days)))
        )
        rows.append(
            ReturnRequest(
                return_id=f"R{next(numbers):08d}",
                order=order,
                status=status,
                reason=rng.choice(RETURN_REASONS),
                skus=sorted(sku.sku for sku, _ in returned),
                created_at=_whole_seconds(min(created_at, SHOP_ANCHOR)),
                refund_amount=None if status == ReturnRequest.Status.REJECTED else amount,
            )
        )
    ReturnRequest.objects.bulk_create(rows, batch_size=BATCH_SIZE)
    return len(rows)


def _articles_create() -> int:
    rows = [
        Article(
            slug=article["slug"],
            title=article["title"],
            category=article["category"],
            body=article["body"],
            # Spread fixed edit dates so "recently updated" has a stable meaning.
            updated_at=SHOP_ANCHOR - timedelta(days=7 * (index + 1)),
        )
        for index, article in enumerate(ARTICLES)
    ]
    Article.objects.bulk_create(rows, batch_size=BATCH_SIZE)
    return len(rows)
