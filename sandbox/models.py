"""Data of the sandbox shop: the external e-commerce system the agent runtime calls over HTTP."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

USER_ID_PATTERN = r"^U\d{8}$"
PRODUCT_ID_PATTERN = r"^P\d{4}$"
ORDER_ID_PATTERN = r"^#W\d{7}$"
RETURN_ID_PATTERN = r"^R\d{8}$"


class ShopUser(models.Model):
    """A customer of the sandbox shop (not a Django login user)."""

    class Tier(models.TextChoices):
        STANDARD = "standard", "Standard"
        SILVER = "silver", "Silver"
        GOLD = "gold", "Gold"

    user_id = models.CharField(
        max_length=9, unique=True, validators=[RegexValidator(USER_ID_PATTERN)]
    )
    name = models.CharField(max_length=120)
    email = models.EmailField(unique=True)
    tier = models.CharField(max_length=10, choices=Tier.choices, default=Tier.STANDARD)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["user_id"]

    def __str__(self) -> str:
        return f"{self.user_id} {self.name}"


class Product(models.Model):
    """A catalogue product; what is actually sold and stocked are its SKUs."""

    product_id = models.CharField(
        max_length=5, unique=True, validators=[RegexValidator(PRODUCT_ID_PATTERN)]
    )
    name = models.CharField(max_length=120, unique=True)
    brand = models.CharField(max_length=60)
    category = models.CharField(max_length=60, db_index=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["product_id"]

    def __str__(self) -> str:
        return f"{self.product_id} {self.name}"


class Sku(models.Model):
    """A sellable variant of a product (colour and size), identified by an opaque SKU code.

    The code is built from the product's initials and a model number (``AWH-2041-BLK``),
    so an agent cannot guess it from the product name and has to look it up.
    """

    sku = models.CharField(max_length=32, unique=True)
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="skus")
    color = models.CharField(max_length=30)
    size = models.CharField(max_length=10, blank=True)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    currency = models.CharField(max_length=3, default="USD")

    class Meta:
        ordering = ["sku"]
        verbose_name = "SKU"
        verbose_name_plural = "SKUs"

    def __str__(self) -> str:
        return self.sku


class Inventory(models.Model):
    """Stock of one SKU in one warehouse."""

    sku = models.ForeignKey(Sku, on_delete=models.CASCADE, related_name="inventory")
    warehouse = models.CharField(max_length=20)
    quantity = models.PositiveIntegerField(default=0)
    restock_date = models.DateField(null=True, blank=True)

    class Meta:
        ordering = ["sku_id", "warehouse"]
        verbose_name_plural = "inventory"
        constraints = [
            models.UniqueConstraint(fields=["sku", "warehouse"], name="sandbox_inventory_unique")
        ]

    def __str__(self) -> str:
        return f"{self.sku_id}@{self.warehouse}: {self.quantity}"


class Promotion(models.Model):
    """A percentage discount on one SKU or on every SKU of a product, for a time window."""

    code = models.CharField(max_length=20, unique=True)
    sku = models.ForeignKey(
        Sku, on_delete=models.CASCADE, null=True, blank=True, related_name="promotions"
    )
    product = models.ForeignKey(
        Product, on_delete=models.CASCADE, null=True, blank=True, related_name="promotions"
    )
    percent_off = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(90)]
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()

    class Meta:
        ordering = ["code"]
        indexes = [models.Index(fields=["starts_at", "ends_at"], name="sandbox_promo_window")]

    def __str__(self) -> str:
        return f"{self.code} ({self.percent_off}% off)"

    def clean(self) -> None:
        if (self.sku_id is None) == (self.product_id is None):
            raise ValidationError("a promotion targets exactly one of sku or product")
        if self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "must be after starts_at"})


class Order(models.Model):
    """A customer order, with its fulfilment state and shipping details."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        PROCESSING = "processing", "Processing"
        SHIPPED = "shipped", "Shipped"
        DELIVERED = "delivered", "Delivered"
        CANCELLED = "cancelled", "Cancelled"
        RETURNED = "returned", "Returned"

    order_id = models.CharField(
        max_length=9, unique=True, validators=[RegexValidator(ORDER_ID_PATTERN)]
    )
    # The seven digits of order_id, for clients that address orders by integer.
    numeric_id = models.PositiveIntegerField(unique=True)
    user = models.ForeignKey(ShopUser, on_delete=models.CASCADE, related_name="orders")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    placed_at = models.DateTimeField()
    carrier = models.CharField(max_length=20, blank=True)
    tracking_number = models.CharField(max_length=40, blank=True)
    estimated_delivery = models.DateField(null=True, blank=True)
    shipped_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    total = models.DecimalField(max_digits=10, decimal_places=2, default=Decimal("0.00"))
    currency = models.CharField(max_length=3, default="USD")

    class Meta:
        ordering = ["-placed_at"]
        indexes = [
            models.Index(fields=["user", "-placed_at"], name="sandbox_order_user_placed"),
            models.Index(fields=["status"], name="sandbox_order_status"),
        ]

    def __str__(self) -> str:
        return f"{self.order_id} ({self.status})"


class OrderItem(models.Model):
    """One line of an order: a SKU, a quantity and the unit price paid."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    sku = models.ForeignKey(Sku, on_delete=models.PROTECT, related_name="order_items")
    quantity = models.PositiveIntegerField(default=1)
    unit_price = models.DecimalField(max_digits=10, decimal_places=2)

    class Meta:
        ordering = ["order_id", "id"]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku_id}"


class ReturnRequest(models.Model):
    """A customer's request to return (part of) an order, and how far it got."""

    class Status(models.TextChoices):
        REQUESTED = "requested", "Requested"
        APPROVED = "approved", "Approved"
        RECEIVED = "received", "Received"
        REFUNDED = "refunded", "Refunded"
        REJECTED = "rejected", "Rejected"

    return_id = models.CharField(
        max_length=9, unique=True, validators=[RegexValidator(RETURN_ID_PATTERN)]
    )
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="returns")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    reason = models.CharField(max_length=500)
    # SKU codes being returned; empty means the whole order.
    skus = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    refund_amount = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)

    class Meta:
        ordering = ["created_at", "return_id"]
        indexes = [models.Index(fields=["status"], name="sandbox_return_status")]

    def __str__(self) -> str:
        return f"{self.return_id} for {self.order_id} ({self.status})"


class Article(models.Model):
    """A help-centre article (FAQ or policy) the support agent can search and quote."""

    class Category(models.TextChoices):
        FAQ = "faq", "FAQ"
        POLICY = "policy", "Policy"

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=200)
    category = models.CharField(max_length=10, choices=Category.choices)
    body = models.TextField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.title


def _rate_field() -> models.FloatField:
    return models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(1)])


class FaultRule(models.Model):
    """Run-time fault injection for one sandbox endpoint.

    Each request to the endpoint draws one uniform number and maps it onto the rates in
    this order: 404, 500, 401, 429, timeout, slow; the remainder is a normal answer. Drift
    is applied to every non-faulted answer while the rule is enabled.
    """

    class Endpoint(models.TextChoices):
        USERS = "users", "GET users/<user_id>"
        USER_ORDERS = "user_orders", "GET users/<user_id>/orders"
        ORDERS = "orders", "GET orders/<order_id>"
        PRODUCTS = "products", "GET products"
        PRODUCT_DETAIL = "product_detail", "GET products/<product_id>"
        SKUS = "skus", "GET skus/<sku>"
        INVENTORY = "inventory", "GET inventory/<sku>"
        PROMOTIONS = "promotions", "GET promotions"
        RETURNS = "returns", "GET returns/<order_id>"
        RETURNS_CREATE = "returns_create", "POST returns"
        ARTICLES = "articles", "GET articles"
        ARTICLE_DETAIL = "article_detail", "GET articles/<slug>"

    class Drift(models.TextChoices):
        NONE = "none", "None"
        RENAME_FIELD = "rename_field", "Rename a top-level response field"
        REQUIRE_INT_ID = "require_int_id", "Require the bare integer order id"

    RATE_FIELDS = ("rate_404", "rate_500", "rate_401", "rate_429", "rate_timeout", "rate_slow")
    # Only these endpoints take an order id that can change type.
    INT_ID_ENDPOINTS = (Endpoint.ORDERS, Endpoint.RETURNS, Endpoint.RETURNS_CREATE)

    endpoint = models.CharField(max_length=20, choices=Endpoint.choices, unique=True)
    enabled = models.BooleanField(default=True)
    rate_404 = _rate_field()
    rate_500 = _rate_field()
    rate_401 = _rate_field()
    rate_429 = _rate_field()
    rate_timeout = _rate_field()
    rate_slow = _rate_field()
    timeout_seconds = models.FloatField(
        default=10.0, validators=[MinValueValidator(0), MaxValueValidator(120)]
    )
    slow_ms = models.PositiveIntegerField(default=1500, validators=[MaxValueValidator(60_000)])
    drift = models.CharField(max_length=20, choices=Drift.choices, default=Drift.NONE)
    drift_from = models.CharField(max_length=60, default="status", blank=True)
    drift_to = models.CharField(max_length=60, default="shipping_status", blank=True)
    seed = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["endpoint"]
        permissions = [("inject_faults", "Can set and clear faults through the fault API")]

    def __str__(self) -> str:
        return f"faults on {self.endpoint}" + ("" if self.enabled else " (disabled)")

    def clean(self) -> None:
        errors: dict[str, str] = {}
        rates = {name: getattr(self, name) for name in self.RATE_FIELDS}
        if all(isinstance(value, int | float) for value in rates.values()):
            total = sum(rates.values())
            # Tolerate float noise such as 0.1 + 0.2 + 0.7.
            if total > 1.0 + 1e-9:
                listed = ", ".join(f"{name}={value:g}" for name, value in rates.items() if value)
                errors["__all__"] = f"rates must sum to at most 1.0, got {total:g} ({listed})"
        if self.drift == self.Drift.RENAME_FIELD:
            if not self.drift_from or not self.drift_to:
                errors["drift_from"] = "rename_field needs both drift_from and drift_to"
            elif self.drift_from == self.drift_to:
                errors["drift_to"] = "drift_to must differ from drift_from"
        if self.drift == self.Drift.REQUIRE_INT_ID and self.endpoint not in self.INT_ID_ENDPOINTS:
            allowed = ", ".join(self.INT_ID_ENDPOINTS)
            errors["drift"] = f"require_int_id only applies to {allowed}"
        if errors:
            raise ValidationError(errors)

    @property
    def rates(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in self.RATE_FIELDS)


class ContractDrift(models.Model):
    """A declarative change of one endpoint's contract, applied while the row is enabled.

    The view behind the endpoint is unchanged: the drift stands in front of it, refuses a
    request in the old contract with a realistic error body (in the row's ``layout``),
    translates a request in the new contract back to the old one, and rewrites the answer
    where the drift changes the response. An endpoint may carry several drifts; they apply
    in ``id`` order. ``param`` names a path argument of the endpoint, else a query parameter
    (GET) or a JSON body field (POST).
    """

    class Kind(models.TextChoices):
        PREFIX_DROPPED = "prefix_dropped", "Value format: sent without the prefix `old`"
        PREFIX_CHANGED = "prefix_changed", "Value format: prefix `old` is now `new`"
        PREFIX_ADDED = "prefix_added", "Value format: sent with the new prefix `new`"
        CASE = "case", "Value format: letter case `new` (lower, upper); data is in `old`"
        SEPARATOR = "separator", "Value format: separator `old` is now `new`"
        INTEGER = "integer", "Type change: an integer (digits only in a path); `old` is the prefix"
        PARAM_RENAMED = "param_renamed", "Parameter `old` is renamed to `new`"
        PARAM_REQUIRED = "param_required", "New required parameter `new`, one of `values`"
        DATE_FORMAT = "date_format", "Dates in the strftime layout `new` (request and response)"
        ENUM_RENAMED = "enum_renamed", "Values of `param` renamed by `values` (old: new)"
        FIELD_RENAMED = "field_renamed", "Response field `old` is renamed to `new`"
        UNAVAILABLE = "unavailable", "503 with Retry-After on the first try of each call"
        RATE_LIMITED = "rate_limited", "429 with Retry-After on the first try of each call"

    class Layout(models.TextChoices):
        FLAT = "flat", '{"error", "detail", "field"} (this sandbox)'
        DETAIL = "detail", '{"detail": "..."} (Django REST framework)'
        ERRORS = "errors", '{"errors": [{"field", "message"}]}'
        PROBLEM = "problem", "RFC 7807 application/problem+json"
        PYDANTIC = "pydantic", "FastAPI / pydantic 422 list"
        TEXT = "text", "plain text"

    # Which of the fields each kind reads; the rest must stay blank.
    NEEDS: dict[str, tuple[str, ...]] = {
        "prefix_dropped": ("param", "old"),
        "prefix_changed": ("param", "old", "new"),
        "prefix_added": ("param", "new"),
        "case": ("param", "old", "new"),
        "separator": ("param", "old", "new"),
        "integer": ("param",),
        "param_renamed": ("old", "new"),
        "param_required": ("new", "values"),
        "date_format": ("new",),
        "enum_renamed": ("param", "values"),
        "field_renamed": ("old", "new"),
        "unavailable": (),
        "rate_limited": (),
    }

    endpoint = models.CharField(max_length=20, choices=FaultRule.Endpoint.choices)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    param = models.CharField(max_length=60, blank=True)
    old = models.CharField(max_length=60, blank=True)
    new = models.CharField(max_length=60, blank=True)
    values = models.JSONField(
        default=list,
        blank=True,
        help_text="param_required: the accepted values (a list); enum_renamed: {old: new}.",
    )
    pattern = models.CharField(
        max_length=120,
        blank=True,
        help_text="Optional: the regex a value in the new format matches, quoted in the error.",
    )
    layout = models.CharField(max_length=10, choices=Layout.choices, default=Layout.FLAT)
    retry_after_s = models.FloatField(
        default=1.0, validators=[MinValueValidator(0), MaxValueValidator(60)]
    )
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["endpoint", "id"]

    def __str__(self) -> str:
        return f"{self.kind} drift on {self.endpoint}" + ("" if self.enabled else " (disabled)")

    def clean(self) -> None:
        import re

        errors: dict[str, str] = {}
        needs = self.NEEDS.get(self.kind, ())
        for name in needs:
            if name == "values":
                continue
            if not getattr(self, name):
                errors[name] = f"{self.kind} needs {name}"
        if self.kind == "case" and not errors:
            for name in ("old", "new"):
                if getattr(self, name) not in ("lower", "upper"):
                    errors[name] = "case takes lower or upper"
            if self.old == self.new:
                errors["new"] = "new must differ from old"
        renames = ("prefix_changed", "separator", "param_renamed", "field_renamed")
        if self.kind in renames and self.old and self.old == self.new:
            errors["new"] = "new must differ from old"
        if self.kind == "param_required":
            if not isinstance(self.values, list) or not self.values:
                errors["values"] = "param_required needs a non-empty list of accepted values"
            elif not all(isinstance(v, str | int) and not isinstance(v, bool) for v in self.values):
                errors["values"] = "accepted values are strings or integers"
        elif self.kind == "enum_renamed":
            if (
                not isinstance(self.values, dict)
                or not self.values
                or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in self.values.items()
                )
            ):
                errors["values"] = "enum_renamed needs a non-empty {old: new} mapping of strings"
            elif len(set(self.values.values())) != len(self.values):
                errors["values"] = "two old values cannot share a new name"
        elif self.values not in ([], {}, None):
            errors["values"] = f"{self.kind} takes no values"
        if self.kind == "date_format" and self.new:
            from datetime import datetime

            try:
                rendered = datetime(2026, 11, 3, 14, 5, 9).strftime(self.new)
                datetime.strptime(rendered, self.new)
            except ValueError as exc:
                errors["new"] = f"not a strftime layout that reads back: {exc}"
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                errors["pattern"] = f"not a regular expression: {exc}"
        if errors:
            raise ValidationError(errors)


class IdempotentRequest(models.Model):
    """One side-effecting request by its ``Idempotency-Key``: what it answered, and how many
    times the same request came again and was answered from here instead of repeated.

    A key is claimed (``status`` 0) before the request runs and completed with its
    response; a request that fails (not 2xx) changes nothing and gives its key back.
    """

    key = models.CharField(max_length=255, unique=True)
    endpoint = models.CharField(max_length=40)
    fingerprint = models.CharField(max_length=64)  # sha256 of method, path and body
    status = models.PositiveSmallIntegerField(default=0)  # 0 while the first one runs
    body = models.BinaryField(blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    replays = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["endpoint", "created_at"], name="sandbox_idem_time")]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.key}"
