from typing import Any

from django.apps import AppConfig


def _external_run_ended(sender: Any, *, trace_id: str, **_: Any) -> None:
    from policies.services import run_ended

    run_ended(trace_id=trace_id)


class PoliciesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "policies"

    def ready(self) -> None:
        # Runs ingested over OTLP are learned from like native ones.
        from traces.otlp import external_run_ended

        external_run_ended.connect(_external_run_ended, dispatch_uid="policies.external_run")
