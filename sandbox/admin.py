"""Admin of the sandbox shop; fault rules are editable straight from the list."""

from django.contrib import admin
from django.http import HttpRequest

from sandbox.faults import fault_cache_clear
from sandbox.models import (
    Article,
    ContractDrift,
    FaultRule,
    IdempotentRequest,
    Inventory,
    Order,
    OrderItem,
    Product,
    Promotion,
    ReturnRequest,
    ShopUser,
    Sku,
)


@admin.register(ShopUser)
class ShopUserAdmin(admin.ModelAdmin):
    list_display = ("user_id", "name", "email", "tier", "created_at")
    list_filter = ("tier",)
    search_fields = ("user_id", "name", "email")


class SkuInline(admin.TabularInline):
    model = Sku
    extra = 0


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ("product_id", "name", "brand", "category")
    list_filter = ("category", "brand")
    search_fields = ("product_id", "name", "brand")
    inlines = [SkuInline]


class InventoryInline(admin.TabularInline):
    model = Inventory
    extra = 0


@admin.register(Sku)
class SkuAdmin(admin.ModelAdmin):
    list_display = ("sku", "product", "color", "size", "price", "currency")
    list_filter = ("product__category", "color")
    search_fields = ("sku", "product__name", "product__product_id")
    list_select_related = ("product",)
    inlines = [InventoryInline]


@admin.register(Inventory)
class InventoryAdmin(admin.ModelAdmin):
    list_display = ("sku", "warehouse", "quantity", "restock_date")
    list_filter = ("warehouse",)
    search_fields = ("sku__sku",)
    list_select_related = ("sku",)


@admin.register(Promotion)
class PromotionAdmin(admin.ModelAdmin):
    list_display = ("code", "percent_off", "sku", "product", "starts_at", "ends_at")
    search_fields = ("code", "sku__sku", "product__name")
    list_select_related = ("sku", "product")


class OrderItemInline(admin.TabularInline):
    model = OrderItem
    extra = 0
    raw_id_fields = ("sku",)


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("order_id", "user", "status", "placed_at", "carrier", "total")
    list_filter = ("status", "carrier")
    search_fields = ("order_id", "user__user_id", "user__email", "tracking_number")
    date_hierarchy = "placed_at"
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    inlines = [OrderItemInline]


@admin.register(OrderItem)
class OrderItemAdmin(admin.ModelAdmin):
    list_display = ("order", "sku", "quantity", "unit_price")
    search_fields = ("order__order_id", "sku__sku")
    list_select_related = ("order", "sku")
    raw_id_fields = ("order", "sku")


@admin.register(ReturnRequest)
class ReturnRequestAdmin(admin.ModelAdmin):
    list_display = ("return_id", "order", "status", "reason", "refund_amount", "created_at")
    list_filter = ("status",)
    search_fields = ("return_id", "order__order_id")
    list_select_related = ("order",)
    raw_id_fields = ("order",)


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(admin.ModelAdmin):
    """Read-only: the record of which side effects ran, and how often one was asked again."""

    list_display = ("key", "endpoint", "status", "replays", "created_at")
    list_filter = ("endpoint", "status")
    search_fields = ("key",)
    readonly_fields = (
        "key",
        "endpoint",
        "fingerprint",
        "status",
        "content_type",
        "replays",
        "created_at",
        "updated_at",
    )
    exclude = ("body",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Article)
class ArticleAdmin(admin.ModelAdmin):
    list_display = ("title", "slug", "category", "updated_at")
    list_filter = ("category",)
    search_fields = ("title", "slug", "body")
    prepopulated_fields = {"slug": ("title",)}


@admin.register(FaultRule)
class FaultRuleAdmin(admin.ModelAdmin):
    list_display = (
        "endpoint",
        "enabled",
        *FaultRule.RATE_FIELDS,
        "timeout_seconds",
        "slow_ms",
        "drift",
        "seed",
        "updated_at",
    )
    list_editable = (
        "enabled",
        *FaultRule.RATE_FIELDS,
        "timeout_seconds",
        "slow_ms",
        "drift",
        "seed",
    )
    list_filter = ("enabled", "drift")

    def save_model(self, request: HttpRequest, obj: FaultRule, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        # This process answers with the new rule right away; others within a second.
        fault_cache_clear()

    def delete_model(self, request: HttpRequest, obj: FaultRule) -> None:
        super().delete_model(request, obj)
        fault_cache_clear()


@admin.register(ContractDrift)
class ContractDriftAdmin(admin.ModelAdmin):
    list_display = ("endpoint", "kind", "enabled", "param", "old", "new", "layout", "updated_at")
    list_editable = ("enabled", "layout")
    list_filter = ("enabled", "kind", "endpoint", "layout")
    search_fields = ("param", "old", "new", "note")

    def save_model(self, request: HttpRequest, obj: ContractDrift, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        fault_cache_clear()

    def delete_model(self, request: HttpRequest, obj: ContractDrift) -> None:
        super().delete_model(request, obj)
        fault_cache_clear()
