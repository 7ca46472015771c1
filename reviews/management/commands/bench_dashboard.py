"""Benchmark the dashboards over generated traffic; writes bench/results/dashboard-latest.*"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

GOAL_MS = 100


class Command(BaseCommand):
    help = (
        "Load --steps generated steps with COPY (PostgreSQL), rebuild the rollups, and time "
        "every dashboard page and JSON endpoint. Use a database of its own: it adds traffic."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--steps", type=int, default=1_000_000)
        parser.add_argument("--days", type=int, default=60)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--samples", type=int, default=15)
        parser.add_argument(
            "--no-measure",
            action="store_true",
            help="only load the data and rebuild the rollups (demo data for the pages)",
        )
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *args: Any, **options: Any) -> None:
        from agents.services import agent_ensure_default
        from bench.dashboard import (
            dashboard_data_fill,
            endpoint_time,
            latency_p50,
            machine_line,
            report_write,
        )
        from traces.models import (
            RunRollupDaily,
            RunRollupHourly,
            Step,
            StepRollupDaily,
            StepRollupHourly,
            Trace,
        )
        from traces.rollups import rollups_rebuild

        if connection.vendor != "postgresql":
            raise CommandError(
                "bench_dashboard loads data with COPY: set DATABASE_URL to PostgreSQL"
            )
        now = timezone.now()
        agent = agent_ensure_default()
        fill = dashboard_data_fill(
            steps=options["steps"],
            days=options["days"],
            seed=options["seed"],
            now=now,
            agent_id=agent.pk,
            progress=self.stdout.write,
        )
        self.stdout.write(
            f"loaded {fill.steps} steps in {fill.traces} traces in {fill.seconds:.1f} s"
        )
        began = timezone.now()
        rebuilt = rollups_rebuild(since=now - timedelta(days=options["days"] + 1))
        rebuild_s = (timezone.now() - began).total_seconds()
        self.stdout.write(f"rebuilt rollups in {rebuild_s:.1f} s: {rebuilt}")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        if options["no_measure"]:
            return

        load_average = " / ".join(f"{value:.1f}" for value in os.getloadavg())
        client = Client(HTTP_HOST=settings.ALLOWED_HOSTS[0])
        client.force_login(self._ops_user())
        paths = self._paths(reverse)
        endpoints: list[dict[str, Any]] = []
        for path in paths:
            try:
                timing = endpoint_time(client, path, samples=options["samples"])
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            endpoints.append(
                {
                    "path": path,
                    "p50_ms": timing.p50_ms,
                    "p95_ms": timing.p95_ms,
                    "queries": len(timing.queries),
                }
            )
            self.stdout.write(f"{timing.p50_ms:7.1f} ms p50  {timing.p95_ms:7.1f} ms p95  {path}")
        raw_p50, _, _ = latency_p50(lambda: self._raw_failures_query(now), samples=3, warmup=1)
        result: dict[str, Any] = {
            "command": " ".join(["manage.py", *sys.argv[1:]]),
            "machine": machine_line(),
            "run_at": now.isoformat(timespec="seconds"),
            "days": options["days"],
            "samples": options["samples"],
            "goal_ms": GOAL_MS,
            "load_average": load_average,
            "fill": {
                "steps": fill.steps,
                "traces": fill.traces,
                "seconds": fill.seconds,
                "steps_per_s": fill.steps / fill.seconds if fill.seconds else 0,
            },
            "rebuild": {"seconds": rebuild_s, **rebuilt},
            "rollup_rows": {
                "step_hourly": StepRollupHourly.objects.count(),
                "step_daily": StepRollupDaily.objects.count(),
                "run_hourly": RunRollupHourly.objects.count(),
                "run_daily": RunRollupDaily.objects.count(),
            },
            "table_rows": {"steps": Step.objects.count(), "traces": Trace.objects.count()},
            "endpoints": endpoints,
            "goal_met": all(row["p50_ms"] < GOAL_MS for row in endpoints),
            "raw_reference": {"p50_ms": raw_p50, "samples": 3},
        }
        for written in report_write(result, output_dir=Path(options["output"])):
            self.stdout.write(f"wrote {written}")

    @staticmethod
    def _ops_user() -> Any:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from reviews.roles import roles_sync

        roles_sync()
        user, _ = get_user_model().objects.get_or_create(username="bench-dashboard-ops")
        user.groups.add(Group.objects.get(name="ops"))
        return user

    @staticmethod
    def _paths(reverse: Any) -> list[str]:
        overview, failures = reverse("dashboards:overview"), reverse("dashboards:failures")
        kpis, runs = reverse("dashboards:kpis-json"), reverse("dashboards:runs-json")
        series, breakdown = (
            reverse("dashboards:failures-json"),
            reverse("dashboards:breakdown-json"),
        )
        paths = []
        for window in ("24h", "7d", "30d"):
            paths += [f"{overview}?window={window}", f"{failures}?window={window}"]
            paths += [f"{kpis}?window={window}", f"{runs}?window={window}"]
            paths += [f"{series}?window={window}"]
            paths += [
                f"{breakdown}?window={window}&by={by}"
                for by in ("tool", "endpoint", "policy_version")
            ]
        paths += [f"{series}?window=7d&per=day", f"{failures}?window=7d&tool=get_order&origin=all"]
        return paths

    @staticmethod
    def _raw_failures_query(now: Any) -> None:
        from django.db.models import Count
        from django.db.models.functions import TruncHour

        from traces.models import Step

        list(
            Step.objects.filter(created_at__gte=now - timedelta(days=7))
            .exclude(error_type="")
            .annotate(hour=TruncHour("created_at"))
            .values("hour", "error_type")
            .annotate(n=Count("id"))
            .order_by()
        )
