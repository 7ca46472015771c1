"""Print the structured-output dialect the configured OpenAI-compatible server takes."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.llm import structured
from agents.llm.base import LLMError


class Command(BaseCommand):
    help = (
        "Probe the LLM server (LLM_BASE_URL, LLM_MODEL) for the structured-output dialect it "
        "enforces, cache the answer in var/ and print it (docs/models.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--refresh", action="store_true", help="Probe again even when a result is cached."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.LLM_BACKEND != "openai":
            raise CommandError(
                f"LLM_BACKEND is {settings.LLM_BACKEND!r}: the probe needs LLM_BACKEND=openai "
                "and LLM_BASE_URL pointing at an OpenAI-compatible server."
            )
        from agents.llm.factory import llm_client_build
        from agents.llm.openai_backend import OpenAILLM

        client = llm_client_build()
        assert isinstance(client, OpenAILLM)
        key = structured.cache_key(client.base_url, client.model)
        cached = structured.cached_dialect(key)
        if options["refresh"] or cached is None:
            try:
                dialect = async_to_sync(client.probe)()
            except LLMError as exc:
                raise CommandError(str(exc)) from exc
            source = "probed now"
        else:
            dialect, source = cached, f"cached in {structured.cache_path()}"
        self.stdout.write(f"server: {client.base_url or 'https://api.openai.com/v1'}")
        self.stdout.write(f"model: {client.model}")
        for tried, result in structured.cache_entry(key).get("tried", {}).items():
            self.stdout.write(f"  {tried:<12} {result}")
        self.stdout.write(f"dialect: {dialect} ({source})")
        setting = settings.LLM_STRUCTURED_OUTPUT
        if setting != "auto" and setting != dialect:
            self.stdout.write(
                self.style.WARNING(
                    f"LLM_STRUCTURED_OUTPUT={setting} overrides the probe: requests use {setting}."
                )
            )
