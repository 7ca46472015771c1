"""Writes the runtime's steps to the trace store as they happen (the runtime's StepSink)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import weakref
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import AutoField
from django.utils import timezone

from traces.db_threads import db_async
from traces.live import steps_publish
from traces.models import Step
from traces.records import StepRecord
from traces.redaction import (
    known_secrets,
    redact_text,
    redact_value,
    storable_text,
    storable_value,
)
from traces.rollups import RollupAccumulator, rollups_add_steps, rollups_record_steps

logger = logging.getLogger(__name__)

_RECORD_FIELDS = {f.name for f in fields(StepRecord)}
_RECORD_FIELD_NAMES = tuple(f.name for f in fields(StepRecord))
# Every field that can carry model output, tool input or output, or an error body.
_REDACTED_TEXT_FIELDS = ("thought", "tool_name", "endpoint", "error_detail", "response_summary")
_REDACTED_JSON_FIELDS = (
    "action_input",
    "request_payload",
    "adapters_fired",
    "strategies_applied",
    "details",
)
ENDPOINT_MAX_LENGTH = 500
TOOL_NAME_MAX_LENGTH = Step._meta.get_field("tool_name").max_length or 64


class RunConflict(Exception):
    """Another worker is writing this trace's steps: this delivery must stand down."""


def step_data_redact(
    data: dict[str, Any],
    *,
    secrets: list[str] | None = None,
    redact: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """A Step's field values with secret-looking values redacted, ready to store.
    ``secrets``: the known ones (``known_secrets()``), looked up once for many steps;
    ``redact``: what redacts a text field, when the caller remembers texts it has redacted
    (``redact_text`` with ``secrets`` otherwise)."""
    redacted = dict(data)
    secrets = known_secrets() if secrets is None else secrets
    for name in _REDACTED_TEXT_FIELDS:
        if redacted.get(name):
            text = str(redacted[name])
            redacted[name] = redact(text) if redact else redact_text(text, secrets=secrets)
    for name in _REDACTED_JSON_FIELDS:
        if redacted.get(name):
            redacted[name] = redact_value(redacted[name], secrets=secrets)
    # Values no column stores (a NUL, a lone surrogate, NaN) would fail the INSERT of the
    # whole batch, other runs' steps with it: made storable here, for every writer.
    for name, value in redacted.items():
        if isinstance(value, str):
            if "\x00" in value or not value.isascii():
                redacted[name] = storable_text(value)
        elif isinstance(value, dict | list) and value:
            redacted[name] = storable_value(value)
    # Cut after redacting: the marker may be longer than a short secret it replaced.
    if redacted.get("endpoint"):
        redacted["endpoint"] = redacted["endpoint"][:ENDPOINT_MAX_LENGTH]
    if redacted.get("tool_name"):
        # A tool name is the model's (or an exporter's) text until the whitelist checks it.
        redacted["tool_name"] = redacted["tool_name"][:TOOL_NAME_MAX_LENGTH]
    return redacted


def _record_values(record: StepRecord) -> dict[str, Any]:
    """``dataclasses.asdict(record)`` without its deep copy (half of ``write_step``'s CPU):
    the lists and dicts are copied one level here, and ``step_data_redact`` copies every
    non-empty one whole, so the Step shares no mutable value with the record."""
    values = {name: getattr(record, name) for name in _RECORD_FIELD_NAMES}
    for name in _REDACTED_JSON_FIELDS:
        values[name] = copy.copy(values[name])
    return values


def step_to_record(step: Step) -> StepRecord:
    values: dict[str, Any] = {name: getattr(step, name) for name in _RECORD_FIELDS}
    values["cost_usd"] = float(step.cost_usd)
    return StepRecord(**values)


class StepBatcher:
    """Group commit for the steps of every run in flight on one event loop.

    A run awaits its own Step row before its next phase starts, as the contract demands;
    while one transaction is being committed, the steps other runs produce queue up and go
    in the next transaction together. Many runs waiting on one commit cost one round trip
    instead of one each.

    Committed steps are then pushed to live listeners by one publisher task per loop, so
    they arrive in commit order and no run waits on the channel layer.
    """

    def __init__(self, *, max_batch: int = 500) -> None:
        self.max_batch = max_batch
        self.pending: list[tuple[Step, asyncio.Future[Step]]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.unpublished: list[Step] = []
        self.publisher: asyncio.Task[None] | None = None

    async def write(self, step: Step) -> Step:
        future: asyncio.Future[Step] = asyncio.get_running_loop().create_future()
        self.pending.append((step, future))
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch :]
            try:
                await db_async(_insert_batch)([step for step, _ in batch])
            except (IntegrityError, DataError, ValueError):
                # One bad row fails the transaction (a unique key, or a value the column
                # refuses; ValueError: one psycopg cannot even encode): retry singly so
                # only its run hears.
                for step, future in batch:
                    try:
                        await db_async(_insert_batch)([step])
                    except Exception as exc:  # reported to the run that wrote it
                        _settle(future, exc=exc)
                    else:
                        self._announce([step])
                        _settle(future, step=step)
            except Exception as exc:  # the database is gone: every waiting run hears
                for _, future in batch:
                    _settle(future, exc=exc)
            else:
                self._announce([step for step, _ in batch])
                for step, future in batch:
                    _settle(future, step=step)

    def _announce(self, steps: list[Step]) -> None:
        self.unpublished.extend(steps)
        if self.publisher is None or self.publisher.done():
            self.publisher = asyncio.create_task(self._publish())

    async def _publish(self) -> None:
        while self.unpublished:
            batch, self.unpublished = self.unpublished, []
            await steps_publish(batch)


def _settle(
    future: asyncio.Future[Step], *, step: Step | None = None, exc: BaseException | None = None
) -> None:
    # A run cancelled while waiting (its time limit) must not take the others down with it.
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(step)  # type: ignore[arg-type]


@functools.cache
def _step_insert_fields() -> tuple[Any, ...]:
    """The fields ``bulk_create`` writes for Steps without a primary key, in its order."""
    return tuple(
        field
        for field in Step._meta.concrete_fields
        if not field.generated and not isinstance(field, AutoField)
    )


@functools.lru_cache(maxsize=64)
def _step_insert_sql(rows: int) -> str:
    """``INSERT INTO traces_step (...) VALUES (...), ... RETURNING id`` for ``rows`` rows."""
    quote = connection.ops.quote_name
    fields = _step_insert_fields()
    columns = ", ".join(quote(field.column) for field in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    table = quote(Step._meta.db_table)
    pk = quote(Step._meta.pk.column)
    return (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * rows)} RETURNING {table}.{pk}"
    )


def steps_insert(steps: list[Step]) -> None:
    """``Step.objects.bulk_create(steps)`` for new steps, the statement built once per batch
    size on PostgreSQL instead of compiled per call: the same values (each field's
    ``pre_save``, so ``created_at`` is set as bulk_create sets it, then
    ``get_db_prep_save``), one INSERT, the ids read back onto the steps in order. Other
    databases take ``bulk_create``."""
    if connection.vendor != "postgresql" or any(step.pk is not None for step in steps):
        Step.objects.bulk_create(steps)
        return
    params = _step_insert_params(steps)
    with connection.cursor() as cursor:
        cursor.execute(_step_insert_sql(len(steps)), params)
        ids = [row[0] for row in cursor.fetchall()]
    _steps_saved(steps, ids)


def _step_insert_params(steps: list[Step]) -> list[Any]:
    """Each step's values as ``bulk_create`` would send them (``created_at`` set)."""
    fields = _step_insert_fields()
    return [
        field.get_db_prep_save(field.pre_save(step, True), connection)
        for step in steps
        for field in fields
    ]


def _steps_saved(steps: list[Step], ids: list[int]) -> None:
    for step, pk in zip(steps, ids, strict=True):
        step.pk = pk
        step._state.adding = False
        step._state.db = connection.alias


def _insert_batch(steps: list[Step]) -> None:
    if connection.vendor == "postgresql" and all(step.pk is None for step in steps):
        # Inside a caller's transaction, a savepoint: a refused batch leaves it usable.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            _insert_counted(steps)
        return
    with transaction.atomic():
        steps_insert(steps)
        # Same transaction: the rollups never count a step the store does not hold.
        rollups_record_steps(steps=steps)


def _insert_counted(steps: list[Step]) -> None:
    """The steps' INSERT and their rollup upserts as one statement (PostgreSQL): atomic by
    itself, so the rollups never count a step the store does not hold, in one round trip
    and without a transaction of its own around it (BEGIN and COMMIT are two more)."""
    params = _step_insert_params(steps)
    acc = RollupAccumulator()
    rollups_add_steps(acc, steps=steps)  # after pre_save: created_at is set
    upserts = acc.upserts()
    for _, values in upserts:
        params.extend(values)
    with connection.cursor() as cursor:
        cursor.execute(
            _step_insert_counted_sql(len(steps), tuple(sql for sql, _ in upserts)), params
        )
        ids = [row[0] for row in cursor.fetchall()]
    _steps_saved(steps, ids)


@functools.lru_cache(maxsize=64)
def _step_insert_counted_sql(rows: int, upserts: tuple[str, ...]) -> str:
    """``WITH s AS (INSERT ... RETURNING id), u0 AS (upsert), ... SELECT id FROM s``: the
    data-modifying CTEs all run, whether the query reads them or not; the ids come back
    in the order of the rows."""
    ctes = [f"s AS ({_step_insert_sql(rows)})"]
    ctes += [f"u{index} AS ({sql})" for index, sql in enumerate(upserts)]
    pk = connection.ops.quote_name(Step._meta.pk.column)
    return f"WITH {', '.join(ctes)} SELECT {pk} FROM s"


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StepBatcher] = (
    weakref.WeakKeyDictionary()
)


def step_batcher() -> StepBatcher:
    loop = asyncio.get_running_loop()
    if loop not in _batchers:
        _batchers[loop] = StepBatcher()
    return _batchers[loop]


class TraceRecorder:
    """Persists StepRecords of one trace with consecutive step numbers."""

    def __init__(self, *, trace_id: str, next_step_number: int = 1) -> None:
        self.trace_id = trace_id
        self.next_step_number = next_step_number
        self.on_step: Any = None  # optional callback(Step) for live output
        self.telemetry: Any = None  # optional agents.telemetry.RunTelemetry (OTLP export)

    async def write_step(self, record: StepRecord) -> None:
        data = step_data_redact(_record_values(record))
        data["cost_usd"] = Decimal(str(round(record.cost_usd, 6)))
        now = timezone.now()
        data.pop("step_number")  # the recorder numbers the steps, and tells the runtime
        number = self.next_step_number
        record.step_number = number
        # Queued is as good as taken: even if this run is cancelled while waiting, the row
        # goes in, so the next step must not reuse its number.
        self.next_step_number += 1
        try:
            step = await step_batcher().write(
                Step(
                    trace_id=self.trace_id,
                    step_number=number,
                    started_at=now - timedelta(milliseconds=record.latency_ms),
                    created_at=now,
                    **data,
                )
            )
        except IntegrityError as exc:
            raise RunConflict(f"step {number} of trace {self.trace_id} already exists") from exc
        logger.debug("trace.step", extra={"trace_id": self.trace_id, "step": step.step_number})
        if self.on_step is not None:
            self.on_step(step)
        if self.telemetry is not None:
            # Exported as it is stored: the tool name may be the model's own text.
            self.telemetry.step(replace(record, tool_name=step.tool_name))

    async def recorded_tool_call(self, idempotency_key: str) -> StepRecord | None:
        step = await db_async(Step.objects.filter(idempotency_key=idempotency_key).first)()
        return step_to_record(step) if step else None

    async def tool_recent_timeouts(self, tool_name: str) -> int:
        since = timezone.now() - timedelta(hours=1)
        # Count calls, not rows: a failed call an error handler took over is recorded twice,
        # and replays are not traffic.
        return await db_async(
            Step.objects.filter(tool_name=tool_name, error_type="TIMEOUT", created_at__gte=since)
            .filter(details__auxiliary__isnull=True)  # "exclude(=True)" drops missing keys
            .exclude(trace__source="replay")
            .count
        )()
