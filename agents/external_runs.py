"""The Agent rows that runs ingested from other frameworks (OTLP) are filed under.

``traces.otlp`` ingests the runs but may not import the runtime (DESIGN.md layers), while
``Trace.agent`` is a foreign key to ``agents.Agent``; the agents app registers
``external_agent_ids`` with the ingest when the app registry is ready (``agents.apps``).
"""

from __future__ import annotations

from django.utils.text import slugify

from agents.models import Agent


def external_agent_ids(names: set[str]) -> dict[str, int]:
    """Agents by the slug of their name; an unknown agent is created inactive, without
    tools (it is a label for the external runs, never a chat assistant)."""
    slugs = {name: (slugify(name)[:50] or "otel") for name in names}
    found = dict(Agent.objects.filter(slug__in=set(slugs.values())).values_list("slug", "id"))
    for name, slug in slugs.items():
        if slug not in found:
            agent, _ = Agent.objects.get_or_create(
                slug=slug,
                defaults={
                    "name": name[:100],
                    "description": "Runs ingested over OpenTelemetry (OTLP).",
                    "is_active": False,
                },
            )
            found[slug] = agent.pk
    return {name: found[slug] for name, slug in slugs.items()}
