"""OTLP ingest rate: the product's own path (protobuf decode, GenAI mapping, classification,
redaction, idempotency check, Trace and Step rows, rollups) against PostgreSQL ``COPY`` of
the very rows it wrote, side by side in the same run and database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentops_bench \\
        .venv/bin/python -m bench.otlp_ingest [--traces 2000] [--batch 100] [--repeats 5]

Each repeat ingests fresh traces (3 GenAI spans each: invoke_agent, chat, a failing
execute_tool) in export-sized requests, reads the stored rows back, deletes them, and
COPYs the same rows in again; the order of the two alternates between repeats. Rows are
Trace plus Step rows. Writes bench/results/otlp-latest.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _requests(traces: int, batch: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def kv(key: str, value: Any) -> KeyValue:
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    bodies = []
    start = time.time_ns()
    for first in range(0, traces, batch):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(kv("service.name", "bench-agent"))
        spans = resource_spans.scope_spans.add().spans
        for _ in range(first, min(first + batch, traces)):
            trace_id = uuid.uuid4().bytes
            root_id, chat_id, tool_id = (os.urandom(8) for _ in range(3))
            root = spans.add(
                trace_id=trace_id,
                span_id=root_id,
                name="invoke_agent bench",
                start_time_unix_nano=start,
                end_time_unix_nano=start + 900_000_000,
            )
            root.attributes.extend(
                [
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.agent.name", "bench-agent"),
                    kv(
                        "gen_ai.input.messages",
                        '[{"role":"user","parts":[{"type":"text",'
                        '"content":"Where is my order 12345?"}]}]',
                    ),
                ]
            )
            chat = spans.add(
                trace_id=trace_id,
                span_id=chat_id,
                parent_span_id=root_id,
                name="chat gpt-4o-mini",
                start_time_unix_nano=start + 1_000_000,
                end_time_unix_nano=start + 400_000_000,
            )
            chat.attributes.extend(
                [
                    kv("gen_ai.operation.name", "chat"),
                    kv("gen_ai.provider.name", "openai"),
                    kv("gen_ai.request.model", "gpt-4o-mini"),
                    kv("gen_ai.usage.input_tokens", 412),
                    kv("gen_ai.usage.output_tokens", 38),
                ]
            )
            tool = spans.add(
                trace_id=trace_id,
                span_id=tool_id,
                parent_span_id=root_id,
                name="execute_tool get_order",
                start_time_unix_nano=start + 410_000_000,
                end_time_unix_nano=start + 800_000_000,
            )
            tool.attributes.extend(
                [
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", "get_order"),
                    kv("gen_ai.tool.call.id", "call_" + tool_id.hex()),
                    kv("gen_ai.tool.call.arguments", '{"order_id": "12345"}'),
                    kv("http.response.status_code", 404),
                    kv("error.type", "404"),
                ]
            )
            tool.status.code = 2
            tool.status.message = "order not found"
        bodies.append(request.SerializeToString())
    return bodies


def _product(bodies: list[bytes], rules: Any) -> tuple[float, list[str]]:
    """Ingest every request; return the seconds the exporter waited (decode through commit
    and the learning hand-off) and the trace ids. The learning work handed off runs on the
    background worker and is drained afterwards, timed on its own (``_learning``)."""
    from traces.otlp import otlp_spans_from_protobuf, otlp_spans_ingest

    trace_ids: list[str] = []
    began = time.perf_counter()
    for body in bodies:
        result = otlp_spans_ingest(otlp_spans_from_protobuf(body), user_id=None, rules=rules)
        trace_ids += result.trace_ids
    elapsed = time.perf_counter() - began
    _learning.append(_learning_drain())
    return elapsed, trace_ids


_learning: list[float] = []


def _learning_drain() -> float:
    """Wait for the learning work the ingest handed off (embedded shape: the background
    thread); return the seconds it took to finish after the last request."""
    from policies.tasks import reflexion_inprocess_drain

    began = time.perf_counter()
    reflexion_inprocess_drain(timeout=600)
    return time.perf_counter() - began


def _rows(model: Any, **filters: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    from django.db.models import JSONField

    fields = model._meta.concrete_fields
    columns = [f.column for f in fields]
    json_at = [i for i, f in enumerate(fields) if isinstance(f, JSONField)]
    rows = []
    for row in model.objects.filter(**filters).values_list(*[f.attname for f in fields]):
        values = list(row)
        for i in json_at:
            values[i] = json.dumps(values[i])
        rows.append(tuple(values))
    return columns, rows


Table = tuple[str, list[str], list[tuple[Any, ...]]]


def _copy(tables: list[Table]) -> float:
    """COPY every row in one transaction: the ceiling, what no endpoint can do (it must
    commit each request before answering it)."""
    from django.db import connection, transaction

    began = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        for table, columns, rows in tables:
            sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
            with cursor.cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
    return time.perf_counter() - began


def _copy_per_request(requests: list[list[Table]]) -> float:
    """COPY the same rows request by request, one transaction each, as the endpoint must."""
    return sum(_copy(tables) for tables in requests)


def _tables(ids: list[str]) -> list[Table]:
    from traces.models import Step, Trace

    return [
        (Trace._meta.db_table, *_rows(Trace, pk__in=ids)),
        (Step._meta.db_table, *_rows(Step, trace_id__in=ids)),
    ]


def _delete(trace_ids: list[str]) -> None:
    from traces.models import Trace

    Trace.objects.filter(pk__in=trace_ids).delete()


PATHS = ("product", "copy_per_request", "copy_one_transaction")


def bench_otlp_ingest(*, traces: int, batch: int, repeats: int) -> dict[str, Any]:
    from traces.classifier import error_rules_load, errorrules_seed_defaults

    errorrules_seed_defaults()
    rules = error_rules_load()
    _product(_requests(batch, batch), rules)  # warm-up: imports, agent row, plans
    _learning.clear()
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    rows_per_repeat = 0
    for repeat in range(repeats):
        bodies = _requests(traces, batch)
        # The rows COPY writes are the product's own: a product pass makes them first.
        _, ids = _product(bodies, rules)
        per_request = [_tables(ids[i : i + batch]) for i in range(0, len(ids), batch)]
        tables = _tables(ids)
        rows_per_repeat = sum(len(rows) for _, _, rows in tables)
        _delete(ids)
        # Each path in turn, the order rotating from one repeat to the next.
        order = PATHS[repeat % 3 :] + PATHS[: repeat % 3]
        for path in order:
            if path == "product":
                seconds, ids = _product(bodies, rules)
            elif path == "copy_per_request":
                seconds = _copy_per_request(per_request)
            else:
                seconds = _copy(tables)
            rates[path].append(rows_per_repeat / seconds)
            _delete(ids)
    medians = {path: statistics.median(values) for path, values in rates.items()}
    return {
        "traces_per_repeat": traces,
        "spans_per_repeat": traces * 3,
        "spans_per_request": batch * 3,
        "rows_per_repeat": rows_per_repeat,
        "repeats": repeats,
        "product_rows_per_s": rates["product"],
        "copy_per_request_rows_per_s": rates["copy_per_request"],
        "copy_rows_per_s": rates["copy_one_transaction"],
        "product_rows_per_s_median": medians["product"],
        "copy_per_request_rows_per_s_median": medians["copy_per_request"],
        "copy_rows_per_s_median": medians["copy_one_transaction"],
        "ratio_product_to_copy_per_request": medians["product"] / medians["copy_per_request"],
        "ratio_product_to_copy": medians["product"] / medians["copy_one_transaction"],
        "learning_drain_s": list(_learning),
    }


def report_write(result: dict[str, Any], *, command: str) -> list[Path]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0]
    result = {
        "command": command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "database": f"PostgreSQL {server}",
        },
        **result,
    }
    r = result

    def verdict(ratio: float) -> str:
        return f"{ratio:.2f} (goal >= 0.50: {'met' if ratio >= 0.5 else 'NOT met'})"

    def row(label: str, key: str) -> str:
        each = ", ".join(f"{v:.0f}" for v in r[key])
        return f"| {label} | {r[key + '_median']:.0f} | {each} |"

    md = "\n".join(
        [
            "# OTLP ingest benchmark",
            "",
            f"- command: `{command}`",
            f"- machine: {r['machine']['platform']}, {r['machine']['cpus']} CPUs, "
            f"Python {r['machine']['python']}, {r['machine']['database']} (same host)",
            f"- workload: {r['traces_per_repeat']} traces x 3 GenAI spans per repeat "
            f"(invoke_agent, chat, a failing execute_tool), {r['spans_per_request']} spans per "
            f"request, {r['rows_per_repeat']} rows (Trace + Step) per repeat, "
            f"{r['repeats']} repeats, the order of the three paths rotating",
            "",
            "| path | rows/s (median) | each repeat |",
            "|---|---|---|",
            row(
                "product: decode + map + classify + redact + dedupe + COPY + rollups, "
                "one transaction per request",
                "product_rows_per_s",
            ),
            row(
                "PostgreSQL COPY of the same rows, one transaction per request (like for like)",
                "copy_per_request_rows_per_s",
            ),
            row("PostgreSQL COPY of the same rows, all in one transaction", "copy_rows_per_s"),
            "",
            "Ratio product / COPY per request: "
            + verdict(r["ratio_product_to_copy_per_request"])
            + ". Ratio product / COPY in one transaction: "
            + verdict(r["ratio_product_to_copy"])
            + ".",
            "",
            "Learning-loop hand-off per ended run (strategy outcomes, Reflexion queueing): "
            + (
                "off (--no-learning)."
                if "--no-learning" in command
                else "on. The request hands the ended runs to a worker (one task per request; "
                "embedded, the background thread) and does not wait for them; that thread "
                "runs during the measured ingest, on the same 2 cores. Its remaining work "
                "after the last request took "
                + ", ".join(f"{v:.1f}" for v in r["learning_drain_s"])
                + " s per product pass (drained before the rows are read back, not counted "
                "in rows/s)."
            ),
            "",
            "The product path is measured in-process from the protobuf body (no HTTP, no "
            "token lookup); COPY moves the finished rows only, without the rollup upserts, "
            "classification or idempotency reads the product does.",
            "",
        ]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS / "otlp-latest.json", RESULTS / "otlp-latest.md"]
    paths[0].write_text(json.dumps(result, indent=2))
    paths[1].write_text(md)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100, help="traces per export request")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--no-learning",
        action="store_true",
        help="without the learning-loop hand-off (strategy outcomes, Reflexion queueing) per run",
    )
    args = parser.parse_args(argv)
    from config.shape import settings_select

    settings_select()  # as manage.py: DJANGO_SETTINGS_MODULE, or the shape the env selects
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        print("bench.otlp_ingest needs PostgreSQL (COPY): set DATABASE_URL", file=sys.stderr)
        return 2
    call_command("migrate", verbosity=0)
    if args.no_learning:
        from traces.otlp import external_runs_ended

        external_runs_ended.disconnect(dispatch_uid="policies.external_runs")
    result = bench_otlp_ingest(traces=args.traces, batch=args.batch, repeats=args.repeats)
    command = "python -m bench.otlp_ingest " + " ".join(argv or sys.argv[1:])
    for path in report_write(result, command=command.strip()):
        print(path)
    print(RESULTS.joinpath("otlp-latest.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
