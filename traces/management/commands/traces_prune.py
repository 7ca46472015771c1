"""Delete ended runs older than a retention window, with their steps (traces.retention)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from traces.management.commands.rollups_rebuild import parse_since
from traces.retention import DEFAULT_BATCH_SIZE, retention_cutoff, retention_holds, traces_prune


class Command(BaseCommand):
    help = (
        "Delete ended runs created before a cutoff, with their steps, feedback and reflexion "
        "proposals, in batches. Runs a strategy was learned from and runs behind an open "
        "review item are kept. Rollups keep their history."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        when = parser.add_mutually_exclusive_group()
        when.add_argument(
            "--older-than-days",
            type=int,
            help="Delete runs created before UTC midnight this many days ago "
            "(default: TRACE_RETENTION_DAYS).",
        )
        when.add_argument(
            "--before", help="Delete runs created before this ISO date or datetime (UTC)."
        )
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = self._cutoff(options)
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if cutoff > timezone.now():
            raise CommandError(f"the cutoff {cutoff.isoformat()} is in the future")
        holds = ", ".join(retention_holds()) or "none"
        self.stdout.write(
            f"cutoff {cutoff.isoformat()} (ended runs created before it); holds: {holds}"
        )

        def progress(done: int, total: int) -> None:
            self.stdout.write(f"  {done}/{total} runs deleted")

        result = traces_prune(
            before=cutoff,
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            progress=progress,
        )
        verb = "would delete" if result.dry_run else "deleted"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} {result.traces} runs and {result.steps} steps; "
                f"kept {result.held} held by a strategy or an open review item"
            )
        )

    def _cutoff(self, options: dict[str, Any]) -> datetime:
        if options["before"]:
            return parse_since(options["before"], now=timezone.now(), flag="--before")
        days = options["older_than_days"]
        if days is None:
            days = settings.TRACE_RETENTION_DAYS
            if not days:
                raise CommandError(
                    "no retention window: pass --older-than-days N or --before DATE, "
                    "or set TRACE_RETENTION_DAYS"
                )
        if days < 1:
            raise CommandError("--older-than-days must be at least 1")
        return retention_cutoff(days=days)
