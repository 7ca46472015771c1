from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from policies.models import (
    Experiment,
    Policy,
    PolicyVersion,
    ReflexionProposal,
    Rollout,
    RolloutDecision,
    Strategy,
    StrategyConfidenceEvent,
)


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin):
    list_display = ["id", "tool_name", "intent", "created_at"]
    search_fields = ["tool_name", "intent"]


@admin.register(Strategy)
class StrategyAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "kind",
        "tool_name",
        "error_type",
        "status",
        "confidence",
        "applications",
        "successes",
        "consecutive_failures",
        "agree_count",
        "origin",
        "replay_status",
    ]
    list_filter = ["kind", "status", "error_type", "origin", "replay_status", "needs_review"]
    search_fields = ["root_cause", "strategy_update", "tool_name"]
    readonly_fields = [
        "signature",
        "applications",
        "successes",
        "consecutive_failures",
        "agree_count",
        "created_at",
        "updated_at",
    ]
    filter_horizontal = ["source_traces"]


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """Versions are immutable: read-only here; publish through approval or `policy import`."""

    list_display = ["number", "is_active", "author_kind", "author", "note", "created_at"]
    list_filter = ["author_kind", "is_active"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ReflexionProposal)
class ReflexionProposalAdmin(admin.ModelAdmin):
    list_display = ["created_at", "trace", "error_type", "origin", "outcome", "reason"]
    list_filter = ["outcome", "error_type", "origin"]
    readonly_fields = [f.name for f in ReflexionProposal._meta.fields]


@admin.register(StrategyConfidenceEvent)
class StrategyConfidenceEventAdmin(admin.ModelAdmin):
    """Append-only history written by confidence bookkeeping; never added by hand."""

    list_display = ["at", "strategy", "old", "new", "reason", "trace"]
    list_filter = ["reason"]
    readonly_fields = [f.name for f in StrategyConfidenceEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    """Read-only: experiments are created, started and stopped on the Experiments page,
    which checks the state and writes the audit rows."""

    list_display = ["id", "name", "status", "traffic_percent", "started_at", "stopped_at"]
    list_filter = ["status"]
    search_fields = ["name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    """Read-only: rollouts move through the rollout page (audited, with numbers)."""

    list_display = ["id", "version", "stable", "strategy", "state", "percent", "created_at"]
    list_filter = ["state"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RolloutDecision)
class RolloutDecisionAdmin(admin.ModelAdmin):
    """Append-only history written by the evaluator and the manual controls."""

    list_display = ["at", "rollout", "action", "from_percent", "to_percent", "actor_kind"]
    list_filter = ["action", "actor_kind"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
