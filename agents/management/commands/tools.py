"""``manage.py tools import FILE``: register tools from an OpenAPI 3 document or function list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.template.defaultfilters import pluralize

from agents.services import tools_import
from agents.tools.tool_import import ToolImportError


class Command(BaseCommand):
    help = (
        "Import tools from an OpenAPI 3 document or an OpenAI function-calling JSON list. "
        "New tools are disabled until an admin enables them; a re-import updates them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", required=True)
        importer = commands.add_parser("import", help="Create or update tools from FILE.")
        importer.add_argument("file", help="OpenAPI 3 (JSON or YAML) or a JSON function list.")
        importer.add_argument(
            "--base-url", default="", help="Server URL; overrides the document's servers."
        )
        importer.add_argument(
            "--dry-run", action="store_true", help="Check and show the tools; write nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        try:
            result = tools_import(
                raw=raw,
                base_url=options["base_url"],
                origin=path.name,
                dry_run=options["dry_run"],
            )
        except ToolImportError as exc:
            lines = "\n".join(f"  - {problem}" for problem in exc.problems)
            raise CommandError(f"{path.name}: nothing imported:\n{lines}") from exc
        state = {name: "new" for name in result.created}
        state.update({name: "updated" for name in result.updated})
        state.update({name: "unchanged" for name in result.unchanged})
        for spec in result.specs:
            self.stdout.write(
                f"{spec.name:<24} {state[spec.name]:<9} {spec.method:<6} {spec.endpoint_template}"
            )
        verb = "would import" if options["dry_run"] else "imported"
        self.stdout.write(
            f"{verb} {len(result.specs)} tool{pluralize(len(result.specs))} "
            f"({len(result.created)} new, "
            f"{len(result.updated)} updated); new tools are disabled until an admin enables them."
        )
