"""Dashboard benchmark: generated traffic loaded with COPY, rollups built by the rebuild
code the app uses, then the p50 latency of every dashboard page and JSON endpoint.

The generated traffic follows the shapes seen in production-like runs: a daily cycle with
an afternoon peak and quieter weekends; 1-4 ReAct rounds per run; a tool mix led by order
look-ups; about one tool call in eight failing, mostly RESOURCE_NOT_FOUND; policy versions
that take over through a canary; a new error type that appears only in the last days; and
5 % replays and 3 % experiments that the dashboards must leave out.
"""

from __future__ import annotations

import json
import math
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import connection, models

from traces.models import Step, Trace

TOOLS: tuple[tuple[str, str, float], ...] = (
    # name, endpoint template ({id} is filled per call), share of tool calls
    ("get_order", "/sandbox/api/orders/W{id}", 0.35),
    ("get_sku", "/sandbox/api/skus/SKU-{id}", 0.20),
    ("get_price", "/sandbox/api/prices/SKU-{id}", 0.15),
    ("search_faq", "/sandbox/api/faq/search", 0.15),
    ("get_shipping", "/sandbox/api/shipping/W{id}", 0.10),
    ("create_return", "/sandbox/api/returns", 0.05),
)
TOOL_ERRORS: tuple[tuple[str, float], ...] = (
    ("RESOURCE_NOT_FOUND", 0.35),
    ("TIMEOUT", 0.15),
    ("INVALID_PARAMETER", 0.15),
    ("INTERNAL_SERVER_ERROR", 0.10),
    ("TYPE_MISMATCH", 0.10),
    ("RATE_LIMITED", 0.08),
    ("MISSING_REQUIRED_FIELD", 0.07),
)
TOOL_FAILURE_RATE = 0.12
MODEL_FORMAT_ERROR_RATE = 0.02
# Appears only in the last days of the period: "new error types" has one to show.
LATE_ERROR = ("UNAUTHORIZED", 5, 0.03)
BASE_URL = "http://sandbox.bench:8000"
PROMPT_PRICE = Decimal("0.0000005")
COMPLETION_PRICE = Decimal("0.0000015")


@dataclass(frozen=True)
class FillResult:
    traces: int
    steps: int
    seconds: float


def _weighted(rng: random.Random, options: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([name for name, _ in options], [w for _, w in options])[0]


def _arrival_times(
    rng: random.Random, *, runs: int, start: datetime, end: datetime
) -> list[datetime]:
    """Run start times with a daily cycle (peak ~14:00 UTC) and quieter weekends."""
    span = (end - start).total_seconds()
    times: list[datetime] = []
    while len(times) < runs:
        moment = start + timedelta(seconds=rng.random() * span)
        hour = moment.hour + moment.minute / 60
        weight = 0.55 + 0.45 * math.cos((hour - 14) / 24 * 2 * math.pi)
        if moment.weekday() >= 5:
            weight *= 0.6
        if rng.random() < weight:
            times.append(moment)
    times.sort()
    return times


def _version_for(fraction: float, bucket: int) -> str:
    """v1 → v2 → v3, each taking over through a 25 % canary (buckets below 25 first)."""
    if fraction < 0.35:
        return "v1"
    if fraction < 0.42:
        return "v2" if bucket < 25 else "v1"
    if fraction < 0.72:
        return "v2"
    if fraction < 0.78:
        return "v3" if bucket < 25 else "v2"
    return "v3"


def _generate(
    *, steps: int, days: int, seed: int, now: datetime, agent_id: int
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(trace row, its step rows) until about ``steps`` steps are generated."""
    rng = random.Random(seed)
    start = now - timedelta(days=days)
    # About 3.4 steps per run (1.4 rounds of reasoning, call, sometimes a reflection, and
    # the final step): enough runs to reach ``steps``, spread over the whole period.
    runs_needed = max(1, round(steps / 3.3))
    late_from = now - timedelta(days=LATE_ERROR[1])
    written = 0
    tool_names = tuple((name, share) for name, _, share in TOOLS)
    templates = {name: template for name, template, _ in TOOLS}
    for created in _arrival_times(rng, runs=runs_needed, start=start, end=now):
        if written >= steps:
            return
        trace_id = uuid.uuid4()  # fresh ids: a second fill adds to the first
        bucket = trace_id.int % 100
        roll = rng.random()
        origin = (
            Trace.Origin.REPLAY
            if roll < 0.05
            else Trace.Origin.EXPERIMENT
            if roll < 0.08
            else Trace.Origin.CUSTOMER
        )
        version = _version_for((created - start) / (now - start), bucket)
        at = created + timedelta(milliseconds=rng.randint(50, 400))
        rows: list[dict[str, Any]] = []
        failed_calls = 0
        last_call_ok = True
        rounds = min(4, 1 + int(rng.expovariate(1.1)))
        for round_number in range(1, rounds + 1):
            prompt, completion = max(200, int(rng.gauss(900, 220))), max(10, int(rng.gauss(60, 20)))
            latency = int(rng.lognormvariate(6.2, 0.5))
            at += timedelta(milliseconds=latency)
            format_error = rng.random() < MODEL_FORMAT_ERROR_RATE
            rows.append(
                {
                    "phase": "reasoning",
                    "round_number": round_number,
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "cost_usd": prompt * PROMPT_PRICE + completion * COMPLETION_PRICE,
                    "latency_ms": latency,
                    "ok": not format_error,
                    "error_type": "MODEL_FORMAT_ERROR" if format_error else "",
                    "created_at": at,
                }
            )
            if format_error:
                continue
            tool = _weighted(rng, tool_names)
            endpoint = BASE_URL + templates[tool].replace("{id}", str(rng.randint(1000, 999_999)))
            error = ""
            if at >= late_from and tool == "get_order" and rng.random() < LATE_ERROR[2]:
                error = LATE_ERROR[0]
            elif rng.random() < TOOL_FAILURE_RATE:
                error = _weighted(rng, TOOL_ERRORS)
            latency = 15_000 if error == "TIMEOUT" else int(rng.lognormvariate(4.5, 0.6))
            at += timedelta(milliseconds=latency)
            last_call_ok = not error
            failed_calls += 1 if error else 0
            rows.append(
                {
                    "phase": "action",
                    "round_number": round_number,
                    "action_type": "tool",
                    "tool_name": tool,
                    "endpoint": endpoint,
                    "status_code": {"RESOURCE_NOT_FOUND": 404, "UNAUTHORIZED": 401}.get(
                        error, 500 if error else 200
                    ),
                    "ok": not error,
                    "error_type": error,
                    "latency_ms": latency,
                    "response_size": rng.randint(200, 4000),
                    "created_at": at,
                }
            )
            if error:
                at += timedelta(milliseconds=5)
                rows.append(
                    {
                        "phase": "reflection",
                        "round_number": round_number,
                        "created_at": at,
                    }
                )
            elif rng.random() < 0.6:
                break
        if last_call_ok or rng.random() < 0.5:
            status, outcome, final_phase = "finished", "answered_from_data", "final"
        elif rng.random() < 0.6:
            status, outcome, final_phase = "fallback", "handed_over", "fallback"
        else:
            status, outcome, final_phase = "failed", "failed", "stopped"
        at += timedelta(milliseconds=int(rng.lognormvariate(6.0, 0.4)))
        rows.append({"phase": final_phase, "round_number": rounds, "created_at": at})
        for number, row in enumerate(rows, start=1):
            row["step_number"] = number
            row["trace_id"] = trace_id
            row["started_at"] = row["created_at"] - timedelta(milliseconds=row.get("latency_ms", 0))
        trace = {
            "id": trace_id,
            "query": "Where is my order?",
            "query_hash": "0" * 32,
            "agent_id": agent_id,
            "source": "bench",
            "origin": origin,
            "llm_backend": "simulated",
            "policy_version": version,
            "policy_bucket": bucket,
            "status": status,
            "outcome": outcome,
            "error_type": ""
            if status == "finished"
            else next((r["error_type"] for r in reversed(rows) if r.get("error_type")), ""),
            "total_steps": len(rows),
            "total_latency_ms": sum(r.get("latency_ms", 0) for r in rows),
            "total_tokens": sum(
                r.get("prompt_tokens", 0) + r.get("completion_tokens", 0) for r in rows
            ),
            "total_cost_usd": sum((r.get("cost_usd", Decimal(0)) for r in rows), Decimal(0)),
            "failed_steps": sum(not r.get("ok", True) for r in rows),
            "attempts": 1,
            "created_at": created,
            "started_at": created,
            "finished_at": at,
        }
        written += len(rows)
        yield trace, rows


def _copy_columns(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    # Serial keys come from the database; every other column is written, defaults included,
    # so a column added later needs no change here.
    return [f for f in model._meta.concrete_fields if not getattr(f, "db_returning", False)]


def _copy_value(field: models.Field[Any, Any], row: dict[str, Any]) -> Any:
    name = field.attname
    value = row[name] if name in row else field.get_default()
    if isinstance(field, models.JSONField):
        return json.dumps(value)
    return value


def dashboard_data_fill(
    *,
    steps: int,
    days: int,
    seed: int,
    now: datetime,
    agent_id: int,
    progress: Callable[[str], None] = lambda line: None,
) -> FillResult:
    """Load generated traces and steps with PostgreSQL COPY (no rollups: rebuild them)."""
    if connection.vendor != "postgresql":
        raise RuntimeError("the dashboard benchmark loads data with COPY: it needs PostgreSQL")
    trace_fields = _copy_columns(Trace)
    step_fields = _copy_columns(Step)
    quote = connection.ops.quote_name

    def copy_sql(model: type[models.Model], fields: list[models.Field[Any, Any]]) -> str:
        columns = ", ".join(quote(f.column) for f in fields)
        return f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"

    started = time.perf_counter()
    traces = written = 0
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    trace_rows: list[list[Any]] = []
    step_rows: list[list[Any]] = []

    def flush() -> None:
        # Traces first: each chunk's steps point at traces of the same chunk.
        with raw.cursor() as cursor:
            with cursor.copy(copy_sql(Trace, trace_fields)) as copy:
                for row in trace_rows:
                    copy.write_row(row)
            with cursor.copy(copy_sql(Step, step_fields)) as copy:
                for row in step_rows:
                    copy.write_row(row)
        trace_rows.clear()
        step_rows.clear()

    for trace, rows in _generate(steps=steps, days=days, seed=seed, now=now, agent_id=agent_id):
        trace_rows.append([_copy_value(f, trace) for f in trace_fields])
        step_rows.extend([_copy_value(f, row) for f in step_fields] for row in rows)
        traces += 1
        written += len(rows)
        if len(step_rows) >= 50_000:
            flush()
            progress(f"copied {written} steps")
    flush()
    return FillResult(traces=traces, steps=written, seconds=time.perf_counter() - started)


def latency_p50(
    call: Callable[[], Any], *, samples: int, warmup: int = 2
) -> tuple[float, float, list[float]]:
    """(p50 ms, p95 ms, every sample) of ``call`` after ``warmup`` unmeasured calls."""
    for _ in range(warmup):
        call()
    timings = []
    for _ in range(samples):
        began = time.perf_counter()
        call()
        timings.append((time.perf_counter() - began) * 1000)
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return statistics.median(timings), p95, timings


@dataclass(frozen=True)
class EndpointTiming:
    p50_ms: float
    p95_ms: float
    queries: list[str]  # the SQL of one request


def endpoint_time(client: Any, path: str, *, samples: int) -> EndpointTiming:
    """Time GET ``path`` through ``client`` (Django's test client: view, queries, template;
    no HTTP) and record the SQL one request runs. Raises ValueError unless it answers 200."""
    queries: list[str] = []

    def count(execute: Any, sql: str, *args: Any) -> Any:
        queries.append(sql)
        return execute(sql, *args)

    # A wrapper, not CaptureQueriesContext: each request resets the query log.
    with connection.execute_wrapper(count):
        response = client.get(path)
    if response.status_code != 200:
        raise ValueError(f"{path} answered {response.status_code}")
    p50, p95, _ = latency_p50(lambda: client.get(path), samples=samples)
    return EndpointTiming(p50_ms=p50, p95_ms=p95, queries=queries)


def machine_line() -> str:
    import os

    return (
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"database {connection.vendor}"
    )


def report_write(result: dict[str, Any], *, output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / "dashboard-latest.json"
    md_path = output_dir / "dashboard-latest.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    lines = [
        "# Dashboard benchmark",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']}",
        f"- load average when timing began: {result.get('load_average', 'not recorded')} "
        "(the CPUs are shared with other jobs)",
        f"- run at: {result['run_at']}",
        f"- data: {result['fill']['steps']:,} steps in {result['fill']['traces']:,} traces over "
        f"{result['days']} days, generated in Python and loaded with COPY in "
        f"{result['fill']['seconds']:.1f} s ({result['fill']['steps_per_s']:,.0f} steps/s, "
        "the generator bounds it)",
        f"- rollups: rebuilt with `rollups_rebuild` in {result['rebuild']['seconds']:.1f} s; "
        f"{result['rollup_rows']['step_hourly']:,} hourly and "
        f"{result['rollup_rows']['step_daily']:,} daily step rows, "
        f"{result['rollup_rows']['run_hourly']:,} hourly and "
        f"{result['rollup_rows']['run_daily']:,} daily run rows",
        f"- in the database: {result['table_rows']['steps']:,} steps, "
        f"{result['table_rows']['traces']:,} traces",
        f"- each endpoint: {result['samples']} timed requests after 2 warm-ups, through "
        "Django's test client in this process (view, queries, template or JSON; no HTTP)",
        "",
        f"Goal: p50 < {result['goal_ms']} ms for every endpoint — "
        + ("**met**." if result["goal_met"] else "**not met**."),
        "",
        "| endpoint | p50 ms | p95 ms | queries |",
        "|---|---|---|---|",
    ]
    for row in result["endpoints"]:
        lines.append(
            f"| `{row['path']}` | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['queries']} |"
        )
    raw = result.get("raw_reference")
    if raw:
        lines += [
            "",
            "For reference, the failures chart's question asked of the Step table directly "
            f"(7-day hourly GROUP BY error type): p50 {raw['p50_ms']:.0f} ms over "
            f"{raw['samples']} runs.",
        ]
    md_path.write_text("\n".join(lines) + "\n")
    return [md_path, json_path]
