from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from agents.models import Agent, CustomerFact, KnowledgeArticle, Tool, ToolAlert, ToolResultCache
from agents.services import tool_unsuspend
from agents.tools.credentials import ToolAuthInvalid, tool_auth_parse


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_iterations", "is_active", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "kind",
        "method",
        "endpoint_template",
        "timeout_seconds",
        "credential",
        "enabled",
        "suspended_until",
    ]
    list_filter = ["kind", "enabled", "allowed_agents"]
    list_editable = ["enabled"]
    search_fields = ["name", "description", "endpoint_template"]
    filter_horizontal = ["allowed_agents"]
    actions = ["lift_suspension"]

    @admin.display(description="Credential")
    def credential(self, obj: Tool) -> str:
        """Where the credential goes and its variable's name; the value is never read here."""
        try:
            auth = tool_auth_parse(obj.auth)
        except ToolAuthInvalid:
            return "invalid auth setting"
        return auth.describe() if auth else "-"

    @admin.action(description="Lift the timeout suspension")
    def lift_suspension(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        # The same service as the tools page: an alert row and an audit row per tool.
        for tool_id in queryset.filter(suspended_until__isnull=False).values_list("pk", flat=True):
            tool_unsuspend(tool_id=tool_id, actor=request.user)


@admin.register(ToolAlert)
class ToolAlertAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tool", "kind", "message", "acknowledged_by"]
    list_filter = ["kind", "tool"]
    readonly_fields = ["tool", "kind", "message", "details", "created_at"]


@admin.register(KnowledgeArticle)
class KnowledgeArticleAdmin(admin.ModelAdmin):
    list_display = ["slug", "title", "category", "source", "is_published", "updated_at"]
    list_filter = ["category", "source", "is_published"]
    list_editable = ["is_published"]
    search_fields = ["slug", "title", "body"]
    prepopulated_fields = {"slug": ["title"]}
    readonly_fields = ["updated_at"]


@admin.register(ToolResultCache)
class ToolResultCacheAdmin(admin.ModelAdmin):
    """The last good result per call signature, served by degrade handlers."""

    list_display = ["tool_name", "arguments", "status_code", "updated_at"]
    list_filter = ["tool_name"]
    readonly_fields = ["signature", "tool_name", "arguments", "body", "status_code", "updated_at"]


@admin.register(CustomerFact)
class CustomerFactAdmin(admin.ModelAdmin):
    """Read-only: facts are learned by runs and deleted (audited) on the customer page."""

    list_display = ["customer_id", "fact", "source_trace", "updated_at"]
    search_fields = ["customer_id"]
    readonly_fields = ["customer_id", "key", "fact", "source_trace", "created_at", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
