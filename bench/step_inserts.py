"""Step insert rate by table size: the recorder's batch insert into a big Step table and
into small ones, in the same run.

    python -m bench.step_inserts --target 10m=postgres://.../big --target empty=postgres://.../empty

Each repetition runs, for every target in turn, a child process against that database
(``DATABASE_URL``) that creates ``--rows`` generated steps' traces (not timed), then inserts
the steps the way the runtime does: ``traces.recorder._insert_batch`` (one transaction:
``Step.objects.bulk_create`` plus the rollup upsert), ``--batch`` steps at a time, the
batch mixing many runs as the recorder's group commit does, ``created_at`` = now. Tool
steps carry an idempotency key (a SHA-256 hex, as the runtime's). The child reports rows/s;
the parent reports the median of ``--repeats`` per target and the Step table's indexes
(count and size) on each. Targets alternate within a repetition so that they share the
machine's load. The rows stay in the tables (``source = "bench-insert"``).

Written to bench/results/step-inserts-<label>.{json,md} and step-inserts-latest.*.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


# The recorder's Step INSERT: alone, or with the batch's rollup upserts (PostgreSQL).
_STEP_INSERTS = ('INSERT INTO "traces_step"', 'WITH s AS (INSERT INTO "traces_step"')


def _measure(*, rows: int, batch: int, seed: int) -> dict[str, Any]:
    """In a child with Django set up on the target database: insert ``rows`` steps."""
    from django.db import connection
    from django.utils import timezone

    from agents.services import agent_ensure_default
    from bench.dashboard import _generate
    from traces.models import Step, Trace
    from traces.recorder import _insert_batch

    agent = agent_ensure_default()
    now = timezone.now()
    traces: list[Trace] = []
    runs: list[list[Step]] = []
    for trace, step_rows in _generate(steps=rows, days=1, seed=seed, now=now, agent_id=agent.pk):
        trace["source"] = "bench-insert"
        traces.append(Trace(**trace))
        steps = []
        for row in step_rows:
            step = Step(**row)
            if step.action_type == "tool":
                step.idempotency_key = hashlib.sha256(
                    f"{row['trace_id']}:{row['step_number']}".encode()
                ).hexdigest()
            steps.append(step)
        runs.append(steps)
    Trace.objects.bulk_create(traces, batch_size=2000)
    # Runs in flight each add a step in turn: a batch holds the n-th step of many runs.
    ordered: list[Step] = []
    depth = max(len(r) for r in runs)
    for n in range(depth):
        ordered.extend(r[n] for r in runs if n < len(r))
    ordered = ordered[:rows]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM traces_step")
        steps_before = cursor.fetchone()[0]
    batch_ms: list[float] = []
    statement_s = 0.0

    def statement_time(execute: Any, sql: str, *args: Any) -> Any:
        # The Step INSERT as the database runs it (rows, index entries, FK checks), apart
        # from the Python side of the insert. On PostgreSQL the batch's rollup upserts
        # ride in the same statement (WITH s AS (INSERT ...), u0 AS (...)).
        nonlocal statement_s
        if not sql.startswith(_STEP_INSERTS):
            return execute(sql, *args)
        t0 = time.perf_counter()
        try:
            return execute(sql, *args)
        finally:
            statement_s += time.perf_counter() - t0

    began = time.perf_counter()
    for start in range(0, len(ordered), batch):
        chunk = ordered[start : start + batch]
        at = timezone.now()
        for step in chunk:
            step.created_at = at
            step.started_at = at - timedelta(milliseconds=step.latency_ms)
        t0 = time.perf_counter()
        with connection.execute_wrapper(statement_time):
            _insert_batch(chunk)
        batch_ms.append((time.perf_counter() - t0) * 1000)
    seconds = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelname, pg_relation_size(i.indexrelid) FROM pg_stat_user_indexes i "
            "WHERE i.relname = 'traces_step' ORDER BY 1"
        )
        indexes = [{"name": name, "bytes": size} for name, size in cursor.fetchall()]
        cursor.execute("SELECT pg_relation_size('traces_step')")
        table_bytes = cursor.fetchone()[0]
    return {
        "steps_before": steps_before,
        "rows": len(ordered),
        "seconds": seconds,
        "rows_per_s": len(ordered) / seconds,
        "batch_p50_ms": statistics.median(batch_ms),
        "insert_statement_s": statement_s,
        "insert_statement_rows_per_s": len(ordered) / statement_s,
        "batches": len(batch_ms),
        "table_bytes": table_bytes,
        "indexes": indexes,
    }


def _child(args: argparse.Namespace) -> int:
    from config.shape import settings_select

    settings_select()
    import django

    django.setup()
    print(json.dumps(_measure(rows=args.rows, batch=args.batch, seed=args.seed)))
    return 0


def _run_child(url: str, *, rows: int, batch: int, seed: int) -> dict[str, Any]:
    env = dict(os.environ, DATABASE_URL=url)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.step_inserts",
            "--child",
            f"--rows={rows}",
            f"--batch={batch}",
            f"--seed={seed}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"the run on {urlparse(url).path} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:,.0f} MB"


def report_write(result: dict[str, Any], *, output_dir: Path, name: str) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = output_dir / f"{name}.json", output_dir / f"{name}.md"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Step insert rate by table size",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']}",
        f"- load average when it began: {result['load_average']} (the CPUs are shared)",
        f"- run at: {result['run_at']}",
        f"- each run: {result['rows']:,} steps inserted with the recorder's `_insert_batch` "
        f"(bulk_create + rollup upsert, one transaction) in batches of {result['batch']}; "
        f"median of {result['repeats']} runs per table, the tables taking turns",
        "",
        "| table | steps before | rows/s (median) | each run's rows/s | batch p50 ms "
        "| INSERT statement alone, rows/s | indexes | index size | table size |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for target in result["targets"]:
        last = target["runs"][-1]
        each = ", ".join(f"{r['rows_per_s']:,.0f}" for r in target["runs"])
        lines.append(
            f"| {target['name']} | {target['runs'][0]['steps_before']:,} "
            f"| {target['rows_per_s_median']:,.0f} "
            f"| {each} "
            f"| {statistics.median(r['batch_p50_ms'] for r in target['runs']):.1f} "
            f"| {target['insert_statement_rows_per_s_median']:,.0f} "
            f"| {len(last['indexes'])} | {_mb(sum(i['bytes'] for i in last['indexes']))} "
            f"| {_mb(last['table_bytes'])} |"
        )
    lines += [
        "",
        "rows/s: steps inserted per second of the whole `_insert_batch` (Python side, "
        "rollup upsert, commit). INSERT statement alone: the Step INSERT's own time as the "
        "client waits for it (the database writing the rows and every index entry, and on "
        "PostgreSQL the rollup upserts that share its statement): the part that would grow "
        "with the table if index maintenance got dearer.",
    ]
    big = max(result["targets"], key=lambda t: t["runs"][0]["steps_before"])
    lines += ["", f"Indexes on `traces_step` at {big['name']} (after the runs):", ""]
    lines += [f"- `{i['name']}`: {_mb(i['bytes'])}" for i in big["runs"][-1]["indexes"]]
    md_path.write_text("\n".join(lines) + "\n")
    return [md_path, json_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--target", action="append", default=[], help="NAME=DATABASE_URL (repeat; 2 or more)"
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="the recorder's max batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--label", default="latest")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    targets = [t.split("=", 1) for t in args.target]
    if len(targets) < 2 or any(len(t) != 2 for t in targets):
        parser.error("give two or more --target NAME=DATABASE_URL")
    load_average = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in targets}
    for repeat in range(args.repeats):
        for name, url in targets:
            run = _run_child(url, rows=args.rows, batch=args.batch, seed=args.seed + repeat)
            runs[name].append(run)
            print(f"{name}: {run['steps_before']:,} steps before, {run['rows_per_s']:,.0f} rows/s")
    named = " ".join(f"--target {name}=…/{urlparse(url).path.lstrip('/')}" for name, url in targets)
    result = {
        "command": f"python -m bench.step_inserts {named} --rows {args.rows} "
        f"--batch {args.batch} --repeats {args.repeats}",
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "load_average": load_average,
        "run_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": args.rows,
        "batch": args.batch,
        "repeats": args.repeats,
        "targets": [
            {
                "name": name,
                "rows_per_s_median": statistics.median(r["rows_per_s"] for r in runs[name]),
                "insert_statement_rows_per_s_median": statistics.median(
                    r["insert_statement_rows_per_s"] for r in runs[name]
                ),
                "runs": runs[name],
            }
            for name, _ in targets
        ],
    }
    output = Path(args.output)
    written = report_write(result, output_dir=output, name=f"step-inserts-{args.label}")
    if args.label != "latest":
        written += report_write(result, output_dir=output, name="step-inserts-latest")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
