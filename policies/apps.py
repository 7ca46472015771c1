from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models import QuerySet


def _external_runs_ended(sender: Any, *, trace_ids: list[str], **_: Any) -> None:
    from policies.tasks import external_runs_hand_off

    external_runs_hand_off(trace_ids=trace_ids)


def _run_ended(sender: Any, *, trace_id: str, trace: Any = None, **_: Any) -> None:
    from policies.services import run_ended

    run_ended(trace_id=trace_id, trace=trace)


def _policy_for_run(trace: Any) -> Any:
    from policies.selectors import runtime_policy_for_trace

    return runtime_policy_for_trace(trace)


def _evaluate_rollouts() -> object:
    from policies.tasks import evaluate_rollouts

    return evaluate_rollouts()


def _learning_sweep() -> object:
    from policies.tasks import runs_learning_sweep

    return runs_learning_sweep()


class PoliciesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "policies"

    def ready(self) -> None:
        # The runtime is handed its policy and announces run ends; it never imports the
        # learning loop (DESIGN.md layers). Runs ingested over OTLP are learned from too.
        from agents.hooks import periodic_job_register, policy_resolver_register
        from agents.signals import run_ended
        from traces.otlp import external_runs_ended
        from traces.retention import retention_hold_register

        policy_resolver_register(_policy_for_run)
        # A strategy's evidence outlives the retention window: its review and audit cite it.
        retention_hold_register("strategy evidence", _strategy_source_traces)
        run_ended.connect(_run_ended, dispatch_uid="policies.run_ended")
        external_runs_ended.connect(_external_runs_ended, dispatch_uid="policies.external_runs")
        # Celery beat runs it in the production shape (CELERY_BEAT_SCHEDULE).
        periodic_job_register(
            "policies.evaluate_rollouts",
            _evaluate_rollouts,
            interval_seconds=settings.ROLLOUT_EVALUATE_INTERVAL_SECONDS,
        )
        # Runs whose hand-off to this loop was cut short (a worker killed, the broker away).
        periodic_job_register(
            "policies.learning_sweep",
            _learning_sweep,
            interval_seconds=settings.LEARNING_SWEEP_INTERVAL_SECONDS,
        )


def _strategy_source_traces() -> QuerySet:
    from policies.models import Strategy

    return Strategy.source_traces.through.objects.values("trace_id")
