"""Tests of the schema-guided argument adapters."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agents.tools.adapters import (
    ADAPTERS,
    AdapterFiring,
    ValidationIssue,
    adapt_arguments,
    validate_arguments,
)

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^#W\\d{7}$"},
        "limit": {"type": "integer", "minimum": 1},
        "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
        "express": {"type": "boolean"},
        "weight": {"type": "number"},
        "since": {"type": "integer", "format": "unix-time"},
        "until": {"type": "integer", "x-format": "epoch"},
        "created_at": {"type": "string", "format": "date-time"},
        "ship_date": {"type": "string", "format": "date"},
        "note": {"type": "string"},
        "code": {"type": "string", "pattern": "^[A-Z]+ [A-Z]+$"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer"},
                    "gift": {"type": "boolean"},
                },
                "required": ["sku"],
            },
        },
        "shipping": {
            "type": "object",
            "properties": {
                "carrier": {"type": "string", "enum": ["UPS", "FedEx"]},
                "address": {
                    "type": "object",
                    "properties": {"zip": {"type": "string"}},
                },
            },
        },
    },
    "required": ["order_id"],
    "additionalProperties": False,
}


def adapt(arguments: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], list[AdapterFiring]]:
    adapted, firings, issues = adapt_arguments(schema=ORDER_SCHEMA, arguments=arguments, **kwargs)
    assert issues == []
    return adapted, firings


@pytest.mark.parametrize(
    ("field", "before", "after", "adapter"),
    [
        ("limit", "42", 42, "numeric_string_to_int"),
        ("limit", " 7 ", 7, "numeric_string_to_int"),
        ("limit", "42.0", 42, "numeric_string_to_int"),
        ("limit", 3.0, 3, "numeric_string_to_int"),
        ("note", 42, "42", "int_to_string"),
        ("weight", "3.5", 3.5, "numeric_string_to_number"),
        ("weight", "4", 4, "numeric_string_to_number"),
        ("express", "true", True, "bool_coercion"),
        ("express", "True", True, "bool_coercion"),
        ("express", "TRUE", True, "bool_coercion"),
        ("express", "yes", True, "bool_coercion"),
        ("express", "1", True, "bool_coercion"),
        ("express", 1, True, "bool_coercion"),
        ("express", "false", False, "bool_coercion"),
        ("express", "0", False, "bool_coercion"),
        ("express", 0, False, "bool_coercion"),
        ("express", "no", False, "bool_coercion"),
        ("since", "2024-01-01T00:00:00Z", 1704067200, "iso8601_to_epoch"),
        ("since", "2024-01-01T02:00:00+02:00", 1704067200, "iso8601_to_epoch"),
        ("since", "2024-01-01", 1704067200, "iso8601_to_epoch"),
        ("until", "2024-01-01T00:00:00", 1704067200, "iso8601_to_epoch"),
        ("since", "1704067200", 1704067200, "numeric_string_to_int"),
        ("created_at", 1704067200, "2024-01-01T00:00:00Z", "epoch_to_iso8601"),
        ("created_at", 1704067200.5, "2024-01-01T00:00:00Z", "epoch_to_iso8601"),
        ("created_at", "1704067200", "2024-01-01T00:00:00Z", "epoch_to_iso8601"),
        ("ship_date", 1704067200, "2024-01-01", "epoch_to_iso8601"),
        ("status", " shipped ", "shipped", "trim_whitespace"),
        ("code", "  ABC   DEF ", "ABC DEF", "trim_whitespace"),
        ("status", "Shipped!", "shipped", "enum_normalise"),
        ("status", " DELIVERED ", "delivered", "enum_normalise"),
        ("status", "PENDING.", "pending", "enum_normalise"),
    ],
)
def test_adapter_repairs_value(field: str, before: Any, after: Any, adapter: str) -> None:
    adapted, firings = adapt({"order_id": "#W1234567", field: before})

    assert adapted[field] == after
    assert type(adapted[field]) is type(after)
    assert firings == [AdapterFiring(adapter=adapter, path=field, before=before, after=after)]


def test_order_id_with_whitespace_is_trimmed_to_match_pattern() -> None:
    adapted, firings = adapt({"order_id": " #W1234567\n"})

    assert adapted == {"order_id": "#W1234567"}
    assert [firing.adapter for firing in firings] == ["trim_whitespace"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("limit", "forty-two"),
        ("limit", "42.5"),
        ("limit", True),
        ("express", "maybe"),
        ("express", 2),
        ("status", "lost"),
        ("since", "yesterday"),
        ("created_at", "not a date"),
    ],
)
def test_unrepairable_value_is_reported(field: str, value: Any) -> None:
    adapted, firings, issues = adapt_arguments(
        schema=ORDER_SCHEMA, arguments={"order_id": "#W1234567", field: value}
    )

    assert adapted[field] == value
    assert firings == []
    assert [issue.path for issue in issues] == [field]


def test_repair_that_still_breaks_a_constraint_is_not_applied() -> None:
    adapted, firings, issues = adapt_arguments(
        schema=ORDER_SCHEMA, arguments={"order_id": "#W1234567", "limit": "0"}
    )

    assert adapted["limit"] == "0"
    assert firings == []
    assert [(issue.path, issue.validator) for issue in issues] == [("limit", "type")]


def test_disabled_adapter_leaves_issue() -> None:
    adapted, firings, issues = adapt_arguments(
        schema=ORDER_SCHEMA,
        arguments={"order_id": "#W1234567", "limit": "42"},
        enabled=["bool_coercion", "enum_normalise"],
    )

    assert adapted["limit"] == "42"
    assert firings == []
    assert issues == [
        ValidationIssue(
            path="limit",
            validator="type",
            message="'42' is not of type 'integer'",
            expected_type="integer",
        )
    ]


def test_unknown_adapter_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="no_such_adapter"):
        adapt_arguments(schema=ORDER_SCHEMA, arguments={}, enabled=["no_such_adapter"])


def test_nested_values_are_repaired_with_item_paths() -> None:
    arguments = {
        "order_id": "#W1234567",
        "items": [{"sku": "A1", "qty": "2"}, {"sku": "B2", "qty": 1, "gift": "yes"}],
        "shipping": {"carrier": "fedex", "address": {"zip": 94107}},
    }

    adapted, firings = adapt(arguments)

    assert adapted["items"] == [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": 1, "gift": True}]
    assert adapted["shipping"] == {"carrier": "FedEx", "address": {"zip": "94107"}}
    assert firings == [
        AdapterFiring(adapter="numeric_string_to_int", path="items/0/qty", before="2", after=2),
        AdapterFiring(adapter="bool_coercion", path="items/1/gift", before="yes", after=True),
        AdapterFiring(
            adapter="int_to_string", path="shipping/address/zip", before=94107, after="94107"
        ),
        AdapterFiring(
            adapter="enum_normalise", path="shipping/carrier", before="fedex", after="FedEx"
        ),
    ]


def test_integral_float_in_list_item_becomes_int() -> None:
    adapted, firings = adapt({"order_id": "#W1234567", "items": [{"sku": "A", "qty": 2.0}]})

    assert adapted["items"] == [{"sku": "A", "qty": 2}]
    assert firings == [
        AdapterFiring(adapter="numeric_string_to_int", path="items/0/qty", before=2.0, after=2)
    ]


def test_input_is_not_mutated() -> None:
    arguments = {"order_id": "#W1234567", "items": [{"sku": "A1", "qty": "2"}], "limit": "5"}
    snapshot = copy.deepcopy(arguments)

    adapted, _ = adapt(arguments)

    assert arguments == snapshot
    assert adapted["items"] is not arguments["items"]


def test_missing_required_field_is_never_invented() -> None:
    adapted, firings, issues = adapt_arguments(schema=ORDER_SCHEMA, arguments={"limit": "3"})

    assert "order_id" not in adapted
    assert [firing.path for firing in firings] == ["limit"]
    assert issues == [
        ValidationIssue(
            path="order_id",
            validator="required",
            message="'order_id' is a required property",
            expected_type="string",
        )
    ]


def test_missing_nested_required_field_is_reported_at_its_path() -> None:
    issues = validate_arguments(
        schema=ORDER_SCHEMA, arguments={"order_id": "#W1234567", "items": [{"qty": 1}]}
    )

    assert [(issue.path, issue.validator) for issue in issues] == [("items/0/sku", "required")]


def test_additional_property_is_reported_not_dropped() -> None:
    adapted, firings, issues = adapt_arguments(
        schema=ORDER_SCHEMA, arguments={"order_id": "#W1234567", "orderId": "x"}
    )

    assert adapted == {"order_id": "#W1234567", "orderId": "x"}
    assert firings == []
    assert [(issue.path, issue.validator) for issue in issues] == [
        ("orderId", "additionalProperties")
    ]


def test_valid_input_has_no_firings() -> None:
    arguments = {
        "order_id": "#W1234567",
        "limit": 3,
        "status": "shipped",
        "express": False,
        "created_at": "2024-01-01T00:00:00Z",
        "items": [{"sku": "A1", "qty": 2}],
    }

    adapted, firings, issues = adapt_arguments(schema=ORDER_SCHEMA, arguments=arguments)

    assert adapted == arguments
    assert firings == []
    assert issues == []


def test_validate_arguments_is_sorted_and_names_validators() -> None:
    issues = validate_arguments(
        schema=ORDER_SCHEMA,
        arguments={"status": "lost", "limit": 0, "order_id": "W1", "extra": 1},
    )

    assert [(issue.path, issue.validator, issue.expected_type) for issue in issues] == [
        ("extra", "additionalProperties", None),
        ("limit", "minimum", "integer"),
        ("order_id", "pattern", "string"),
        ("status", "enum", "string"),
    ]


def test_any_of_branch_is_targeted() -> None:
    schema = {
        "type": "object",
        "properties": {"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
    }

    adapted, firings, issues = adapt_arguments(schema=schema, arguments={"limit": "10"})

    assert adapted == {"limit": 10}
    assert [firing.adapter for firing in firings] == ["numeric_string_to_int"]
    assert issues == []


def test_registry_lists_every_adapter() -> None:
    assert list(ADAPTERS) == [
        "trim_whitespace",
        "enum_normalise",
        "iso8601_to_epoch",
        "epoch_to_iso8601",
        "numeric_string_to_int",
        "numeric_string_to_number",
        "bool_coercion",
        "int_to_string",
    ]
