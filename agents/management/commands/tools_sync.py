"""Create Tool rows for the tools declared in code."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.services import agent_ensure_default, tools_sync


class Command(BaseCommand):
    help = "Create rows for code-declared tools (existing rows keep admin edits)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--overwrite", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        tools = tools_sync(agents=[agent_ensure_default()], overwrite=options["overwrite"])
        for tool in tools:
            self.stdout.write(f"{tool.name:<20} {tool.kind:<7} {tool.endpoint_template}")
