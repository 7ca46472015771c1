from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from django.conf import settings

        from agents import checks  # noqa: F401  (registers the system checks)
        from agents.external_runs import external_agent_ids
        from agents.hooks import periodic_job_register
        from traces.otlp import external_agent_resolver_register
        from traces.retention import traces_prune_due

        # Runs ingested over OTLP are filed under Agent rows; the store may not import them.
        external_agent_resolver_register(external_agent_ids)
        # The embedded worker's retention pass (Celery beat's `traces.prune` in production);
        # a no-op while TRACE_RETENTION_DAYS is 0.
        periodic_job_register(
            "traces.prune",
            traces_prune_due,
            interval_seconds=settings.TRACE_PRUNE_INTERVAL_SECONDS,
        )
