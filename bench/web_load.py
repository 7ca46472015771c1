"""The web app under load: Locust with N users on loopback against the production shape.

    make bench-web            # = python -m bench.web_load --users 50 --seconds 60

It serves the app the way the production shape runs (``bin/serve`` with PostgreSQL, the
Redis broker, a Celery worker, production settings; a database and Redis database of its
own, dropped afterwards), seeds the demo data, then runs the locust CLI headless with
``bench/locustfile.py``: each user logs in to the console and, with a think time of 0.5 to
1.5 s, opens the overview (3 in 7), the trace list (3 in 7) or starts a run through the API
(1 in 7; the run itself goes on in the worker, the request returns 202). Reports p50, p95,
p99 and errors per endpoint from locust's own statistics, with the machine and the
command, to bench/results/web-load-latest.{md,json}.

Locust is a benchmark-only dependency (``pip install -e '.[load]'``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
LOCUST = Path(sys.executable).parent / "locust"


def locust_run(
    url: str, *, users: int, seconds: int, env: dict[str, str], csv_prefix: Path
) -> None:
    subprocess.run(
        [
            str(LOCUST),
            "-f",
            str(ROOT / "bench" / "locustfile.py"),
            "--headless",
            "--users",
            str(users),
            "--spawn-rate",
            str(max(1, users // 5)),
            "--run-time",
            f"{seconds}s",
            "--host",
            url,
            "--csv",
            str(csv_prefix),
            "--only-summary",
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,  # locust exits 1 when any request failed: the report says which
        timeout=seconds + 180,
    )


def stats_read(csv_prefix: Path) -> list[dict[str, Any]]:
    """Locust's per-endpoint statistics (``<prefix>_stats.csv``), the aggregate last."""
    rows = []
    with Path(f"{csv_prefix}_stats.csv").open() as handle:
        for row in csv.DictReader(handle):
            requests = int(row["Request Count"])
            failures = int(row["Failure Count"])
            rows.append(
                {
                    "name": row["Name"] or "all",
                    "method": row["Type"],
                    "requests": requests,
                    "failures": failures,
                    "error_rate": failures / requests if requests else 0.0,
                    "p50_ms": float(row["50%"] or 0),
                    "p95_ms": float(row["95%"] or 0),
                    "p99_ms": float(row["99%"] or 0),
                    "rps": float(row["Requests/s"] or 0),
                }
            )
    return rows


def failures_read(csv_prefix: Path) -> list[dict[str, str]]:
    path = Path(f"{csv_prefix}_failures.csv")
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def report_write(result: dict[str, Any], *, command: str) -> list[Path]:
    lines = [
        "# Web under load",
        "",
        f"- command: `{command}`",
        f"- machine: {result['machine']['platform']}, {result['machine']['cpus']} CPUs, "
        f"Python {result['machine']['python']}; load average at start "
        f"{result['machine']['load_average']}; locust, the app, its worker, PostgreSQL and "
        "Redis all on this machine",
        f"- served: the production shape (`bin/serve`: daphne, a Celery worker, PostgreSQL, "
        f"Redis, production settings), {result['users']} users for {result['seconds']} s "
        "after a spawn ramp, each with a 0.5-1.5 s think time",
        f"- run at: {result['started_at']}",
        "",
        "| endpoint | requests | errors | p50 ms | p95 ms | p99 ms | req/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["stats"]:
        lines.append(
            f"| {(row['method'] + ' ' + row['name']).strip()} | {row['requests']} | "
            f"{row['failures']} "
            f"({row['error_rate']:.1%}) | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} | "
            f"{row['p99_ms']:.0f} | {row['rps']:.1f} |"
        )
    if result["failures"]:
        lines += ["", "Errors:", ""]
        for failure in result["failures"]:
            lines.append(
                f"- {failure.get('Method')} {failure.get('Name')}: {failure.get('Error')} "
                f"x{failure.get('Occurrences')}"
            )
    lines += [
        "",
        "Percentiles are locust's, over every request of the run (login included, as its "
        "own row). The run creation row times the API's 202; the runs then go on in the "
        "worker and are not waited for.",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS / "web-load-latest.json", RESULTS / "web-load-latest.md"]
    paths[0].write_text(json.dumps({"command": command, **result}, indent=2))
    paths[1].write_text("\n".join(lines))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument(
        "--redis-db", type=int, default=14, help="a Redis database of its own (flushed)"
    )
    args = parser.parse_args(argv)
    if not LOCUST.exists():
        print("locust is not installed: pip install -e '.[load]'", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    # The launcher the end-to-end tests use: bin/serve as a user's shell starts it.
    from tests.served import app_teardown, production_app

    workdir = Path(tempfile.mkdtemp(prefix="agentops-webload-"))
    app = production_app(workdir, name_suffix="_webload", redis_db=args.redis_db)
    # Every simulated user posts runs with one token: no per-user limit on runs in flight.
    app.env["AGENT_RUNS_IN_FLIGHT_PER_USER"] = "0"
    load = os.getloadavg()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        app.start()
        env = {
            "WEB_LOAD_USER": "ops",
            "WEB_LOAD_PASSWORD": "ops-demo",
            "WEB_LOAD_TOKEN": app.api_token("ops"),
            "WEB_LOAD_ORDER": app.demo_order,
        }
        prefix = workdir / "locust"
        locust_run(app.url, users=args.users, seconds=args.seconds, env=env, csv_prefix=prefix)
        stats = stats_read(prefix)
        failures = failures_read(prefix)
    finally:
        app_teardown(app)
    result = {
        "started_at": started,
        "users": args.users,
        "seconds": args.seconds,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_average": " / ".join(f"{v:.1f}" for v in load),
        },
        "stats": stats,
        "failures": failures,
    }
    command = "python -m bench.web_load " + " ".join(argv or sys.argv[1:])
    for path in report_write(result, command=command.strip()):
        print(path)
    print((RESULTS / "web-load-latest.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
