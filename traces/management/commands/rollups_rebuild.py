"""Recompute the hourly and daily rollups from the trace store (backfill, repair)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from traces.rollups import RetentionHorizonError, rollups_rebuild

_RELATIVE = re.compile(r"^(\d+)([hd])$")


def parse_since(value: str, *, now: datetime, flag: str = "--since") -> datetime:
    """``30d``, ``12h``, an ISO date or an ISO datetime (naive means UTC)."""
    relative = _RELATIVE.match(value)
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        return now - (timedelta(days=amount) if unit == "d" else timedelta(hours=amount))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"{flag} {value!r}: use 30d, 12h or an ISO date") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Delete and recompute every rollup row from the UTC day of --since on, "
        "from the Step and Trace tables."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since", required=True, help="30d, 12h, 2026-11-01 or an ISO datetime"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        since = parse_since(options["since"], now=timezone.now())
        try:
            counts = rollups_rebuild(since=since)
        except RetentionHorizonError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            "rebuilt rollups since {day:%Y-%m-%d}: {steps} steps, {runs} runs, "
            "{step_rows_hourly} hourly step rows, {run_rows_hourly} hourly run rows".format(
                day=since, **counts
            )
        )
