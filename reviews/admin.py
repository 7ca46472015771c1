from django.contrib import admin
from django.http import HttpRequest

from reviews.models import AuditLog, ReviewItem


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "reason",
        "status",
        "strategy",
        "error_signature",
        "created_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = ["reason", "status"]
    readonly_fields = ["created_at", "decided_at", "locked_at"]


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_kind", "actor", "action", "target"]
    list_filter = ["action", "actor_kind"]
    readonly_fields = [f.name for f in AuditLog._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
