from typing import Any

from django.apps import AppConfig


def _external_runs_ended(sender: Any, *, trace_ids: list[str], **_: Any) -> None:
    from policies.tasks import external_runs_hand_off

    external_runs_hand_off(trace_ids=trace_ids)


class PoliciesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "policies"

    def ready(self) -> None:
        # Runs ingested over OTLP are learned from like native ones.
        from traces.otlp import external_runs_ended

        external_runs_ended.connect(_external_runs_ended, dispatch_uid="policies.external_runs")
