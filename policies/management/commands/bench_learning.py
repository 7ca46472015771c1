"""Run the learning experiment (control vs treatment on a held-out split)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

# A real model on 2 cores takes minutes per task: a small run is allowed, with a warning.
MIN_TASKS = 12
POWERED_TASKS = 200


class Command(BaseCommand):
    help = (
        "Learning experiment: control (loop off) vs treatment (loop learns on the train split) "
        "on the same held-out tasks; writes JSON + Markdown to bench/results/. It resets the "
        "policy tree and fault rules of the database it runs on: use a dedicated database "
        "(make bench-learning does)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", type=int, default=2026)
        parser.add_argument("--tasks", type=int, default=240)
        parser.add_argument("--train-fraction", type=float, default=0.4)
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument(
            "--approval",
            choices=["auto", "standin"],
            default="auto",
            help="auto: approve after a passed replay; standin: a cautious reviewer stand-in.",
        )
        parser.add_argument(
            "--hint-follow",
            type=float,
            default=None,
            metavar="RATE",
            help="Simulated model: probability of heeding a strategy hint "
            "(default: LLM_SIM_HINT_FOLLOW_RATE).",
        )
        parser.add_argument(
            "--hint-follow-sensitivity",
            type=float,
            nargs="*",
            default=[0.5],
            metavar="RATE",
            help="Simulated model: repeat both arms at each of these hint-follow rates and "
            "report each headline (default: 0.5; give the flag with no rate to skip).",
        )
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))
        parser.add_argument(
            "--yes", action="store_true", help="Confirm that this database's policies may be reset."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from bench.learning import experiment_run

        if not options["yes"]:
            raise CommandError(
                "bench_learning deletes every strategy, policy version, review item and fault "
                "rule of this database. Run it on a dedicated database with --yes "
                "(`make bench-learning` does both)."
            )
        if options["tasks"] < MIN_TASKS:
            raise CommandError(
                f"Use at least {MIN_TASKS} tasks: every task kind needs one in each split."
            )
        if options["tasks"] < POWERED_TASKS:
            held_out = round(options["tasks"] * (1 - options["train_fraction"]))
            self.stderr.write(
                self.style.WARNING(
                    f"warning: {options['tasks']} tasks ({held_out} held out) have little "
                    f"statistical power: only a large difference between the arms will be "
                    f"significant (use {POWERED_TASKS}+ when the model is fast enough; the "
                    "report's confidence intervals say how wide the uncertainty is)."
                )
            )
        if not 0.1 <= options["train_fraction"] <= 0.9:
            raise CommandError("--train-fraction must be between 0.1 and 0.9.")
        for rate in [options["hint_follow"], *options["hint_follow_sensitivity"]]:
            if rate is not None and not 0.0 <= rate <= 1.0:
                raise CommandError(f"A hint-follow rate is a probability in [0, 1], got {rate}.")
        report = experiment_run(
            seed=options["seed"],
            tasks_count=options["tasks"],
            train_fraction=options["train_fraction"],
            concurrency=max(1, options["concurrency"]),
            output_dir=Path(options["output"]),
            command=" ".join(["manage.py", *sys.argv[1:]]),
            progress=lambda line: self.stdout.write(line),
            approval=options["approval"],
            hint_follow_rate=options["hint_follow"],
            sensitivity_hint_follow_rates=[
                rate
                for rate in options["hint_follow_sensitivity"]
                if rate != options["hint_follow"]
            ],
        )
        c = report["arms"]["control"]["heldout"]
        t = report["arms"]["treatment"]["heldout"]
        cmp = report["comparison"]
        self.stdout.write("")
        rate = report["config"]["llm_sim_hint_follow_rate"]
        self.stdout.write(
            f"held-out success: control {c['success_rate']:.1%} (n={c['n']}) -> treatment "
            f"{t['success_rate']:.1%} (n={t['n']}); difference {cmp['difference']:+.1%}, "
            f"McNemar b={cmp['mcnemar_b']} c={cmp['mcnemar_c']} p = {cmp['mcnemar_p']:.2e}"
            + (f" (hint-follow {rate:g})" if rate is not None else "")
        )
        for extra in report["sensitivity"]:
            x = extra["comparison"]
            self.stdout.write(
                f"  at hint-follow {extra['hint_follow_rate']:g}: control "
                f"{extra['control']['success_rate']:.1%} -> treatment "
                f"{extra['treatment']['success_rate']:.1%}; difference {x['difference']:+.1%}, "
                f"McNemar b={x['mcnemar_b']} c={x['mcnemar_c']} p = {x['mcnemar_p']:.2e}"
            )
        for path in report["files"]:
            self.stdout.write(f"wrote {path}")
