"""Error bodies in the layouts real APIs use, read into (field, message) items and hints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from policies.error_bodies import (
    ErrorHints,
    error_body_parse,
    message_hints,
    strftime_from_format,
)


def parse(status: int, body: Any, headers: dict[str, str] | None = None) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return error_body_parse(status, headers or {}, text)


def test_detail_string() -> None:
    parsed = parse(404, {"detail": "Not found."})
    assert parsed.layout == "detail"
    assert parsed.pairs() == [(None, "Not found.")]
    assert parsed.summary == "Not found."


def test_the_sandboxs_flat_layout_keeps_its_field_and_expected_type() -> None:
    parsed = parse(
        400,
        {
            "error": "type_mismatch",
            "detail": "order_id must be a bare integer",
            "field": "order_id",
            "expected_type": "integer",
        },
    )
    assert parsed.layout == "flat"
    assert parsed.code == "type_mismatch"
    assert parsed.pairs() == [("order_id", "order_id must be a bare integer")]
    assert parsed.hints_for("order_id").expected_type == "integer"


def test_fastapi_pydantic_422_list() -> None:
    parsed = parse(
        422,
        {
            "detail": [
                {"type": "missing", "loc": ["query", "q"], "msg": "Field required"},
                {
                    "type": "int_parsing",
                    "loc": ["body", "items", 0, "qty"],
                    "msg": "Input should be a valid integer, unable to parse string as an integer",
                    "input": "two",
                },
                {
                    "type": "string_pattern_mismatch",
                    "loc": ["path", "sku"],
                    "msg": "String should match pattern '^[a-z]{3}-\\d{4}$'",
                    "ctx": {"pattern": "^[a-z]{3}-\\d{4}$"},
                },
                {
                    "type": "enum",
                    "loc": ["query", "status"],
                    "msg": "Input should be 'open' or 'closed'",
                    "ctx": {"expected": "'open' or 'closed'"},
                },
                {
                    "type": "extra_forbidden",
                    "loc": ["query", "term"],
                    "msg": "Extra inputs are not permitted",
                },
                {
                    "type": "date_parsing",
                    "loc": ["query", "since"],
                    "msg": "Input should be a valid date",
                },
            ]
        },
    )
    assert parsed.layout == "fastapi"
    assert parsed.fields == ("q", "items.0.qty", "sku", "status", "term", "since")
    assert [item.location for item in parsed.items] == [
        "query",
        "body",
        "path",
        "query",
        "query",
        "query",
    ]
    assert parsed.hints_for("q").required
    assert parsed.hints_for("items.0.qty").expected_type == "integer"
    assert parsed.hints_for("sku").expected_pattern == "^[a-z]{3}-\\d{4}$"
    assert parsed.hints_for("status").allowed_values == ("open", "closed")
    assert parsed.hints_for("term").unknown_name == "term"
    assert parsed.hints_for("since").expected_format == "date"


def test_pydantic_v1_types_are_read_too() -> None:
    parsed = parse(
        422,
        {
            "detail": [
                {
                    "loc": ["body", "qty"],
                    "msg": "value is not a valid integer",
                    "type": "type_error.integer",
                }
            ]
        },
    )
    assert parsed.pairs() == [("qty", "value is not a valid integer")]
    assert parsed.hints_for("qty").expected_type == "integer"


def test_errors_list_with_field_and_message() -> None:
    parsed = parse(
        400,
        {
            "message": "Validation failed",
            "errors": [
                {"field": "status", "message": "must be lowercase"},
                {"field": "ship_date", "message": "must be in the format YYYY-MM-DD"},
                {"field": "zip", "message": "must be 5 digits"},
            ],
        },
    )
    assert parsed.layout == "errors"
    assert parsed.summary == "Validation failed"
    assert parsed.pairs() == [
        ("status", "must be lowercase"),
        ("ship_date", "must be in the format YYYY-MM-DD"),
        ("zip", "must be 5 digits"),
    ]
    assert parsed.hints_for("status").expected_case == "lower"
    assert parsed.hints_for("ship_date").expected_format == "YYYY-MM-DD"
    assert parsed.hints_for("zip").length == 5


def test_errors_as_a_mapping_and_as_json_api_pointers() -> None:
    parsed = parse(
        400,
        {
            "errors": {
                "email": ["Enter a valid email address."],
                "non_field_errors": ["Bad request."],
            }
        },
    )
    assert parsed.pairs() == [("email", "Enter a valid email address."), (None, "Bad request.")]
    pointer = parse(
        422,
        {"errors": [{"source": {"pointer": "/data/attributes/title"}, "detail": "can't be blank"}]},
    )
    assert pointer.pairs() == [("title", "can't be blank")]


def test_rfc7807_problem_json_with_invalid_params() -> None:
    parsed = parse(
        400,
        {
            "type": "https://example.net/validation-error",
            "title": "Your request parameters didn't validate.",
            "status": 400,
            "invalid-params": [
                {"name": "age", "reason": "must be a positive integer"},
                {"name": "color", "reason": "must be 'green', 'red' or 'blue'"},
            ],
        },
        {"Content-Type": "application/problem+json"},
    )
    assert parsed.layout == "problem"
    assert parsed.code == "https://example.net/validation-error"
    assert parsed.summary == "Your request parameters didn't validate."
    assert parsed.pairs() == [
        ("age", "must be a positive integer"),
        ("color", "must be 'green', 'red' or 'blue'"),
    ]
    assert parsed.hints_for("age").expected_type == "integer"
    assert parsed.hints_for("color").allowed_values == ("green", "red", "blue")


def test_problem_json_without_invalid_params_is_its_detail() -> None:
    parsed = parse(
        503,
        {
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "Maintenance until 10:00",
        },
        {"content-type": "application/problem+json", "Retry-After": "120"},
    )
    assert parsed.layout == "problem"
    assert parsed.pairs() == [(None, "Maintenance until 10:00")]
    assert parsed.retry_after == 120.0


def test_openai_stripe_error_object() -> None:
    parsed = parse(
        400,
        {
            "error": {
                "message": "Unrecognized request argument supplied: term. Did you mean 'q'?",
                "type": "invalid_request_error",
                "param": "term",
                "code": None,
            }
        },
    )
    assert parsed.layout == "error_object"
    assert parsed.code == "invalid_request_error"
    assert parsed.fields == ("term",)
    hints = parsed.hints_for("term")
    assert (hints.unknown_name, hints.suggested_name) == ("term", "q")


def test_google_error_object_with_field_violations() -> None:
    parsed = parse(
        400,
        {
            "error": {
                "code": 400,
                "message": "Request contains an invalid argument.",
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [
                            {"field": "region", "description": "must be uppercase"}
                        ],
                    }
                ],
            }
        },
    )
    assert parsed.pairs() == [("region", "must be uppercase")]
    assert parsed.hints_for("region").expected_case == "upper"


def test_plain_text_and_html() -> None:
    parsed = parse(502, "Bad Gateway\n")
    assert (parsed.layout, parsed.pairs()) == ("text", [(None, "Bad Gateway")])
    html = parse(
        503,
        "<html><head><title>503</title></head><body><h1>Down for maintenance</h1></body></html>",
    )
    assert html.pairs() == [(None, "Down for maintenance")]
    assert parse(500, "").layout == "empty"
    assert parse(400, "{not json").pairs() == [(None, "{not json")]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": " 2.5 "}, 2.5),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_in_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert parse(429, "Too Many Requests", headers).retry_after == expected


def test_retry_after_as_an_http_date_and_from_the_body() -> None:
    later = datetime.now(UTC) + timedelta(seconds=90)
    parsed = error_body_parse(503, [("Retry-After", format_datetime(later, usegmt=True))], "")
    # One second past the difference: the date names a whole second (agents executor).
    assert parsed.retry_after is not None and 80 <= parsed.retry_after <= 91
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    assert error_body_parse(503, {"Retry-After": past}, "").retry_after == 0.0
    body = parse(429, {"error": "rate_limited", "detail": "slow down", "retry_after": 1})
    assert body.retry_after == 1.0


@pytest.mark.parametrize(
    ("message", "hints"),
    [
        ("sku must be uppercase", ErrorHints(expected_case="upper")),
        ("only lowercase letters are accepted", ErrorHints(expected_case="lower")),
        ("qty must be a number", ErrorHints(expected_type="number")),
        ("expected string, got integer", ErrorHints(expected_type="string")),
        ("code must match '^[A-Z]{2}\\d{3}$'", ErrorHints(expected_pattern="^[A-Z]{2}\\d{3}$")),
        ("id does not match ^ORD-\\d+$", ErrorHints(expected_pattern="^ORD-\\d+$")),
        ("date must be in the format DD/MM/YYYY", ErrorHints(expected_format="DD/MM/YYYY")),
        ("timestamp must be ISO 8601", ErrorHints(expected_format="date-time")),
        (
            "status must be one of: pending, shipped, delivered",
            ErrorHints(allowed_values=("pending", "shipped", "delivered")),
        ),
        ("order_id must be 8 digits", ErrorHints(length=8)),
        ("order_id must not start with '#'", ErrorHints(forbidden_prefix="#")),
        ("send the id without the W prefix", ErrorHints(forbidden_prefix="W")),
        ("sku must start with 'SKU-'", ErrorHints(required_prefix="SKU-")),
        (
            "parameter 'term' has been renamed to 'query'",
            ErrorHints(suggested_name="query", unknown_name="term"),
        ),
        (
            "unknown parameter: term; use 'q' instead",
            ErrorHints(suggested_name="q", unknown_name="term"),
        ),
        ("customer_id is required", ErrorHints(required=True)),
        ("something went wrong", ErrorHints()),
        ("invalid parameter value", ErrorHints()),
        ("Invalid format for field", ErrorHints()),
    ],
)
def test_hints_read_from_messages(message: str, hints: ErrorHints) -> None:
    assert message_hints(message) == hints


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("YYYY-MM-DD", "%Y-%m-%d"),
        ("DD/MM/YYYY HH:mm", "%d/%m/%Y %H:%M"),
        ("%d.%m.%Y", "%d.%m.%Y"),
        ("date-time", None),
        (None, None),
    ],
)
def test_a_written_format_becomes_a_strftime_pattern(text: str | None, pattern: str | None) -> None:
    assert strftime_from_format(text) == pattern


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["order_id", "orderId"])
@pytest.mark.parametrize("problem", [True, False], ids=["problem+json", "plain-errors"])
def test_an_errors_dict_is_evidence_whatever_the_spelling_of_its_field(
    failed_trace: Any, key: str, problem: bool
) -> None:
    """ASP.NET Core's ValidationProblemDetails keeps its errors in a dict, keyed by the
    field as the API spells it: neither was read, and no repair was proposed."""
    from policies.reflexion import analyze_from_evidence, failures_of_trace

    body: dict[str, Any] = {
        "errors": {key: ["The value '#W1000001' is not valid. It must be an integer."]}
    }
    if problem:
        body |= {
            "type": "https://tools.ietf.org/html/rfc9110#section-15.5.1",
            "title": "One or more validation errors occurred.",
            "status": 422,
        }
    trace = failed_trace(status_code=422, error_type="TYPE_MISMATCH", body=json.dumps(body))
    [facts] = failures_of_trace(trace)
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch.get("field") == "order_id"
    assert proposal.branch.get("transform") == "digits_to_int"
