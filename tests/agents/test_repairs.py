"""The repair vocabulary: each value transform and argument move, all-or-nothing chains,
clear errors for bad step data, and unsafe regexes refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agents.policy_runtime import AdapterRule, apply_adapters, fired_locations
from agents.repairs import (
    STEP_TYPES,
    RepairContext,
    RepairNotApplicable,
    regex_problem,
    repair_apply,
    repair_attempt,
    repair_steps_data,
    repair_steps_json_schema,
    repair_steps_parse,
)


def apply(steps: list[dict[str, Any]], args: dict[str, Any], **context: Any) -> dict[str, Any]:
    return repair_apply(repair_steps_parse(steps), args, RepairContext(**context))


def one(step: dict[str, Any], value: Any) -> Any:
    return apply([{"field": "v", **step}], {"v": value})["v"]


def cannot(step: dict[str, Any], value: Any) -> str:
    with pytest.raises(RepairNotApplicable) as caught:
        one(step, value)
    return caught.value.reason


# --- value transforms -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "value", "expected"),
    [
        ({"op": "case", "to": "lower"}, "SHIPPED", "shipped"),
        ({"op": "case", "to": "upper"}, "ab-12", "AB-12"),
        ({"op": "case", "to": "title"}, "new york", "New York"),
        ({"op": "trim"}, "  W123 ", "W123"),
        ({"op": "trim", "chars": "#"}, "##W1#", "W1"),
        ({"op": "strip_prefix", "value": "#W"}, "#W1234567", "1234567"),
        ({"op": "strip_prefix", "value": "#W"}, "1234567", "1234567"),  # already stripped
        ({"op": "strip_prefix", "value": "ord_", "ignore_case": True}, "ORD_9", "9"),
        ({"op": "strip_suffix", "value": "-EU"}, "SKU1-EU", "SKU1"),
        ({"op": "add_prefix", "value": "#W"}, "1234567", "#W1234567"),
        ({"op": "add_prefix", "value": "#W"}, 1234567, "#W1234567"),
        ({"op": "add_prefix", "value": "#W"}, "#W1234567", "#W1234567"),  # already there
        ({"op": "add_suffix", "value": ".json"}, "report", "report.json"),
        (
            {"op": "regex_replace", "pattern": r"^(\d{3})(\d{4})$", "replacement": r"\1-\2"},
            "5551234",
            "555-1234",
        ),
        ({"op": "regex_replace", "pattern": r"\s+", "replacement": " "}, "a   b", "a b"),
        ({"op": "regex_replace", "pattern": "x", "replacement": "y", "count": 1}, "xx", "yx"),
        ({"op": "zero_pad", "width": 8}, "1234567", "01234567"),
        ({"op": "zero_pad", "width": 8}, 42, "00000042"),
        ({"op": "zero_pad", "width": 3}, "12345", "12345"),  # already wide enough
        ({"op": "separators", "from": "-", "to": "_"}, "AB-12-X", "AB_12_X"),
        ({"op": "separators", "from": ["-", "_"], "to": ""}, "AB-12_X", "AB12X"),
        ({"op": "coerce", "to": "integer"}, " 42 ", 42),
        ({"op": "coerce", "to": "integer"}, 42.0, 42),
        ({"op": "coerce", "to": "integer", "digits_only": True}, "#W1234567", 1234567),
        ({"op": "coerce", "to": "number"}, "3.25", 3.25),
        ({"op": "coerce", "to": "number"}, "7", 7),
        ({"op": "coerce", "to": "string"}, 1234567, "1234567"),
        ({"op": "coerce", "to": "string"}, 2.0, "2"),
        ({"op": "date_format", "from": "%d/%m/%Y", "to": "%Y-%m-%d"}, "31/12/2026", "2026-12-31"),
        (
            {"op": "date_format", "from": ["%Y-%m-%d", "%d.%m.%Y"], "to": "%m/%d/%Y"},
            "05.03.2026",
            "03/05/2026",
        ),
        # Already in the target format: left alone.
        ({"op": "date_format", "from": "%d/%m/%Y", "to": "%Y-%m-%d"}, "2026-12-31", "2026-12-31"),
        ({"op": "enum_map", "map": {"shipped": "SHIPPED", "pending": "OPEN"}}, "pending", "OPEN"),
        ({"op": "enum_map", "map": {"shipped": "SHIPPED"}}, "SHIPPED", "SHIPPED"),
        ({"op": "enum_map", "map": {"shipped": "S"}, "ignore_case": True}, "Shipped", "S"),
        ({"op": "enum_map", "map": {"a": "b"}, "otherwise": "keep"}, "zzz", "zzz"),
        ({"op": "scale", "factor": 100}, "12.34", 1234),
        ({"op": "scale", "factor": 0.01}, 1234, 12.34),
        ({"op": "scale", "factor": 1000, "round": 0}, 1.23456, 1235),
    ],
)
def test_each_value_transform(step: dict[str, Any], value: Any, expected: Any) -> None:
    result = one(step, value)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("step", "value", "reason"),
    [
        ({"op": "case", "to": "lower"}, 12, "v is a number, not text"),
        ({"op": "trim"}, None, "v is null, not text"),
        ({"op": "coerce", "to": "integer"}, "12a", "v '12a' is not an integer"),
        ({"op": "coerce", "to": "integer"}, 1.5, "v 1.5 is not a whole number"),
        ({"op": "coerce", "to": "integer", "digits_only": True}, "abc", "v has no digits"),
        ({"op": "coerce", "to": "number"}, "twelve", "v 'twelve' is not a number"),
        ({"op": "coerce", "to": "integer"}, True, "v is a boolean"),
        ({"op": "coerce", "to": "string"}, {"a": 1}, "v is an object, not a scalar"),
        (
            {"op": "date_format", "from": "%d/%m/%Y", "to": "%Y-%m-%d"},
            "tomorrow",
            "v 'tomorrow' is in none of %d/%m/%Y",
        ),
        ({"op": "enum_map", "map": {"a": "b"}}, "zzz", "v 'zzz' is not in the map"),
        ({"op": "scale", "factor": 2}, "lots", "v 'lots' is not a number"),
        (
            {"op": "regex_replace", "pattern": r"\d+", "must_match": True},
            "abc",
            "v 'abc' does not match '\\\\d+'",
        ),
        ({"op": "zero_pad", "width": 4}, -3, "v is negative"),
    ],
)
def test_a_value_transform_that_cannot_apply_says_why(
    step: dict[str, Any], value: Any, reason: str
) -> None:
    assert cannot(step, value) == reason


def test_a_value_transform_on_a_missing_argument_cannot_apply() -> None:
    with pytest.raises(RepairNotApplicable) as caught:
        apply([{"op": "trim", "field": "sku"}], {"query": "cap"})
    assert str(caught.value) == "step 1 (trim): no argument 'sku'"


# --- argument moves ---------------------------------------------------------------------
def test_rename_moves_the_value_and_keeps_or_sets_its_location() -> None:
    steps = repair_steps_parse([{"op": "rename", "from": "q", "to": "query"}])
    outcome = repair_attempt(steps, {"q": "cap", "limit": 3}, tool_locations={"q": "query"})
    assert outcome.arguments == {"query": "cap", "limit": 3}
    assert outcome.locations == {"query": "query"}
    assert outcome.changed == ("q", "query")
    moved = repair_steps_parse([{"op": "rename", "from": "q", "to": "term", "in": "body"}])
    assert repair_attempt(moved, {"q": "cap"}).locations == {"term": "body"}


def test_rename_is_idempotent_and_refuses_to_overwrite() -> None:
    step = [{"op": "rename", "from": "q", "to": "query"}]
    assert apply(step, {"query": "cap"}) == {"query": "cap"}  # already renamed
    with pytest.raises(RepairNotApplicable, match="both 'q' and 'query' are given"):
        apply(step, {"q": "a", "query": "b"})
    with pytest.raises(RepairNotApplicable, match="no argument 'q'"):
        apply(step, {"other": 1})


def test_drop_removes_an_argument_and_tolerates_its_absence() -> None:
    assert apply([{"op": "drop", "name": "debug"}], {"debug": True, "sku": "A"}) == {"sku": "A"}
    assert apply([{"op": "drop", "name": "debug"}], {"sku": "A"}) == {"sku": "A"}


def test_add_from_the_query_the_customer_a_key_fact_or_a_constant() -> None:
    args = {"sku": "CAP-0001-BL"}
    assert apply(
        [{"op": "add", "name": "order_id", "from": "query", "pattern": r"#W(\d{7})", "group": 1}],
        args,
        query="Where is #W1234567?",
    ) == {**args, "order_id": "1234567"}
    assert apply(
        [{"op": "add", "name": "customer_id", "from": "customer", "in": "query"}],
        args,
        customer_id="C-42",
    ) == {**args, "customer_id": "C-42"}
    facts = (
        ("search_products", json.dumps({"results": [{"sku": "OLD"}]})),
        ("get_order", json.dumps({"order": {"currency": "EUR"}})),
        ("search_products", json.dumps({"results": [{"sku": "NEW"}]})),
    )
    # The newest result of the named tool wins.
    assert apply(
        [
            {
                "op": "add",
                "name": "ref",
                "from": "fact",
                "tool": "search_products",
                "path": "results.0.sku",
            }
        ],
        {},
        facts=facts,
    ) == {"ref": "NEW"}
    by_pattern = {"op": "add", "name": "currency", "from": "fact", "pattern": r"\b[A-Z]{3}\b"}
    assert apply([by_pattern], {}, facts=facts) == {"currency": "NEW"}  # any tool, newest
    assert apply([{**by_pattern, "tool": "get_order"}], {}, facts=facts) == {"currency": "EUR"}
    assert apply([{"op": "add", "name": "v", "from": "value", "value": 2}], {}) == {"v": 2}


def test_add_keeps_a_given_argument_unless_told_to_overwrite() -> None:
    step = {"op": "add", "name": "customer_id", "from": "customer"}
    assert apply([step], {"customer_id": "X"}, customer_id="C-1") == {"customer_id": "X"}
    assert apply([{**step, "overwrite": True}], {"customer_id": "X"}, customer_id="C-1") == {
        "customer_id": "C-1"
    }


def test_add_with_nothing_to_take_cannot_apply() -> None:
    with pytest.raises(RepairNotApplicable, match="no value for order_id in the query"):
        apply(
            [{"op": "add", "name": "order_id", "from": "query", "pattern": r"\d{7}"}],
            {},
            query="hello",
        )
    with pytest.raises(RepairNotApplicable, match="no value for c in the customer id"):
        apply([{"op": "add", "name": "c", "from": "customer"}], {})
    with pytest.raises(RepairNotApplicable, match="key facts of get_order"):
        apply(
            [{"op": "add", "name": "x", "from": "fact", "tool": "get_order", "path": "a.b"}],
            {},
            facts=(("get_order", '{"a": {"c": 1}}'),),
        )


# --- chains -----------------------------------------------------------------------------
def test_a_chain_composes_value_transforms_and_moves() -> None:
    steps = [
        {"op": "rename", "from": "id", "to": "order_id", "in": "path"},
        {"op": "strip_prefix", "field": "order_id", "value": "#W"},
        {"op": "zero_pad", "field": "order_id", "width": 9},
        {"op": "add", "name": "customer_id", "from": "customer"},
        {"op": "drop", "name": "debug"},
    ]
    assert apply(steps, {"id": "#W1234567", "debug": 1}, customer_id="C-7") == {
        "order_id": "001234567",
        "customer_id": "C-7",
    }


def test_a_chain_applies_all_or_nothing() -> None:
    steps = repair_steps_parse(
        [
            {"op": "rename", "from": "q", "to": "query"},
            {"op": "case", "field": "query", "to": "lower"},
            {"op": "coerce", "field": "limit", "to": "integer"},
        ]
    )
    args = {"q": "CAP", "limit": "many"}
    outcome = repair_attempt(steps, args)
    assert not outcome.applied
    assert outcome.arguments == args  # the rename and the case change were not kept
    assert outcome.reason == "step 3 (coerce): limit 'many' is not an integer"
    assert args == {"q": "CAP", "limit": "many"}  # the caller's mapping is not touched


def test_an_optional_step_that_cannot_apply_is_skipped() -> None:
    steps = [
        {"op": "coerce", "field": "limit", "to": "integer", "optional": True},
        {"op": "case", "field": "q", "to": "lower"},
    ]
    assert apply(steps, {"q": "CAP", "limit": "many"}) == {"q": "cap", "limit": "many"}


def test_steps_round_trip_through_their_data() -> None:
    data = [
        {"op": "strip_prefix", "field": "order_id", "value": "#W"},
        {"op": "date_format", "field": "since", "from": ["%d/%m/%Y", "%d.%m.%Y"], "to": "%Y-%m-%d"},
        {"op": "enum_map", "field": "status", "map": {"a": "A"}, "otherwise": "keep"},
        {"op": "rename", "from": "q", "to": "query", "in": "query"},
        {"op": "add", "name": "c", "from": "customer", "optional": True},
        {"op": "separators", "field": "sku", "from": ["-"], "to": "_"},
        {"op": "scale", "field": "amount", "factor": 100, "round": 0},
    ]
    assert repair_steps_data(repair_steps_parse(data)) == data


def test_the_json_schema_covers_every_op_and_accepts_what_parses() -> None:
    schema = repair_steps_json_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    ops = [shape["properties"]["op"]["enum"][0] for shape in schema["items"]["anyOf"]]
    assert ops == list(STEP_TYPES)
    data = [
        {"op": "case", "field": "s", "to": "lower"},
        {"op": "coerce", "field": "n", "to": "integer", "digits_only": True},
        {"op": "separators", "field": "s", "from": ["-", "_"], "to": ""},
        {"op": "rename", "from": "q", "to": "query", "in": "query"},
        {"op": "add", "name": "v", "from": "value", "value": 2, "optional": True},
    ]
    repair_steps_parse(data)
    assert validator.is_valid(data)
    assert not validator.is_valid([{"op": "case", "field": "s", "to": "shout"}])
    assert not validator.is_valid([{"op": "trim", "field": "s", "colour": "red"}])


# --- the policy adapter ------------------------------------------------------------------
def test_digits_to_int_is_a_chain_of_steps_with_its_old_behaviour() -> None:
    rule = AdapterRule(7, "order_id", "digits_to_int")
    assert [step.as_data() for step in rule.chain] == [
        {"op": "coerce", "field": "order_id", "to": "integer", "digits_only": True}
    ]
    args, fired = apply_adapters((rule,), {"order_id": "#W1234567"})
    assert args == {"order_id": 1234567}
    assert fired == [
        {
            "strategy": 7,
            "adapter": "policy:digits_to_int",
            "path": "order_id",
            "before": "#W1234567",
            "after": 1234567,
        }
    ]
    # No digits: left as it was, and nothing fired.
    assert apply_adapters((rule,), {"order_id": "none"}) == ({"order_id": "none"}, [])


def test_an_adapter_with_steps_records_moves_and_their_locations() -> None:
    steps = tuple(repair_steps_parse([{"op": "rename", "from": "q", "to": "term", "in": "query"}]))
    rule = AdapterRule(3, "", steps=steps)
    args, fired = apply_adapters((rule,), {"q": "cap"})
    assert args == {"term": "cap"}
    assert fired[0]["adapter"] == "policy:rename"
    assert fired[0]["path"] == "q,term"
    assert (fired[0]["before"], fired[0]["after"]) == ({"q": "cap"}, {"term": "cap"})
    assert fired_locations(fired, args) == {"term": "query"}


# --- bad data ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("trim", "steps must be a list of step mappings"),
        ([], "steps must not be empty"),
        ([{"op": "trim", "field": "a"}] * 13, "at most 12 steps"),
        (["trim"], "step 1: must be a mapping with an 'op'"),
        ([{"op": "explode"}], "step 1: op must be one of case, trim,"),
        ([{"op": "case", "field": "a"}], "step 1 (case): missing 'to'"),
        ([{"op": "case", "field": "a", "to": "shout"}], "to must be one of lower, upper, title"),
        ([{"op": "trim", "field": "a", "colour": 1}], "step 1 (trim): unexpected 'colour'"),
        ([{"op": "trim"}], "a value transform needs a 'field' (or the adapter's field)"),
        ([{"op": "trim", "field": "a b"}], "field must be an argument name"),
        ([{"op": "zero_pad", "field": "a", "width": 0}], "width must be an integer 1..64"),
        ([{"op": "zero_pad", "field": "a", "width": True}], "width must be an integer 1..64"),
        ([{"op": "coerce", "field": "a", "to": "number", "digits_only": True}], "digits_only"),
        ([{"op": "separators", "field": "a", "from": "-", "to": "-"}], "to must differ"),
        ([{"op": "date_format", "field": "a", "from": "%Q", "to": "%Y"}], "from uses %Q"),
        ([{"op": "date_format", "field": "a", "from": "dd/mm", "to": "%Y"}], "no strftime"),
        ([{"op": "enum_map", "field": "a", "map": {}}], "map must be a mapping of 1..100"),
        ([{"op": "enum_map", "field": "a", "map": {"x": [1]}}], "map value for 'x'"),
        ([{"op": "scale", "field": "a", "factor": 0}], "factor must be a non-zero"),
        ([{"op": "scale", "field": "a", "factor": float("inf")}], "factor must be a non-zero"),
        ([{"op": "rename", "from": "a", "to": "a"}], "from and to must differ"),
        ([{"op": "rename", "from": "a", "to": "b", "in": "header"}], "in must be one of path"),
        ([{"op": "add", "name": "a", "from": "env"}], "from must be one of query, customer"),
        ([{"op": "add", "name": "a", "from": "fact"}], "a fact needs exactly one of path"),
        ([{"op": "add", "name": "a", "from": "customer", "path": "x"}], "path cannot be used"),
        ([{"op": "add", "name": "a", "from": "value"}], "from=value needs 'value'"),
        ([{"op": "add", "name": "a", "from": "query", "pattern": "x", "group": 2}], "group 2"),
        (
            [{"op": "regex_replace", "field": "a", "pattern": "(x)", "replacement": r"\2"}],
            "replacement is invalid",
        ),
        ([{"op": "trim", "field": "a", "optional": "yes"}], "optional must be true or false"),
    ],
)
def test_bad_step_data_is_refused_with_a_clear_error(data: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        repair_steps_parse(data)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        (r"(a+)+$", "nested quantifiers are not allowed"),
        (r"(\w*)*x", "nested quantifiers are not allowed"),
        (r"((ab)*c)+", "nested quantifiers are not allowed"),
        (r"(?:a|ab)*c", "alternation under a quantifier is not allowed"),
        (r"(a)\1", "backreferences are not allowed"),
        (r"a{1,500}", "a repeat bound above 100 is not allowed"),
        ("x" * 101, "pattern is longer than 100 characters"),
        (r"(unclosed", "pattern is not a regex"),
        ("", "pattern must be a non-empty string"),
    ],
)
def test_unsafe_regexes_are_rejected(pattern: str, problem: str) -> None:
    assert problem in regex_problem(pattern)
    with pytest.raises(ValueError, match="step 1 \\(regex_replace\\)"):
        repair_steps_parse([{"op": "regex_replace", "field": "a", "pattern": pattern}])


@pytest.mark.parametrize("pattern", [r"^#?W?(\d{7})$", r"[-_ ]+", r"\d{3}-\d{4}", r"(?i)^ord_"])
def test_bounded_regexes_are_accepted(pattern: str) -> None:
    assert regex_problem(pattern) == ""
