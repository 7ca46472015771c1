"""The ordered rule table maps every failure to the taxonomy; rows are data, first match wins."""

from __future__ import annotations

from typing import Any

import pytest

from traces.classifier import (
    DEFAULT_ERROR_RULES,
    ErrorEvent,
    classify_error,
    compile_rules,
    error_rules_load,
)
from traces.models import ErrorRule

RULES = compile_rules(DEFAULT_ERROR_RULES)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ErrorEvent("http", 404, body='{"error":"not_found"}'), "RESOURCE_NOT_FOUND"),
        (ErrorEvent("http", 500, body='{"error":"internal_error"}'), "INTERNAL_SERVER_ERROR"),
        (ErrorEvent("http", 503), "SERVICE_UNAVAILABLE"),
        (ErrorEvent("http", 502), "INTERNAL_SERVER_ERROR"),
        (ErrorEvent("http", 401, body='{"error":"unauthorized"}'), "UNAUTHORIZED"),
        (ErrorEvent("http", 403), "UNAUTHORIZED"),
        (ErrorEvent("http", 429), "RATE_LIMITED"),
        (ErrorEvent("http", 504), "TIMEOUT"),
        (ErrorEvent("http", 408), "TIMEOUT"),
        (
            ErrorEvent("http", 400, body='{"error":"type_mismatch","expected_type":"integer"}'),
            "TYPE_MISMATCH",
        ),
        (ErrorEvent("http", 400, body="order_id must be an integer"), "TYPE_MISMATCH"),
        # body patterns ignore case: APIs shout their errors too
        (ErrorEvent("http", 422, body="Field 'q' Is Required"), "MISSING_REQUIRED_FIELD"),
        (
            ErrorEvent("http", 400, body='{"error":"missing_required_field","field":"q"}'),
            "MISSING_REQUIRED_FIELD",
        ),
        (ErrorEvent("http", 400, body='{"error":"invalid_parameter"}'), "INVALID_PARAMETER"),
        (ErrorEvent("http", 418), "INVALID_PARAMETER"),
        (ErrorEvent("executor", exception_class="TOOL_NOT_ALLOWED"), "TOOL_NOT_ALLOWED"),
        (ErrorEvent("executor", exception_class="TOOL_SUSPENDED"), "TOOL_SUSPENDED"),
        (ErrorEvent("executor", exception_class="INVALID_ENDPOINT"), "INVALID_ENDPOINT"),
        (ErrorEvent("executor", exception_class="SSRF_BLOCKED"), "INVALID_ENDPOINT"),
        (
            ErrorEvent(
                "executor",
                exception_class="SCHEMA_VIOLATION",
                body="validator=required path=(root): 'sku' is a required property",
            ),
            "MISSING_REQUIRED_FIELD",
        ),
        (
            ErrorEvent(
                "executor",
                exception_class="SCHEMA_VIOLATION",
                body="validator=type path=limit: '3' is not of type 'integer'",
            ),
            "TYPE_MISMATCH",
        ),
        (
            ErrorEvent(
                "executor",
                exception_class="SCHEMA_VIOLATION",
                body="validator=pattern path=sku: does not match",
            ),
            "INVALID_PARAMETER",
        ),
        (ErrorEvent("executor", exception_class="TIMEOUT"), "TIMEOUT"),
        (ErrorEvent("executor", exception_class="CONNECTION_ERROR"), "CONNECTION_ERROR"),
        (ErrorEvent("executor", exception_class="RESPONSE_TOO_LARGE"), "RESPONSE_TOO_LARGE"),
        (ErrorEvent("executor", exception_class="TOOL_ERROR"), "INTERNAL_SERVER_ERROR"),
        (ErrorEvent("model_output", body="no JSON object"), "MODEL_FORMAT_ERROR"),
        (
            ErrorEvent("final_answer", exception_class="UNSUPPORTED_ANSWER"),
            "HALLUCINATED_ANSWER",
        ),
        (
            ErrorEvent("reasoning_guard", exception_class="UNGROUNDED_THOUGHT"),
            "UNGROUNDED_THOUGHT",
        ),
        (ErrorEvent("reasoning_guard", exception_class="FAKE_REFLECTION"), "FAKE_REFLECTION"),
        (ErrorEvent("reasoning_guard", exception_class="SOMETHING_NEW"), "UNKNOWN"),
        (ErrorEvent("runtime", exception_class="LOOP_DETECTED"), "LOOP_DETECTED"),
        (ErrorEvent("runtime", exception_class="MAX_STEPS"), "MAX_STEPS"),
        (ErrorEvent("runtime", exception_class="LLM_ERROR"), "LLM_ERROR"),
        (ErrorEvent("runtime", exception_class="RUN_TIME_LIMIT"), "RUN_TIME_LIMIT"),
        (ErrorEvent("runtime", exception_class="SOMETHING_NEW"), "UNKNOWN"),
    ],
)
def test_default_rules_map_events_to_the_taxonomy(event: ErrorEvent, expected: str) -> None:
    assert classify_error(event, RULES) == expected


def test_migration_seeds_the_default_table(db: None) -> None:
    """0002 fills an empty table with the defaults and leaves a filled one alone. Its
    function is called here on an emptied table: whether the rows ``migrate`` left are
    still there depends on the order of the run (a transactional test flushes them)."""
    from importlib import import_module

    from django.apps import apps
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    applied = MigrationRecorder(connection).applied_migrations()
    assert ("traces", "0002_seed_error_rules") in applied
    migration = import_module("traces.migrations.0002_seed_error_rules")
    ErrorRule.objects.all().delete()
    migration.seed(apps, None)
    # Rules with disjoint conditions may share a position (the 404 and the 410).
    seeded = {(rule.position, rule.name): rule for rule in ErrorRule.objects.all()}
    assert len(seeded) == len(DEFAULT_ERROR_RULES)
    for row in DEFAULT_ERROR_RULES:
        assert {field: getattr(seeded[row["position"], row["name"]], field) for field in row} == row
    # A table an admin has edited is not reseeded.
    ErrorRule.objects.filter(position=DEFAULT_ERROR_RULES[0]["position"]).delete()
    migration.seed(apps, None)
    assert ErrorRule.objects.count() == len(DEFAULT_ERROR_RULES) - 1


def test_an_admin_edit_changes_classification(db: None, error_rules: Any) -> None:
    # given an admin adds a rule ahead of the generic 404 rule
    ErrorRule.objects.create(
        position=5,
        name="Drift: renamed field",
        source="http",
        status_min=404,
        status_max=404,
        body_pattern=r"endpoint moved",
        error_type="INVALID_ENDPOINT",
    )
    rules = error_rules_load()
    # then it wins where it matches, and the old rule still applies elsewhere
    assert classify_error(ErrorEvent("http", 404, body="endpoint moved"), rules) == (
        "INVALID_ENDPOINT"
    )
    assert classify_error(ErrorEvent("http", 404, body="nope"), rules) == "RESOURCE_NOT_FOUND"


def test_disabled_rules_are_ignored(db: None, error_rules: Any) -> None:
    ErrorRule.objects.filter(error_type="RATE_LIMITED").update(enabled=False)
    rules = error_rules_load()
    assert classify_error(ErrorEvent("http", 429), rules) == "INVALID_PARAMETER"


def test_rules_apply_in_position_order_not_insertion_order() -> None:
    rows = [
        {**DEFAULT_ERROR_RULES[0], "position": 50, "exception_class": "X", "error_type": "TIMEOUT"},
        {
            **DEFAULT_ERROR_RULES[0],
            "position": 10,
            "exception_class": "X",
            "error_type": "MAX_STEPS",
        },
    ]
    assert classify_error(ErrorEvent("executor", exception_class="X"), compile_rules(rows)) == (
        "MAX_STEPS"
    )
