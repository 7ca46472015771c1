"""Bulk inserts through PostgreSQL ``COPY``, for writers that need no ids back.

``bulk_create`` renders one ``INSERT`` with a placeholder per value and has psycopg quote
each of them: for thousands of rows that costs several times what the server spends
storing them. ``COPY ... FROM STDIN`` streams the rows instead. It cannot skip conflicts
and returns no generated keys, so it suits rows whose primary key is set by the caller
or never read back (the OTLP ingest's Traces and Steps), written in a transaction that
fails whole on a unique violation.

On another database (SQLite, the embedded shape) it falls back to ``bulk_create``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import connections
from django.db.models import DateField, JSONField, Model
from django.db.models.base import ModelState
from django.db.models.fields import Field
from django.utils import timezone
from psycopg import Copy
from psycopg import errors as psycopg_errors
from psycopg.copy import LibpqWriter
from psycopg.generators import copy_end, fetch_many
from psycopg.pq import ExecStatus
from psycopg.waiting import Wait

M = TypeVar("M", bound=Model)
_EMPTY_JSON: dict[type, str] = {dict: "{}", list: "[]"}


@cache
def _defaults(
    model: type[Model],
) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...], frozenset[str]]:
    """A model's default attribute values: the constant ones, and the callable ones (a
    fresh ``dict`` per instance) to call each time."""
    constant: dict[str, Any] = {}
    made: list[tuple[str, Any]] = []
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            made.append((field.attname, field.default))
        else:
            constant[field.attname] = field.get_default()
    return constant, tuple(made), frozenset(f.attname for f in model._meta.concrete_fields)


def model_new(model: type[M], values: dict[str, Any]) -> M:
    """An unsaved instance, as ``model(**values)`` makes it, with attribute names as keys
    (``trace_id``, not ``trace``) and without the per-field work of ``Model.__init__``
    (several times faster, for rows made by the thousand).
    """
    constant, made, attnames = _defaults(model)
    if not values.keys() <= attnames:
        unknown = ", ".join(sorted(values.keys() - attnames))
        raise TypeError(f"{model.__name__} has no field {unknown}")
    obj = model.__new__(model)
    obj._state = ModelState()
    attributes = obj.__dict__
    attributes.update(constant)
    for name, default in made:
        if name not in values:
            attributes[name] = default()
    attributes.update(values)
    return obj


def _converter(field: Field[Any, Any]) -> Callable[[Any], Any] | None:
    """How a model attribute becomes a COPY value; None when psycopg adapts it as it is."""
    if isinstance(field, JSONField):
        encoder = field.encoder

        def to_json(value: Any) -> Any:
            if value is None:
                return None
            if not value and type(value) in _EMPTY_JSON:  # most JSON columns hold nothing
                return _EMPTY_JSON[type(value)]
            return json.dumps(value, cls=encoder)

        return to_json
    if isinstance(field, DateField) and (field.auto_now or field.auto_now_add):

        def stamped(value: Any) -> Any:
            return timezone.now() if value is None else value

        return stamped
    return None


@dataclass(frozen=True)
class _CopyPlan:
    sql: str
    row_of: Callable[[dict[str, Any]], tuple[Any, ...]]
    conversions: tuple[tuple[int, Callable[[Any], Any]], ...]


_plans: dict[tuple[type[Model], str], _CopyPlan] = {}


def _copy_plan(model: type[Model], connection: Any) -> _CopyPlan:
    """The plan of ``model``'s ``COPY`` on ``connection``, made once per process."""
    key = (model, connection.alias)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _copy_plan_make(model, connection)
    return plan


def _copy_plan_make(model: type[Model], connection: Any) -> _CopyPlan:
    meta = model._meta
    fields = [
        f
        for f in meta.concrete_fields
        if not (f.primary_key and getattr(f, "db_returning", False))  # serial ids
    ]
    # All the attributes in one C call per row, then the few values that need converting.
    names = [f.attname for f in fields]
    row_of: Callable[[dict[str, Any]], tuple[Any, ...]] = (
        operator.itemgetter(*names) if len(names) > 1 else lambda values: (values[names[0]],)
    )
    conversions = tuple((i, c) for i, c in enumerate(map(_converter, fields)) if c is not None)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"COPY {connection.ops.quote_name(meta.db_table)} ({columns}) FROM STDIN"
    return _CopyPlan(sql, row_of, conversions)


def _rows_write(copy: Any, plan: _CopyPlan, objs: Iterable[Model]) -> None:
    row_of, conversions = plan.row_of, plan.conversions
    for obj in objs:
        row = list(row_of(obj.__dict__))
        for index, convert in conversions:
            row[index] = convert(row[index])
        copy.write_row(row)


def rows_copy(model: type[Model], objs: Iterable[Model], *, using: str = "default") -> None:
    """Insert ``objs`` (unsaved instances) in one ``COPY``; the caller holds the transaction.

    An auto-increment primary key is left to the database (and stays ``None`` on the
    objects); any other primary key must be set. A unique violation raises
    ``IntegrityError``, as ``bulk_create`` would.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        rows = list(objs)
        if rows:
            model._default_manager.using(using).bulk_create(rows)
        return
    objs = iter(objs)
    first = next(objs, None)
    if first is None:
        return
    plan = _copy_plan(model, connection)
    # The raw psycopg cursor: wrap its errors as Django's (IntegrityError and the rest).
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(plan.sql) as copy,
    ):
        _rows_write(copy, plan, itertools.chain((first,), objs))


def _copy_end_sent(pgconn: Any) -> Any:
    """psycopg's end of a COPY, but for the server's answer: send CopyDone and flush."""
    while pgconn.put_copy_end(None) == 0:
        while not (yield Wait.W):
            continue
    yield from _flushed(pgconn)


def _flushed(pgconn: Any) -> Any:
    """Wait until what was sent has left libpq's output buffer."""
    while True:
        while not (yield Wait.W):
            continue
        if pgconn.flush() == 0:
            return


class _AnswerLater(LibpqWriter):
    """A COPY writer that ends the COPY without waiting for the server to store the rows:
    ``CopyStream`` reads its answer later."""

    def finish(self, exc: BaseException | None = None) -> None:
        if exc is not None:
            super().finish(exc)
            return
        self.connection.wait(_copy_end_sent(self._pgconn))


def _query_sent(pgconn: Any, query: bytes) -> Any:
    """Send a query and flush it, without waiting for its answer."""
    pgconn.send_query(query)
    yield from _flushed(pgconn)


# A queued COPY batch (model, rows), or a statement (its text, the values bound in).
_Queued = tuple[type[Model], Sequence[Model]] | str


class CopyStream:
    """``COPY`` batches of rows while the caller prepares the next ones (PostgreSQL).

    One ``COPY`` at a time is in flight: its rows are sent and ended without waiting for
    the server's answer, so that PostgreSQL stores them (the heap and index work, done
    when the ``COPY`` ends) while this process maps the next batch. Nothing waits on a
    round trip while the caller works: ``poll()`` reads what has arrived and takes the
    next step without blocking (a stored batch's answer read, the next batch's ``COPY``
    statement sent, its rows sent once the server has taken the statement), and when
    nothing is queued it starts the ``COPY`` of the next batch ahead (of the table the
    first batch went to), so that the rows go as soon as the caller adds them. Leaving the
    block waits for every batch and raises the first error (``IntegrityError`` on a unique
    violation, as ``rows_copy`` does); a ``COPY`` started ahead and not needed ends empty.
    On an exception inside the block the stream is wound down and the answers dropped, so
    that the caller's transaction can roll back. ``execute()`` queues a statement behind
    the batches, sent the same way.

    Elsewhere (SQLite) each batch is written when added, with ``bulk_create``, and each
    statement run when queued.
    """

    def __init__(self, *, using: str = "default") -> None:
        self.using = using
        self.connection = connections[using]
        self.queued: deque[_Queued] = deque()
        self.in_flight = False  # an ended COPY or a statement, its answer not read yet
        self.opening: type[Model] | None = None  # a COPY sent, the server's go-ahead unread
        self.open: type[Model] | None = None  # a COPY under way, waiting for its rows
        self._lead: type[Model] | None = None  # the first batch's table, started ahead

    def __enter__(self) -> CopyStream:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.flush()
            return
        self.queued.clear()
        with contextlib.suppress(Exception):  # the exception in hand is the one to raise
            self._wind_down()

    def add(self, model: type[Model], objs: Sequence[Model]) -> None:
        if not objs:
            return
        if self.connection.vendor != "postgresql":
            model._default_manager.using(self.using).bulk_create(list(objs))
            return
        if self._lead is None:
            self._lead = model
        self.queued.append((model, objs))
        self.poll()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement that returns nothing the caller reads (an upsert, say) after
        the batches queued before it, without waiting for it."""
        if self.connection.vendor != "postgresql":
            with self.connection.cursor() as cursor:
                cursor.execute(sql, params)
            return
        with self.connection.wrap_database_errors, self.connection.cursor() as cursor:
            # The values are bound into the text here, as the connection's client-side
            # cursors bind them for every statement.
            self.queued.append(cursor.cursor.mogrify(sql, params))
        self.poll()

    def idle(self) -> bool:
        """True when no batch is waiting or being stored (after reading any answer in); a
        ``COPY`` started ahead for the next batch is ready for it, not busy."""
        self.poll()
        return not self.in_flight and not self.queued

    def poll(self) -> None:
        """Take every step that needs no waiting."""
        if self.connection.vendor != "postgresql":
            return
        with self.connection.wrap_database_errors:
            while self._step(block=False):
                pass

    def flush(self) -> None:
        """Wait until every batch added is stored."""
        if self.connection.vendor != "postgresql":
            return
        with self.connection.wrap_database_errors:
            while self._step(block=True):
                pass

    def _step(self, *, block: bool) -> bool:
        """One step of the stream; False when none can be taken (without waiting, unless
        ``block``; blocking, when everything queued is stored)."""
        raw = self.connection.connection
        pgconn = raw.pgconn
        if self.in_flight or self.opening is not None:
            if not block:
                pgconn.consume_input()
                if pgconn.is_busy():
                    return False
            results = raw.wait(fetch_many(pgconn))
            if self.in_flight:
                self.in_flight = False
                _results_check(raw, results, ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK)
            else:
                model, self.opening = self.opening, None
                _results_check(raw, results, ExecStatus.COPY_IN)
                self.open = model
            return True
        if self.open is not None:
            head = self.queued[0] if self.queued else None
            if isinstance(head, tuple) and head[0] is self.open:
                self.queued.popleft()
                self._rows_send(*head)
            elif head is not None or block:
                # Something else comes first, or the caller is done: end it empty.
                self.open = None
                raw.wait(_copy_end_sent(pgconn))
                self.in_flight = True
            else:
                return False
            return True
        if self.queued:
            head = self.queued[0]
            if isinstance(head, str):
                self.queued.popleft()
                _transaction_begun(raw)
                raw.wait(_query_sent(pgconn, head.encode(raw.info.encoding)))
                self.in_flight = True
            else:
                self._start(head[0])
            return True
        if self._lead is not None and not block:
            self._start(self._lead)  # the next batch's, while the caller maps its rows
            return True
        return False

    def _start(self, model: type[Model]) -> None:
        """Send the ``COPY`` statement of ``model``'s rows; its go-ahead is read later."""
        self.connection.ensure_connection()
        raw = self.connection.connection
        plan = _copy_plan(model, self.connection)
        _transaction_begun(raw)
        raw.wait(_query_sent(raw.pgconn, plan.sql.encode(raw.info.encoding)))
        self.opening = model

    def _rows_send(self, model: type[Model], objs: Sequence[Model]) -> None:
        """Send the rows of the open ``COPY`` and end it, without waiting for the server."""
        plan = _copy_plan(model, self.connection)
        with (
            self.connection.cursor() as cursor,
            Copy(cursor.cursor, writer=_AnswerLater(cursor.cursor)) as copy,
        ):
            _rows_write(copy, plan, objs)
        self.open = None
        self.in_flight = True

    def _wind_down(self) -> None:
        """After an error: end a ``COPY`` under way as failed and drop every answer, so that
        the connection can roll the transaction back."""
        raw = self.connection.connection
        opening, self.opening = self.opening, None
        if opening is not None:
            results = raw.wait(fetch_many(raw.pgconn))
            if results and results[-1].status == ExecStatus.COPY_IN:
                self.open = opening
        if self.open is not None:
            self.open = None
            with contextlib.suppress(psycopg_errors.Error):
                raw.wait(copy_end(raw.pgconn, b"abandoned by the writer"))
        if self.in_flight:
            self.in_flight = False
            raw.wait(fetch_many(raw.pgconn))


def _transaction_begun(raw: Any) -> None:
    """Open the connection's transaction, as psycopg does before a statement of its own:
    the stream sends its statements itself, and one sent first would run outside it."""
    raw.wait(raw._start_query())


def _results_check(raw: Any, results: list[Any], *expected: ExecStatus) -> None:
    for result in results:
        if result.status not in expected:
            raise psycopg_errors.error_from_result(result, encoding=raw.pgconn._encoding)
