from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from traces.models import (
    ErrorRule,
    Feedback,
    Job,
    RunRollupDaily,
    RunRollupHourly,
    Step,
    StepRollupDaily,
    StepRollupHourly,
    Trace,
    TracePrune,
)


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    can_delete = False
    readonly_fields = [
        "step_number",
        "phase",
        "action_type",
        "tool_name",
        "status_code",
        "ok",
        "error_type",
        "latency_ms",
        "response_summary",
    ]
    fields = tuple(readonly_fields)
    show_change_link = True


@admin.register(Trace)
class TraceAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "agent",
        "status",
        "outcome",
        "error_type",
        "llm_backend",
        "total_steps",
        "total_latency_ms",
        "query",
    ]
    list_filter = ["status", "outcome", "error_type", "llm_backend", "agent", "source"]
    search_fields = ["id", "query", "customer_id", "session_id", "query_hash"]
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in Trace._meta.fields]
    inlines = [StepInline]
    list_select_related = ["agent"]


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = [
        "trace",
        "step_number",
        "phase",
        "tool_name",
        "status_code",
        "ok",
        "error_type",
        "latency_ms",
        "created_at",
    ]
    list_filter = ["phase", "ok", "error_type", "tool_name", "llm_backend"]
    search_fields = ["trace__id", "tool_name", "error_detail"]
    readonly_fields = [f.name for f in Step._meta.fields]


@admin.register(ErrorRule)
class ErrorRuleAdmin(admin.ModelAdmin):
    list_display = [
        "position",
        "name",
        "source",
        "status_min",
        "status_max",
        "exception_class",
        "body_pattern",
        "error_type",
        "enabled",
    ]
    list_editable = ["enabled"]
    list_filter = ["source", "error_type", "enabled"]
    ordering = ["position"]


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    list_display = ["trace", "user", "rating", "updated_at"]
    list_filter = ["rating"]
    search_fields = ["trace__id", "user__username", "comment"]
    raw_id_fields = ["trace", "user"]
    list_select_related = ["user"]


class RollupAdmin(admin.ModelAdmin):
    """Read-only: rollup rows are counts kept by the writers and by ``rollups_rebuild``."""

    list_filter = ["origin", "error_type"]
    date_hierarchy = "period_start"
    ordering = ["-period_start"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(StepRollupHourly, StepRollupDaily)
class StepRollupAdmin(RollupAdmin):
    list_display = ["period_start", "origin", "policy_version", "tool_name", "error_type", "steps"]


@admin.register(RunRollupHourly, RunRollupDaily)
class RunRollupAdmin(RollupAdmin):
    list_display = ["period_start", "origin", "policy_version", "error_type", "runs", "successes"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs report on themselves: read-only here, the Jobs page shows them live."""

    list_display = ["started_at", "kind", "name", "status", "done", "total", "finished_at"]
    list_filter = ["kind", "status"]
    readonly_fields = [f.name for f in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(TracePrune)
class TracePruneAdmin(admin.ModelAdmin):
    """The audit log of retention passes (``manage.py traces_prune``): read-only."""

    list_display = [
        "started_at",
        "cutoff",
        "dry_run",
        "traces_deleted",
        "steps_deleted",
        "traces_held",
        "finished_at",
    ]
    list_filter = ["dry_run"]
    readonly_fields = [f.name for f in TracePrune._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
