"""Refuse what an API request names but the endpoint does not know.

A misspelt filter (``?statuss=failed``), a filter of the pages that the API lacks
(``?q=``), or a field a client thinks it can set (``{"priority": "high"}``) used to be
ignored: the client got the whole list, or a run without what it asked for, and no hint.
Each unknown name is now a 400 that lists the names the endpoint takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError

# Taken by every list as well as its filters: the pagination, and DRF's format override.
LIST_PARAMETERS = ("limit", "offset", "format")


def unknown_names_errors(given: Iterable[str], known: Iterable[str], *, what: str) -> dict:
    """{name: [message]} for every name in ``given`` that is not in ``known``."""
    known = list(dict.fromkeys(known))
    takes = ", ".join(known) if known else "none"
    return {
        name: [f"Unknown {what}; this endpoint takes: {takes}."]
        for name in sorted(set(given) - set(known))
    }


class KnownFieldsSerializer(serializers.Serializer):
    """A request body whose every key is one of the serializer's fields."""

    def to_internal_value(self, data: Any) -> Any:
        errors: dict = {}
        if isinstance(data, Mapping):
            errors = unknown_names_errors(data.keys(), self.fields.keys(), what="field")
        try:
            value = super().to_internal_value(data)
        except ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise ValidationError({**exc.detail, **errors}) from exc
            raise
        if errors:
            raise ValidationError(errors)
        return value
