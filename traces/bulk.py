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

import itertools
import json
import operator
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, TypeVar

from django.db import connections
from django.db.models import DateField, JSONField, Model
from django.db.models.base import ModelState
from django.db.models.fields import Field
from django.utils import timezone

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
    meta = model._meta
    fields = [
        f
        for f in meta.concrete_fields
        if not (f.primary_key and getattr(f, "db_returning", False))  # serial ids
    ]
    # All the attributes in one C call per row, then the few values that need converting.
    names = [f.attname for f in fields]
    row_of = operator.itemgetter(*names) if len(names) > 1 else lambda values: (values[names[0]],)
    conversions = [(i, c) for i, c in enumerate(map(_converter, fields)) if c is not None]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"COPY {connection.ops.quote_name(meta.db_table)} ({columns}) FROM STDIN"
    # The raw psycopg cursor: wrap its errors as Django's (IntegrityError and the rest).
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(sql) as copy,
    ):
        for obj in itertools.chain((first,), objs):
            row = list(row_of(obj.__dict__))
            for index, convert in conversions:
                row[index] = convert(row[index])
            copy.write_row(row)
