"""Benchmark every list page and API list; writes bench/results/pages-<label>.* (and
pages-latest.*)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test import Client
from django.utils import timezone

# Share of the generated traces (by policy bucket) started by the support user, so that the
# support user's own list has rows to page through.
SUPPORT_BUCKETS = 5


class Command(BaseCommand):
    help = (
        "Load --steps generated steps with COPY (the dashboard benchmark's generator; skip "
        "with --steps 0 to time the data already there) and time every list page and API "
        "list as an ops user and as a support user. Use a database of its own."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--steps", type=int, default=1_000_000)
        parser.add_argument("--days", type=int, default=60)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--samples", type=int, default=15)
        parser.add_argument("--label", default="latest", help="report name: pages-<label>.*")
        parser.add_argument("--output", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *args: Any, **options: Any) -> None:
        from agents.services import agent_ensure_default
        from bench.dashboard import dashboard_data_fill, endpoint_time, machine_line
        from bench.pages import GOAL_MS, pages_report_write
        from traces.models import Step, Trace

        if connection.vendor != "postgresql":
            raise CommandError("bench_pages loads data with COPY: set DATABASE_URL to PostgreSQL")
        now = timezone.now()
        ops, support = self._users()
        if options["steps"]:
            agent = agent_ensure_default()
            fill = dashboard_data_fill(
                steps=options["steps"],
                days=options["days"],
                seed=options["seed"],
                now=now,
                agent_id=agent.pk,
                progress=self.stdout.write,
            )
            self.stdout.write(f"loaded {fill.steps} steps in {fill.traces} traces")
            Trace.objects.filter(
                source="bench", created_by__isnull=True, policy_bucket__lt=SUPPORT_BUCKETS
            ).update(created_by=support)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        sample = Trace.objects.filter(created_by=support).order_by("-created_at").first()
        if sample is None:
            raise CommandError("no traces to time: fill some with --steps")

        load_average = " / ".join(f"{value:.1f}" for value in os.getloadavg())
        clients = {}
        for name, user in (("ops", ops), ("support", support)):
            clients[name] = Client(HTTP_HOST=settings.ALLOWED_HOSTS[0])
            clients[name].force_login(user)
        endpoints: list[dict[str, Any]] = []
        for who, path in self._paths(str(sample.pk)):
            try:
                timing = endpoint_time(clients[who], path, samples=options["samples"])
            except ValueError as exc:
                raise CommandError(f"{exc} to {who}") from exc
            endpoints.append(
                {
                    "path": path,
                    "user": who,
                    "p50_ms": timing.p50_ms,
                    "p95_ms": timing.p95_ms,
                    "queries": len(timing.queries),
                    "step_queries": sum('"traces_step"' in sql for sql in timing.queries),
                }
            )
            self.stdout.write(
                f"{timing.p50_ms:7.1f} ms p50  {timing.p95_ms:7.1f} ms p95  {who:8} {path}"
            )
        result: dict[str, Any] = {
            "command": " ".join(["manage.py", *sys.argv[1:]]),
            "label": options["label"],
            "machine": machine_line(),
            "run_at": now.isoformat(timespec="seconds"),
            "samples": options["samples"],
            "goal_ms": GOAL_MS,
            "load_average": load_average,
            "table_rows": {
                "steps": Step.objects.count(),
                "traces": Trace.objects.count(),
                "support_traces": Trace.objects.filter(created_by=support).count(),
            },
            "endpoints": endpoints,
            "goal_met": all(row["p50_ms"] < GOAL_MS for row in endpoints),
        }
        output = Path(options["output"])
        written = pages_report_write(result, output_dir=output, name=f"pages-{options['label']}")
        if options["label"] != "latest":
            written += pages_report_write(result, output_dir=output, name="pages-latest")
        for report in written:
            self.stdout.write(f"wrote {report}")

    @staticmethod
    def _users() -> tuple[Any, Any]:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from reviews.roles import ROLE_SUPPORT, roles_sync

        roles_sync()
        users = []
        for name, role in (("bench-pages-ops", "ops"), ("bench-pages-support", ROLE_SUPPORT)):
            user, _ = get_user_model().objects.get_or_create(username=name)
            user.groups.add(Group.objects.get(name=role))
            users.append(user)
        return users[0], users[1]

    @staticmethod
    def _paths(trace_id: str) -> list[tuple[str, str]]:
        ops = [
            "/traces/",
            "/traces/?page=2",
            "/traces/?page=200",
            "/traces/?error_type=TIMEOUT",
            "/traces/?error_type=UNAUTHORIZED",
            "/traces/?status=failed",
            "/traces/?outcome=handed_over",
            "/traces/?origin=all",
            "/traces/?origin=replay",
            "/traces/?tool=get_shipping",
            "/traces/?step_error=RATE_LIMITED",
            "/traces/?q=order",
            "/traces/?q=no-such-words",
            "/api/traces/",
            "/api/traces/?offset=500",
            "/api/traces/?status=failed",
            "/api/traces/?error_type=TIMEOUT",
            "/api/steps/",
            "/api/steps/?tool=get_order",
            "/api/steps/?tool=create_return",
            "/api/steps/?error_type=TIMEOUT",
            f"/api/steps/?trace={trace_id}",
            "/traces/jobs/",
            "/reviews/",
            "/policies/",
            "/policies/versions/",
            "/policies/experiments/",
            "/policies/rollouts/",
        ]
        support = [
            "/traces/",
            "/traces/?page=2",
            "/traces/?status=failed",
            "/traces/?q=order",
            "/api/traces/",
            "/api/steps/",
            "/api/steps/?tool=get_order",
        ]
        return [("ops", p) for p in ops] + [("support", p) for p in support]
