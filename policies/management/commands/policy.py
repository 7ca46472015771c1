"""Export, import and diff policy versions as YAML documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policies.documents import (
    PolicyDocumentError,
    policy_diff,
    policy_import,
    policy_import_preview,
    policy_version_get,
)
from policies.models import PolicyVersion
from policies.selectors import policy_version_active


class Command(BaseCommand):
    help = "Policy versions as YAML: export one, import an edited one, diff two."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True)

        export = subcommands.add_parser("export", help="Print a version's YAML document.")
        export.add_argument(
            "--version",
            dest="number",
            type=int,
            default=None,
            help="Version number (default: the active version).",
        )
        export.add_argument("--output", default=None, help="Write to this file, not stdout.")

        import_ = subcommands.add_parser(
            "import", help="Make a YAML document the new active version."
        )
        import_.add_argument("file", help="The YAML document to import.")
        import_.add_argument(
            "--dry-run",
            action="store_true",
            help="Validate and show the diff against the active version; write nothing.",
        )

        diff = subcommands.add_parser("diff", help="Compare two versions.")
        diff.add_argument("old", type=int, help="Version number A.")
        diff.add_argument("new", type=int, help="Version number B.")
        diff.add_argument("--json", action="store_true", help="Print the structured diff.")

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand = options["subcommand"]
        if subcommand == "export":
            self._export(number=options["number"], output=options["output"])
        elif subcommand == "import":
            self._import(path=options["file"], dry_run=options["dry_run"])
        else:
            self._diff(old=options["old"], new=options["new"], as_json=options["json"])

    def _export(self, *, number: int | None, output: str | None) -> None:
        version = _version(number)
        if output is None:
            self.stdout.write(version.document, ending="")
            return
        try:
            Path(output).write_text(version.document, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot write {output}: {exc.strerror or exc}") from exc
        self.stdout.write(f"wrote {version.label} to {output}")

    def _import(self, *, path: str, dry_run: bool) -> None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from exc
        try:
            if dry_run:
                self._import_dry_run(text)
                return
            active_before = policy_version_active()
            version = policy_import(text=text)
        except PolicyDocumentError as exc:
            lines = "\n".join(f"  {message}" for message in exc.messages)
            raise CommandError(
                f"{path} is not a valid policy document ({len(exc.messages)} "
                f"error{'s' if len(exc.messages) != 1 else ''}):\n{lines}"
            ) from exc
        if active_before is not None and version.pk == active_before.pk:
            self.stdout.write(f"No changes: {version.label} already has this content.")
            return
        self.stdout.write(
            f"Imported as {version.label} (active); "
            f"parent {version.parent.label if version.parent else 'none'}."
        )

    def _import_dry_run(self, text: str) -> None:
        preview = policy_import_preview(text=text)
        if preview.is_noop:
            assert preview.active is not None
            self.stdout.write(f"No changes: {preview.active.label} already has this content.")
            return
        self.stdout.write(
            f"Dry run, nothing written. Would create {preview.diff.new_label} "
            f"(parent {preview.active.label if preview.active else 'none'}): "
            f"{preview.diff.summary}; "
            f"{len(preview.to_create)} new and {len(preview.to_update)} edited strategies."
        )
        self.stdout.write(preview.diff.text, ending="")

    def _diff(self, *, old: int, new: int, as_json: bool) -> None:
        diff = policy_diff(old=_version(old), new=_version(new))
        if as_json:
            self.stdout.write(json.dumps(diff.as_dict(), indent=2, ensure_ascii=False))
        elif diff.is_empty:
            self.stdout.write(f"No differences between {diff.old_label} and {diff.new_label}.")
        else:
            self.stdout.write(diff.text, ending="")


def _version(number: int | None) -> PolicyVersion:
    version = policy_version_active() if number is None else policy_version_get(number=number)
    if version is not None:
        return version
    if number is not None:
        raise CommandError(f"Policy version v{number} does not exist.")
    if PolicyVersion.objects.exists():
        raise CommandError("No policy version is active; pass --version N.")
    raise CommandError("No policy version exists yet.")
