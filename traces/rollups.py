"""Rollups: hourly and daily counters of steps and runs, kept in the writer's transaction.

Every Step batch and every trace end adds its counts to the rollup rows of its UTC hour
and day with one ``INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n`` per table,
inside the transaction that writes the rows counted, so the rollups are never behind the
store and a rolled-back write leaves no count behind. ``rollups_rebuild`` recomputes a
period from the store with the same row builder, for backfills and repairs.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from django.db import connection, transaction
from django.db.models import Count, Q

from traces.models import (
    RunRollupDaily,
    RunRollupHourly,
    Step,
    StepRollupDaily,
    StepRollupHourly,
    Trace,
    TracePrune,
)

logger = logging.getLogger(__name__)

# Lower bounds of the canary bands: the rollout stages 1 %, 5 %, 25 %, 50 %, 100 %.
BUCKET_BANDS = (0, 1, 5, 25, 50)
_ROWS_PER_STATEMENT = 500
_HAS_DIGIT = re.compile(r"\d")
_API_VERSION = re.compile(r"v\d+", re.IGNORECASE)
_LOOSE_URL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?(?://)?([^/?#]*)([^?#]*)")
ID_PLACEHOLDER = "{id}"

RollupKey = tuple[Any, ...]
Counters = list[Any]


def bucket_band(bucket: int | None) -> int:
    """The band a policy bucket (0..99) belongs to; runs without a bucket count in band 0."""
    if bucket is None:
        return 0
    return max(band for band in BUCKET_BANDS if band <= bucket)


def bucket_band_range(band: int) -> tuple[int, int]:
    """The half-open bucket range [low, high) of a band."""
    index = BUCKET_BANDS.index(band)
    high = BUCKET_BANDS[index + 1] if index + 1 < len(BUCKET_BANDS) else 100
    return band, high


@functools.lru_cache(maxsize=4096)  # the same endpoints, step after step
def endpoint_label(endpoint: str) -> str:
    """Host and path with every id-like segment (one holding a digit) as ``{id}``.

    Endpoints carry order numbers and SKUs; keyed raw, the rollup would grow with the data.
    The query string is dropped for the same reason.
    """
    if not endpoint:
        return ""
    try:
        parts = urlsplit(endpoint)
        netloc, path = parts.netloc, parts.path
    except ValueError:
        # Endpoints are whatever was attempted (redacted, malformed): never fail the write.
        match = _LOOSE_URL.match(endpoint)
        assert match is not None  # every part of the pattern is optional
        netloc, path = match.group(1), match.group(2)
    segments = [
        ID_PLACEHOLDER if _HAS_DIGIT.search(seg) and not _API_VERSION.fullmatch(seg) else seg
        for seg in path.split("/")
    ]
    return (netloc + "/".join(segments))[:300]


def endpoint_label_regex(label: str) -> str:
    """A regex (valid in PostgreSQL and Python) matching the raw endpoints of a label."""
    pattern = re.escape(label).replace(re.escape(ID_PLACEHOLDER), "[^/?#]*[0-9][^/?#]*")
    return "^[a-zA-Z][a-zA-Z0-9+.-]*://" + pattern + "([?#].*)?$"


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True, slots=True)
class TraceDims:
    origin: str
    agent_id: int
    policy_version: str
    bucket_band: int


class RollupAccumulator:
    """Counters of the hourly and daily rows a set of steps or runs adds to."""

    def __init__(self) -> None:
        self.step_hourly: dict[RollupKey, Counters] = {}
        self.step_daily: dict[RollupKey, Counters] = {}
        self.run_hourly: dict[RollupKey, Counters] = {}
        self.run_daily: dict[RollupKey, Counters] = {}

    def add_step(
        self,
        *,
        created_at: datetime,
        dims: TraceDims,
        tool_name: str,
        endpoint: str,
        error_type: str,
        ok: bool,
        phase: str,
        action_type: str,
        latency_ms: int,
        tokens: int,
        cost_usd: Decimal,
    ) -> None:
        is_action = phase == Step.Phase.ACTION and action_type == Step.ActionType.TOOL
        failed_action = is_action and (not ok or bool(error_type))
        counts = (
            1,
            0 if ok else 1,
            1 if is_action else 0,
            1 if failed_action else 0,
            latency_ms,
            tokens,
            cost_usd,
        )
        tail = (
            dims.origin,
            dims.agent_id,
            dims.policy_version,
            dims.bucket_band,
            tool_name,
            endpoint_label(endpoint),
            error_type,
        )
        hour = hour_of(created_at)
        _add(self.step_hourly, (hour, *tail), counts)
        _add(self.step_daily, (day_of(hour), *tail), counts)

    def add_step_rows(self, steps: Iterable[Step], dims: TraceDims) -> None:
        """Count a trace's freshly inserted steps, as ``add_step_row`` does one by one (the
        ingest's loop: the trace's dimensions are unpacked once, each hour's day once)."""
        head = (dims.origin, dims.agent_id, dims.policy_version, dims.bucket_band)
        days: dict[datetime, datetime] = {}
        action, tool = Step.Phase.ACTION, Step.ActionType.TOOL
        for step in steps:
            ok, error_type = step.ok, step.error_type
            is_action = step.phase == action and step.action_type == tool
            counts = (
                1,
                0 if ok else 1,
                1 if is_action else 0,
                1 if is_action and (not ok or bool(error_type)) else 0,
                step.latency_ms,
                step.prompt_tokens + step.completion_tokens,
                Decimal(step.cost_usd),
            )
            tail = (*head, step.tool_name, endpoint_label(step.endpoint), error_type)
            hour = hour_of(step.created_at)
            day = days.get(hour)
            if day is None:
                day = days[hour] = day_of(hour)
            _add(self.step_hourly, (hour, *tail), counts)
            _add(self.step_daily, (day, *tail), counts)

    def add_step_row(self, step: Step, dims: TraceDims) -> None:
        """Count one freshly inserted step of a trace with dimensions ``dims``."""
        self.add_step(
            created_at=step.created_at,
            dims=dims,
            tool_name=step.tool_name,
            endpoint=step.endpoint,
            error_type=step.error_type,
            ok=step.ok,
            phase=step.phase,
            action_type=step.action_type,
            latency_ms=step.latency_ms,
            tokens=step.prompt_tokens + step.completion_tokens,
            cost_usd=Decimal(step.cost_usd),
        )

    def add_runs(self, runs: Iterable[tuple[Trace, int, int]]) -> None:
        """Count runs that just ended, as (trace, failed steps, action steps)."""
        for trace, failed_steps, action_steps in runs:
            assert trace.finished_at is not None
            self.add_run(
                finished_at=trace.finished_at,
                created_at=trace.created_at,
                dims=trace_dims(trace),
                status=trace.status,
                outcome=trace.outcome,
                error_type=trace.error_type,
                failed_steps=failed_steps,
                action_steps=action_steps,
                tokens=trace.total_tokens,
                cost_usd=Decimal(trace.total_cost_usd),
            )

    def add_run(
        self,
        *,
        finished_at: datetime,
        created_at: datetime,
        dims: TraceDims,
        status: str,
        outcome: str,
        error_type: str,
        failed_steps: int,
        action_steps: int,
        tokens: int,
        cost_usd: Decimal,
    ) -> None:
        success = status == Trace.Status.FINISHED
        resolution_ms = max(0, int((finished_at - created_at).total_seconds() * 1000))
        counts = (
            1,
            1 if success else 0,
            1 if success and failed_steps == 0 else 0,
            action_steps,
            resolution_ms,
            1 if outcome == Trace.Outcome.HANDED_OVER else 0,
            tokens,
            cost_usd,
        )
        tail = (dims.origin, dims.agent_id, dims.policy_version, dims.bucket_band, error_type)
        hour = hour_of(finished_at)
        _add(self.run_hourly, (hour, *tail), counts)
        _add(self.run_daily, (day_of(hour), *tail), counts)

    def upserts(self) -> list[tuple[str, list[Any]]]:
        """Each rollup table's upsert, one statement per table on PostgreSQL."""
        return [
            *_upserts(StepRollupHourly, self.step_hourly),
            *_upserts(StepRollupDaily, self.step_daily),
            *_upserts(RunRollupHourly, self.run_hourly),
            *_upserts(RunRollupDaily, self.run_daily),
        ]

    def statements(self) -> list[tuple[str, list[Any]]]:
        """The statements that add the counters to the stored rows, for a writer that
        sends them itself (the OTLP ingest queues them behind its last ``COPY``)."""
        statements = self.upserts()
        if connection.vendor == "postgresql" and 1 < len(statements) <= 4:
            # A step batch's upserts in one round trip: data-modifying CTEs all run.
            ctes = ", ".join(f"u{i} AS ({sql})" for i, (sql, _) in enumerate(statements))
            params = [value for _, values in statements for value in values]
            return [(f"WITH {ctes} SELECT 1", params)]
        return statements

    def save(self) -> None:
        """Add the counters to the stored rows (call inside the writer's transaction)."""
        with connection.cursor() as cursor:
            for sql, params in self.statements():
                cursor.execute(sql, params)


def _add(rows: dict[RollupKey, Counters], key: RollupKey, counts: tuple[Any, ...]) -> None:
    current = rows.get(key)
    if current is None:
        rows[key] = list(counts)
    else:
        for index, value in enumerate(counts):
            current[index] += value


@functools.cache
def _recordset_upsert_sql(model: Any) -> str:
    """``INSERT ... SELECT FROM jsonb_to_recordset(%s) ... ON CONFLICT DO UPDATE`` (PostgreSQL)."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = [*model.KEY, *model.COUNTERS]
    columns = ", ".join(quote(name) for name in names)
    record = ", ".join(
        f"{quote(name)} {model._meta.get_field(name).db_type(connection)}" for name in names
    )
    updates = ", ".join(
        f"{quote(name)} = {table}.{quote(name)} + EXCLUDED.{quote(name)}" for name in model.COUNTERS
    )
    keys = ", ".join(quote(name) for name in model.KEY)
    return (
        f"INSERT INTO {table} ({columns}) SELECT {columns} "
        f"FROM jsonb_to_recordset(%s::jsonb) AS r({record}) "
        f"ON CONFLICT ({keys}) DO UPDATE SET {updates}"
    )


def _rows_json(model: Any, ordered: list[tuple[RollupKey, Counters]]) -> str:
    """The rows as a JSON array of records (datetimes and decimals as their text)."""
    names = (*model.KEY, *model.COUNTERS)
    return json.dumps(
        [dict(zip(names, (*key, *counts), strict=True)) for key, counts in ordered], default=str
    )


def _upserts(model: Any, rows: dict[RollupKey, Counters]) -> list[tuple[str, list[Any]]]:
    """The ``INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n`` statements for rows."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    key_columns = [quote(name) for name in model.KEY]
    counter_columns = [quote(name) for name in model.COUNTERS]
    columns = key_columns + counter_columns
    row_placeholder = "(" + ", ".join(["%s"] * len(columns)) + ")"
    updates = ", ".join(f"{col} = {table}.{col} + EXCLUDED.{col}" for col in counter_columns)
    cost_field = model._meta.get_field("cost_usd")
    # One lock order for every writer: concurrent batches touching the same rows queue
    # behind each other instead of deadlocking.
    ordered = sorted(rows.items(), key=lambda item: tuple(str(part) for part in item[0]))
    if connection.vendor == "postgresql" and ordered:
        # The rows as one JSON parameter: the statement text is the same whatever the
        # number of rows, so psycopg parses it once (it re-parses, character by
        # character, any statement longer than 4 KB or with more than 50 parameters).
        return [(_recordset_upsert_sql(model), [_rows_json(model, ordered)])]
    statements = []
    for start in range(0, len(ordered), _ROWS_PER_STATEMENT):
        chunk = ordered[start : start + _ROWS_PER_STATEMENT]
        params: list[Any] = []
        for key, counts in chunk:
            params.append(connection.ops.adapt_datetimefield_value(key[0]))
            params.extend(key[1:])
            params.extend(counts[:-1])
            params.append(
                connection.ops.adapt_decimalfield_value(
                    counts[-1], cost_field.max_digits, cost_field.decimal_places
                )
            )
        sql = (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
            + ", ".join([row_placeholder] * len(chunk))
            + f" ON CONFLICT ({', '.join(key_columns)}) DO UPDATE SET {updates}"
        )
        statements.append((sql, params))
    return statements


def trace_dims(trace: Trace) -> TraceDims:
    """The rollup dimensions of a trace in hand."""
    return _trace_dims(trace.origin, trace.agent_id, trace.policy_version, trace.policy_bucket)


def _trace_dims(origin: str, agent_id: int, version: str, bucket: int | None) -> TraceDims:
    return TraceDims(
        origin=origin, agent_id=agent_id, policy_version=version, bucket_band=bucket_band(bucket)
    )


# A run's dimensions do not change while it writes steps (its policy version is set before
# the first one), so the group commit reads them once per run, not once per batch.
_DIMS_CACHE_SIZE = 10_000
_dims_cache: OrderedDict[str, TraceDims] = OrderedDict()
_dims_lock = threading.Lock()


def rollups_forget_trace(*, trace_id: str) -> None:
    """Drop a trace's cached dimensions: its policy version is about to change."""
    with _dims_lock:
        _dims_cache.pop(str(trace_id), None)


def rollups_remember_trace(*, trace: Trace, policy_version: str) -> None:
    """Cache the dimensions of a run about to write steps, from its row in hand and the
    policy version it runs (stored already), so its first step batch need not read them."""
    dims = _trace_dims(trace.origin, trace.agent_id, policy_version, trace.policy_bucket)
    with _dims_lock:
        _dims_cache[str(trace.pk)] = dims
        while len(_dims_cache) > _DIMS_CACHE_SIZE:
            _dims_cache.popitem(last=False)


def _dims_of(trace_ids: set[str]) -> dict[str, TraceDims]:
    with _dims_lock:
        found = {pk: _dims_cache[pk] for pk in trace_ids if pk in _dims_cache}
    missing = trace_ids - found.keys()
    if missing:
        rows = Trace.objects.filter(pk__in=missing).values_list(
            "pk", "origin", "agent_id", "policy_version", "policy_bucket"
        )
        fetched = {
            str(pk): _trace_dims(origin, agent_id, version, bucket)
            for pk, origin, agent_id, version, bucket in rows
        }
        found.update(fetched)
        with _dims_lock:
            _dims_cache.update(fetched)
            while len(_dims_cache) > _DIMS_CACHE_SIZE:
                _dims_cache.popitem(last=False)
    return found


def rollups_record_steps(*, steps: Iterable[Step], traces: Iterable[Trace] = ()) -> None:
    """Count freshly inserted steps; call in the transaction that inserted them. ``traces``
    in hand (just created, say) spare reading their dimensions."""
    rollups_record(steps=steps, traces=traces)


def rollups_record_run(*, trace: Trace, failed_steps: int, action_steps: int) -> None:
    """Count a run that just reached its terminal state; call in that transaction."""
    rollups_record_runs(runs=[(trace, failed_steps, action_steps)])


def rollups_record_runs(*, runs: Iterable[tuple[Trace, int, int]]) -> None:
    """Count runs that just ended, as (trace, failed steps, action steps), in one upsert."""
    rollups_record(runs=runs)


def rollups_record(
    *,
    steps: Iterable[Step] = (),
    traces: Iterable[Trace] = (),
    runs: Iterable[tuple[Trace, int, int]] = (),
) -> None:
    """Count freshly inserted steps and runs that just ended (as (trace, failed steps,
    action steps)) in one statement; call in the transaction that wrote them."""
    acc = RollupAccumulator()
    rollups_add_steps(acc, steps=steps, traces=traces)
    acc.add_runs(runs)
    acc.save()


def rollups_add_steps(
    acc: RollupAccumulator, *, steps: Iterable[Step], traces: Iterable[Trace] = ()
) -> None:
    """Add the steps' counters to ``acc``, their traces' dimensions read where not in hand."""
    steps = list(steps)
    if steps:
        # The recorder hands trace ids as strings, the ORM as UUIDs.
        known = {str(t.pk): trace_dims(t) for t in traces}
        dims = known | _dims_of({str(step.trace_id) for step in steps} - known.keys())
        for step in steps:
            acc.add_step_row(step, dims[str(step.trace_id)])


def rollups_record_handover(*, trace: Trace) -> None:
    """Count a human takeover asked for after the run ended (a hand-over button): one more
    handover in the run's own hour and day. Call once per trace, in the transaction that
    records the takeover; a run that ended handed over is already counted by its end."""
    assert trace.finished_at is not None
    dims = trace_dims(trace)
    tail = (dims.origin, dims.agent_id, dims.policy_version, dims.bucket_band, trace.error_type)
    counts = (0, 0, 0, 0, 0, 1, 0, Decimal(0))
    acc = RollupAccumulator()
    hour = hour_of(trace.finished_at)
    _add(acc.run_hourly, (hour, *tail), counts)
    _add(acc.run_daily, (day_of(hour), *tail), counts)
    acc.save()


def _steps_since(since: datetime, chunk: int) -> Iterator[tuple[Any, ...]]:
    return (
        Step.objects.filter(created_at__gte=since)
        .order_by()
        .values_list(
            "created_at",
            "trace__origin",
            "trace__agent_id",
            "trace__policy_version",
            "trace__policy_bucket",
            "tool_name",
            "endpoint",
            "error_type",
            "ok",
            "phase",
            "action_type",
            "latency_ms",
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
        )
        .iterator(chunk_size=chunk)
    )


def _runs_since(since: datetime, chunk: int) -> Iterator[tuple[Any, ...]]:
    return (
        Trace.objects.filter(finished_at__gte=since, status__in=Trace.TERMINAL_STATUSES)
        .order_by()
        .annotate(
            failed=Count("steps", filter=Q(steps__ok=False)),
            actions=Count(
                "steps",
                filter=Q(steps__phase=Step.Phase.ACTION, steps__action_type=Step.ActionType.TOOL),
            ),
        )
        .values_list(
            "finished_at",
            "created_at",
            "origin",
            "agent_id",
            "policy_version",
            "policy_bucket",
            "status",
            "outcome",
            "error_type",
            "failed",
            "actions",
            "total_tokens",
            "total_cost_usd",
            "handed_over_at",
        )
        .iterator(chunk_size=chunk)
    )


def retention_horizon() -> datetime | None:
    """The latest cutoff a retention pass deleted up to (``traces.retention``; dry runs do not
    count); None if none ran. Rows before it may be gone."""
    return (
        TracePrune.objects.filter(dry_run=False)
        .order_by("-cutoff")
        .values_list("cutoff", flat=True)
        .first()
    )


class RetentionHorizonError(ValueError):
    """A rebuild asked for a period whose rows a retention pass deleted."""


def rollups_rebuild(*, since: datetime, chunk: int = 20_000) -> dict[str, int]:
    """Recompute every rollup row from the UTC day of ``since`` on, from steps and traces.

    The rollup tables are locked against writers for the transaction: a writer that has
    not committed yet waits, and adds its counts after the rebuild, to rows that do not
    yet hold them.
    """
    start = day_of(since)
    horizon = retention_horizon()
    if horizon is not None and start < horizon:
        raise RetentionHorizonError(
            f"the rebuild would start at {start.isoformat()}, before the retention horizon "
            f"{horizon.isoformat()}: runs before it were deleted, so their rollups cannot be "
            "recomputed. Rebuild from the horizon on."
        )
    tables = (StepRollupHourly, StepRollupDaily, RunRollupHourly, RunRollupDaily)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            names = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in tables)
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {names} IN EXCLUSIVE MODE")
        for model in tables:
            model.objects.filter(period_start__gte=start).delete()
        acc = RollupAccumulator()
        dims_cache: dict[tuple[Any, ...], TraceDims] = {}
        steps = runs = 0
        for row in _steps_since(start, chunk):
            (created, origin, agent_id, version, bucket, tool, endpoint, error, ok, phase) = row[
                :10
            ]
            dims_key = (origin, agent_id, version, bucket)
            dims = dims_cache.get(dims_key)
            if dims is None:
                dims = dims_cache[dims_key] = _trace_dims(origin, agent_id, version, bucket)
            acc.add_step(
                created_at=created,
                dims=dims,
                tool_name=tool,
                endpoint=endpoint,
                error_type=error,
                ok=ok,
                phase=phase,
                action_type=row[10],
                latency_ms=row[11],
                tokens=row[12] + row[13],
                cost_usd=row[14],
            )
            steps += 1
        for (
            finished,
            created,
            origin,
            agent_id,
            version,
            bucket,
            status,
            outcome,
            error,
            failed,
            actions,
            tokens,
            cost,
            handed_over_at,
        ) in _runs_since(start, chunk):
            if handed_over_at is not None:
                # A takeover asked for after the run ended counts like a run that ended
                # handed over (rollups_record_handover, live).
                outcome = Trace.Outcome.HANDED_OVER
            acc.add_run(
                finished_at=finished,
                created_at=created,
                dims=_trace_dims(origin, agent_id, version, bucket),
                status=status,
                outcome=outcome,
                error_type=error,
                failed_steps=failed,
                action_steps=actions,
                tokens=tokens,
                cost_usd=cost,
            )
            runs += 1
        acc.save()
    logger.info("rollups.rebuilt", extra={"since": start.isoformat(), "steps": steps, "runs": runs})
    return {
        "steps": steps,
        "runs": runs,
        "step_rows_hourly": len(acc.step_hourly),
        "run_rows_hourly": len(acc.run_hourly),
    }
