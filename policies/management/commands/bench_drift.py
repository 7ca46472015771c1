"""Run the drift gauntlet: the learning loop against contract changes, one at a time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

MIN_TASKS = 10


class Command(BaseCommand):
    help = (
        "Drift gauntlet: for each contract drift (sandbox ContractDrift rows) on its own, "
        "control (loop off) vs treatment (loop learns on train tasks) on the same held-out "
        "tasks, paired with an exact McNemar test; writes JSON + Markdown to bench/results/. "
        "It resets the policy tree, fault rules and drifts of the database it runs on: use a "
        "dedicated database (make bench-drift does)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", type=int, default=2026)
        parser.add_argument("--tasks", type=int, default=60, help="Tasks per drift.")
        parser.add_argument("--train-fraction", type=float, default=0.4)
        parser.add_argument("--concurrency", type=int, default=6)
        parser.add_argument(
            "--only", nargs="*", default=None, help="Run only these drifts (by name)."
        )
        parser.add_argument(
            "--custom",
            action="append",
            default=[],
            metavar="JSON",
            help="Also run this drift, one ContractDrift row as JSON (repeatable); with "
            "--custom and no --only, only the custom drifts run.",
        )
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))
        parser.add_argument(
            "--yes", action="store_true", help="Confirm that this database's policies may be reset."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import json

        from bench.drift import GAUNTLET, custom_drift, gauntlet_run

        if not options["yes"]:
            raise CommandError(
                "bench_drift deletes every strategy, policy version, review item, fault rule "
                "and contract drift of this database. Run it on a dedicated database with "
                "--yes (`make bench-drift` does both)."
            )
        if options["tasks"] < MIN_TASKS:
            raise CommandError(f"Use at least {MIN_TASKS} tasks per drift.")
        if not 0.1 <= options["train_fraction"] <= 0.9:
            raise CommandError("--train-fraction must be between 0.1 and 0.9.")
        names = {drift.name for drift in GAUNTLET}
        unknown = sorted(set(options["only"] or ()) - names)
        if unknown:
            raise CommandError(
                f"unknown drift(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        custom = []
        for index, text in enumerate(options["custom"], 1):
            try:
                custom.append(custom_drift(json.loads(text), index))
            except ValueError as error:  # JSONDecodeError included
                raise CommandError(f"--custom {text!r}: {error}") from None
        report = gauntlet_run(
            seed=options["seed"],
            tasks_per_drift=options["tasks"],
            train_fraction=options["train_fraction"],
            concurrency=max(1, options["concurrency"]),
            only=options["only"],
            output_dir=Path(options["output"]),
            command=" ".join(["manage.py", *sys.argv[1:]]),
            progress=lambda line: self.stdout.write(line),
            custom=custom,
        )
        self.stdout.write("")
        self.stdout.write(report["headline"])
        for path in report["files"]:
            self.stdout.write(f"wrote {path}")
