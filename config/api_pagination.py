"""Limit/offset pagination that refuses bad values instead of guessing."""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

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


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """``limit`` in 1..max_limit and ``offset`` in 0..MAX_OFFSET, else a 400; both documented."""

    max_limit = 200

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
