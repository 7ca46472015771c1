"""Limit/offset pagination that refuses bad values instead of guessing, and that never
counts a large table in full.

A page reads one row more than it shows to know whether there is a next page. ``count`` is
exact up to ``EXACT_COUNT_CAP`` matching rows (a count over at most that many rows); above
that it is PostgreSQL's planner estimate for the query and ``count_exact`` is false. The
planner is asked first: when it expects more than ``ESTIMATE_TRUSTED_ABOVE`` rows, the
capped count is skipped too, since even counting to the cap can cost a join over every
matching row (at 10M steps, a support user's steps by tool: 177 ms of the 204). The order
is the view's, with the id breaking ties, so offsets neither skip nor repeat rows.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any

from django.db import connections
from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

# Counting up to this many rows costs about a millisecond; past it the count is estimated.
EXACT_COUNT_CAP = 1000

# A planner estimate this far past the cap is taken as "more than the cap" without counting:
# a 10x overestimate of a set of at most EXACT_COUNT_CAP rows is what it would take to be
# wrong, and then the count is only labelled an estimate (count_exact false), never below
# the rows known to exist.
ESTIMATE_TRUST_FACTOR = 10


def estimate_trusted_above() -> int:
    return EXACT_COUNT_CAP * ESTIMATE_TRUST_FACTOR


# PostgreSQL's LIMIT/OFFSET are bigints; an unbounded value from the query string used to
# reach the database and come back as a 500.
MAX_OFFSET = 2**31 - 1


def _bounded_int(request: Request, name: str, *, default: int, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # int() alone would also take " 7", "+7", "7_0" and non-ASCII digits.
    if not re.fullmatch(r"-?[0-9]+", raw):
        raise ValidationError({name: ["A valid integer is required."]})
    # Too many digits for int() is out of range as well.
    value = int(raw) if len(raw) <= 20 else maximum + 1
    if not minimum <= value <= maximum:
        raise ValidationError({name: [f"Must be between {minimum} and {maximum}."]})
    return value


def planner_row_estimate(qs: QuerySet) -> int | None:
    """The planner's row estimate for ``qs`` (PostgreSQL), or None where there is none."""
    connection = connections[qs.db]
    if connection.vendor != "postgresql":
        return None
    sql, params = qs.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """``limit`` in 1..max_limit and ``offset`` in 0..MAX_OFFSET, else a 400; both documented.
    No full COUNT: see the module's docstring."""

    max_limit = 200
    count_exact = True
    has_next = False

    def paginate_queryset(
        self, queryset: Any, request: Request, view: Any = None
    ) -> list[Any] | None:
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        rows = list(queryset[self.offset : self.offset + self.limit + 1])
        self.has_next = len(rows) > self.limit
        rows = rows[: self.limit]
        self.count, self.count_exact = self._count(queryset, shown=len(rows))
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        return rows

    def _count(self, queryset: Any, *, shown: int) -> tuple[int, bool]:
        offset = self.offset or 0  # set by paginate_queryset (get_offset's int)
        if not self.has_next and (shown or offset == 0):
            return offset + shown, True  # the last page: the count is known
        if not isinstance(queryset, QuerySet):
            return len(queryset), True
        # At least the rows known to exist, whatever the estimate says.
        known = offset + shown + (1 if self.has_next else 0)
        estimate = planner_row_estimate(queryset)
        if estimate is not None and estimate > estimate_trusted_above():
            return max(estimate, known), False
        capped = queryset.order_by()[: EXACT_COUNT_CAP + 1].count()
        if capped <= EXACT_COUNT_CAP:
            return capped, True
        if estimate is None:
            return queryset.count(), True
        return max(estimate, known, EXACT_COUNT_CAP + 1), False

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        return super().get_next_link()

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            OrderedDict(
                [
                    ("count", self.count),
                    ("count_exact", self.count_exact),
                    ("next", self.get_next_link()),
                    ("previous", self.get_previous_link()),
                    ("results", data),
                ]
            )
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        response = super().get_paginated_response_schema(schema)
        properties = response["properties"]
        properties["count"]["description"] = (
            f"Matching rows: exact up to {EXACT_COUNT_CAP}, else the planner's estimate "
            "(see count_exact)."
        )
        response["properties"] = {
            "count": properties["count"],
            "count_exact": {
                "type": "boolean",
                "example": True,
                "description": "False when count is an estimate.",
            },
            **{name: value for name, value in properties.items() if name != "count"},
        }
        response["required"] = ["count", "count_exact", "results"]
        return response

    def get_limit(self, request: Request) -> int:
        assert self.default_limit is not None  # PAGE_SIZE is set
        return _bounded_int(
            request,
            self.limit_query_param,
            default=self.default_limit,
            minimum=1,
            maximum=self.max_limit,
        )

    def get_offset(self, request: Request) -> int:
        return _bounded_int(
            request, self.offset_query_param, default=0, minimum=0, maximum=MAX_OFFSET
        )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
