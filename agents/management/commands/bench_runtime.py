"""`make bench`: this runtime side by side with LangGraph, the Agents SDK and a plain
psycopg loop (bench/peers.py), then runs in flight per process (bench/runtime.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Runtime benchmark, side by side with its peers (scripted model, needs PostgreSQL); "
        "writes bench/results/runtime-latest.{json,md}."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sequential-runs", type=int, default=100)
        parser.add_argument("--concurrent-runs", type=int, default=200)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--in-flight", type=int, default=500)
        parser.add_argument("--latency", type=float, default=1.0)
        parser.add_argument("--pool-size", type=int, default=10)
        parser.add_argument(
            "--sandbox-url", default="", help="a sandbox already served (default: start one)"
        )
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *args: Any, **options: Any) -> None:
        from bench.runtime import bench_runtime, report_write

        result = bench_runtime(
            sequential_runs=options["sequential_runs"],
            concurrent_runs=options["concurrent_runs"],
            rounds=options["rounds"],
            in_flight=options["in_flight"],
            latency_s=options["latency"],
            sandbox_url=options["sandbox_url"],
            pool_size=options["pool_size"],
            progress=lambda message: self.stdout.write(message),
        )
        paths = report_write(
            result,
            output_dir=Path(options["output"]),
            command=" ".join(["manage.py", *sys.argv[1:]]),
        )
        side = result["side_by_side"]
        for mode, rows in side["results"].items():
            self.stdout.write(
                f"{mode}: "
                + "; ".join(
                    f"{impl} {row['steps_per_s']:.0f} steps/s" for impl, row in rows.items()
                )
            )
        flight = result["in_flight"]
        self.stdout.write(
            f"{flight['runs']} runs at {flight['model_latency_s']} s model latency in "
            f"{flight['wall_seconds']:.1f} s"
        )
        for path in paths:
            self.stdout.write(f"wrote {path}")
