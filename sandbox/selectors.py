"""Reads of the sandbox shop. Time-dependent answers use the shop's anchor, not the wall clock."""

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Prefetch, Q

from sandbox.clock import RETURN_WINDOW_DAYS, shop_now
from sandbox.models import (
    Article,
    ContractDrift,
    FaultRule,
    Inventory,
    Order,
    Product,
    Promotion,
    ReturnRequest,
    ShopUser,
    Sku,
)

STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "my",
        "of",
        "on",
        "or",
        "the",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    )
)


def shopuser_get(*, user_id: str) -> ShopUser | None:
    return ShopUser.objects.filter(user_id=user_id).first()


def shopuser_orders(*, user: ShopUser, limit: int) -> list[Order]:
    """The user's most recent orders, newest first."""
    return list(user.orders.order_by("-placed_at", "-numeric_id")[:limit])


def order_get(*, order_id: str | None = None, numeric_id: int | None = None) -> Order | None:
    """Look an order up by ``#W`` id or by its integer, with items and products loaded."""
    orders = Order.objects.select_related("user").prefetch_related("items__sku__product", "returns")
    if order_id is not None:
        return orders.filter(order_id=order_id).first()
    if numeric_id is not None:
        return orders.filter(numeric_id=numeric_id).first()
    raise ValueError("pass order_id or numeric_id")


def _normalise(word: str) -> str:
    # Crude singularisation so "headphones" finds "Headphones" and "tents" finds "Tent".
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str) -> list[str]:
    """Lower-cased, singularised words of ``text`` without stopwords."""
    return [
        _normalise(word) for word in re.findall(r"[a-z0-9]+", text.lower()) if word not in STOPWORDS
    ]


def product_search(*, query: str, limit: int) -> list[Product]:
    """Products where every query word occurs in the name, brand or category."""
    condition = Q()
    for word in _words(query):
        condition &= (
            Q(name__icontains=word) | Q(brand__icontains=word) | Q(category__icontains=word)
        )
    return list(
        Product.objects.filter(condition)
        .prefetch_related(Prefetch("skus", queryset=Sku.objects.order_by("sku")))
        .order_by("name", "product_id")[:limit]
    )


def product_get(*, product_id: str) -> Product | None:
    return (
        Product.objects.prefetch_related(Prefetch("skus", queryset=Sku.objects.order_by("sku")))
        .filter(product_id=product_id)
        .first()
    )


def sku_get(*, sku: str) -> Sku | None:
    return Sku.objects.select_related("product").filter(sku=sku).first()


def _active_q(at: datetime) -> Q:
    return Q(starts_at__lte=at, ends_at__gt=at)


def sku_active_promotions(*, sku: Sku) -> list[Promotion]:
    """Promotions running now on the SKU itself or on its whole product, best first."""
    return list(
        Promotion.objects.filter(Q(sku=sku) | Q(product_id=sku.product_id))
        .filter(_active_q(shop_now()))
        .order_by("-percent_off", "code")
    )


def sku_final_price(*, sku: Sku, promotions: list[Promotion]) -> Decimal:
    """The price after the single best promotion (promotions do not stack)."""
    best = max((promotion.percent_off for promotion in promotions), default=0)
    discounted = sku.price * (Decimal(100) - best) / Decimal(100)
    return discounted.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def sku_inventory(*, sku: Sku) -> list[Inventory]:
    return list(sku.inventory.order_by("warehouse"))


def promotion_list(*, sku: Sku | None = None, product: Product | None = None) -> list[Promotion]:
    """Promotions touching a SKU (directly or via its product) or any SKU of a product.

    Active promotions come first; expired and upcoming ones are listed too so a caller can
    explain why a code no longer applies.
    """
    if sku is not None:
        condition = Q(sku=sku) | Q(product_id=sku.product_id)
    elif product is not None:
        condition = Q(product=product) | Q(sku__product=product)
    else:
        raise ValueError("pass sku or product")
    promotions = list(
        Promotion.objects.filter(condition)
        .select_related("sku", "product")
        .order_by("-ends_at", "code")
    )
    now = shop_now()
    return sorted(promotions, key=lambda p: not (p.starts_at <= now < p.ends_at))


@dataclass(frozen=True)
class ReturnEligibility:
    """Whether an order can be returned now, why, and until when."""

    eligible: bool
    reason: str
    deadline: date | None


def order_return_eligibility(*, order: Order) -> ReturnEligibility:
    """Apply the 30-day return policy at the shop's anchor date."""
    deadline = (
        (order.delivered_at + timedelta(days=RETURN_WINDOW_DAYS)).date()
        if order.delivered_at is not None
        else None
    )
    open_return = next(
        (r for r in order.returns.all() if r.status != ReturnRequest.Status.REJECTED), None
    )
    if order.status == Order.Status.RETURNED:
        return ReturnEligibility(False, "order has already been returned", deadline)
    if open_return is not None:
        return ReturnEligibility(
            False, f"a return already exists for this order ({open_return.return_id})", deadline
        )
    if order.status != Order.Status.DELIVERED or order.delivered_at is None:
        return ReturnEligibility(
            False, f"only delivered orders can be returned; this order is {order.status}", None
        )
    closes = order.delivered_at + timedelta(days=RETURN_WINDOW_DAYS)
    if shop_now() > closes:
        return ReturnEligibility(
            False,
            f"the {RETURN_WINDOW_DAYS}-day return window closed on {closes.date().isoformat()}",
            deadline,
        )
    return ReturnEligibility(True, f"delivered within the last {RETURN_WINDOW_DAYS} days", deadline)


def order_returns(*, order: Order) -> list[ReturnRequest]:
    return sorted(order.returns.all(), key=lambda r: (r.created_at, r.return_id))


def _article_terms(text: str) -> set[str]:
    return set(_words(text))


def article_search(*, query: str, limit: int) -> list[Article]:
    """Articles ranked by how many query words they share, title words counting triple."""
    terms = _article_terms(query)
    scored = []
    for article in Article.objects.all():
        title_terms = _article_terms(article.title)
        body_terms = _article_terms(article.body) | _article_terms(article.slug)
        score = sum(3 * (t in title_terms) + (t in body_terms) for t in terms)
        if score:
            scored.append((score, article))
    scored.sort(key=lambda pair: (-pair[0], pair[1].slug))
    return [article for _, article in scored[:limit]]


def article_get(*, slug: str) -> Article | None:
    return Article.objects.filter(slug=slug).first()


def faultrule_list() -> list[FaultRule]:
    return list(FaultRule.objects.order_by("endpoint"))


def faultrule_get(*, endpoint: str) -> FaultRule | None:
    return FaultRule.objects.filter(endpoint=endpoint).first()


def contractdrift_list() -> list[ContractDrift]:
    return list(ContractDrift.objects.order_by("endpoint", "id"))
