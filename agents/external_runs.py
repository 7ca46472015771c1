"""The Agent rows that runs ingested from other frameworks (OTLP) are filed under.

``traces.otlp`` ingests the runs but may not import the runtime (DESIGN.md layers), while
``Trace.agent`` is a foreign key to ``agents.Agent``; the agents app registers
``external_agent_ids`` with the ingest when the app registry is ready (``agents.apps``).

An exporter names the same few agents in every request, so each process remembers the
ids it resolved for ``EXTERNAL_AGENT_CACHE_SECONDS``: the ingest then spends no query on
them. A saved or deleted Agent empties this process's memory at once. Another process
may file runs under a renamed agent for up to that long; one that holds the id of a
deleted agent fails its commit on the foreign key, and the ingest retries with
``fresh=True``, which reads the table again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils.text import slugify

from agents.models import Agent

EXTERNAL_AGENT_CACHE_SECONDS = 60.0
EXTERNAL_AGENT_CACHE_SIZE = 1024
_known: dict[str, tuple[int, float]] = {}  # slug -> (agent id, monotonic expiry)
_known_lock = threading.Lock()


def external_agent_ids(names: set[str], *, fresh: bool = False) -> dict[str, int]:
    """Agents by the slug of their name; an unknown agent is created inactive, without
    tools (it is a label for the external runs, never a chat assistant). ``fresh``: read
    every one from the database, not from this process's memory."""
    slugs = {name: (slugify(name)[:50] or "otel") for name in names}
    now = time.monotonic()
    found: dict[str, int] = {}
    if not fresh:
        with _known_lock:
            for slug in set(slugs.values()):
                entry = _known.get(slug)
                if entry is not None and entry[1] > now:
                    found[slug] = entry[0]
    missing = set(slugs.values()) - found.keys()
    if missing:
        read = dict(Agent.objects.filter(slug__in=missing).values_list("slug", "id"))
        for name, slug in slugs.items():
            if slug in missing and slug not in read:
                agent, _ = Agent.objects.get_or_create(
                    slug=slug,
                    defaults={
                        "name": name[:100],
                        "description": "Runs ingested over OpenTelemetry (OTLP).",
                        "is_active": False,
                    },
                )
                read[slug] = agent.pk
        found.update(read)
        _remember(read, now + EXTERNAL_AGENT_CACHE_SECONDS)
    return {name: found[slug] for name, slug in slugs.items()}


def _remember(ids: dict[str, int], expiry: float) -> None:
    with _known_lock:
        if len(_known) + len(ids) > EXTERNAL_AGENT_CACHE_SIZE:
            _known.clear()  # many agent names: start over rather than grow without bound
        for slug, pk in ids.items():
            _known[slug] = (pk, expiry)


def external_agent_ids_forget() -> None:
    """Empty this process's memory of external agents (tests, and any change of Agent)."""
    with _known_lock:
        _known.clear()


@receiver(post_save, sender=Agent, dispatch_uid="external_agent_ids_forget_saved")
@receiver(post_delete, sender=Agent, dispatch_uid="external_agent_ids_forget_deleted")
def _agent_changed(**kwargs: Any) -> None:
    external_agent_ids_forget()
