from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from agents import checks  # noqa: F401  (registers the system checks)
        from agents.external_runs import external_agent_ids
        from traces.otlp import external_agent_resolver_register

        # Runs ingested over OTLP are filed under Agent rows; the store may not import them.
        external_agent_resolver_register(external_agent_ids)
