"""Benchmark the runtime: steps/s with durable Step rows, and runs in flight per process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Runtime benchmark (scripted model); writes bench/results/runtime-latest.{json,md}."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=200)
        parser.add_argument("--repeats", type=int, default=5)
        parser.add_argument("--in-flight", type=int, default=500)
        parser.add_argument("--latency", type=float, default=1.0)
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *args: Any, **options: Any) -> None:
        from bench.runtime import bench_runtime, report_write

        result = bench_runtime(
            runs=options["runs"],
            repeats=options["repeats"],
            in_flight=options["in_flight"],
            latency_s=options["latency"],
        )
        paths = report_write(
            result,
            output_dir=Path(options["output"]),
            command=" ".join(["manage.py", *sys.argv[1:]]),
        )
        o, f = result["orchestration"], result["in_flight"]
        self.stdout.write(
            f"runtime {o['runtime_steps_per_s_median']:.0f} steps/s vs plain INSERT loop "
            f"{o['baseline_steps_per_s_median']:.0f} steps/s "
            f"(ratio {o['ratio_runtime_to_baseline']:.2f}); "
            f"{f['runs']} runs at {f['model_latency_s']} s model latency in "
            f"{f['wall_seconds']:.1f} s"
        )
        for path in paths:
            self.stdout.write(f"wrote {path}")
