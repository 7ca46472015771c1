"""The classifier's rule table: status ranges need a status, and the defaults seed once."""

from __future__ import annotations

import pytest

from traces.classifier import (
    DEFAULT_ERROR_RULES,
    ErrorEvent,
    classify_error,
    compile_rules,
    error_rules_load,
    errorrules_seed_defaults,
)
from traces.models import ErrorRule


def test_a_status_range_rule_never_matches_an_event_without_a_status() -> None:
    rules = compile_rules(
        [
            {
                "position": 1,
                "name": "5xx",
                "source": "http",
                "status_min": 500,
                "error_type": "INTERNAL_SERVER_ERROR",
            },
            {"position": 2, "name": "any http", "source": "http", "error_type": "HTTP_OTHER"},
        ]
    )
    assert classify_error(ErrorEvent(source="http", status_code=None), rules) == "HTTP_OTHER"
    assert classify_error(ErrorEvent(source="http", status_code=503), rules) == (
        "INTERNAL_SERVER_ERROR"
    )
    assert classify_error(ErrorEvent(source="executor"), rules) == "UNKNOWN"


@pytest.mark.django_db
def test_the_default_rules_are_seeded_into_an_empty_table_once() -> None:
    ErrorRule.objects.all().delete()
    assert errorrules_seed_defaults() == len(DEFAULT_ERROR_RULES)
    assert errorrules_seed_defaults() == 0
    assert ErrorRule.objects.count() == len(DEFAULT_ERROR_RULES)
    rules = error_rules_load()
    assert [r.position for r in rules] == sorted(r["position"] for r in DEFAULT_ERROR_RULES)


@pytest.mark.django_db
def test_the_migration_gives_an_older_installation_the_503_rule_once(error_rules: None) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("traces.migrations.0012_service_unavailable")
    # An installation seeded before 503 was its own class: every default but that rule.
    ErrorRule.objects.filter(error_type="SERVICE_UNAVAILABLE").delete()
    assert classify_error(ErrorEvent(source="http", status_code=503), error_rules_load()) == (
        "INTERNAL_SERVER_ERROR"
    )
    migration.add_rule(apps, None)
    migration.add_rule(apps, None)
    assert ErrorRule.objects.filter(error_type="SERVICE_UNAVAILABLE").count() == 1
    rules = error_rules_load()
    assert classify_error(ErrorEvent(source="http", status_code=503), rules) == (
        "SERVICE_UNAVAILABLE"
    )
    assert classify_error(ErrorEvent(source="http", status_code=500), rules) == (
        "INTERNAL_SERVER_ERROR"
    )
    # An empty table is left to errorrules_seed_defaults, which has the rule.
    ErrorRule.objects.all().delete()
    migration.add_rule(apps, None)
    assert not ErrorRule.objects.exists()
    errorrules_seed_defaults()
    assert ErrorRule.objects.filter(error_type="SERVICE_UNAVAILABLE").count() == 1


@pytest.mark.django_db
def test_the_migration_gives_an_older_installation_the_reasoning_guard_rules_once(
    error_rules: None,
) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("traces.migrations.0016_reasoning_guard_error_types")
    thought = ErrorEvent(source="reasoning_guard", exception_class="UNGROUNDED_THOUGHT")
    reflection = ErrorEvent(source="reasoning_guard", exception_class="FAKE_REFLECTION")
    # An installation seeded before the guards: every default but their rules.
    ErrorRule.objects.filter(source="reasoning_guard").delete()
    assert classify_error(thought, error_rules_load()) == "UNKNOWN"
    migration.add_rules(apps, None)
    migration.add_rules(apps, None)
    assert ErrorRule.objects.filter(source="reasoning_guard").count() == 2
    rules = error_rules_load()
    assert classify_error(thought, rules) == "UNGROUNDED_THOUGHT"
    assert classify_error(reflection, rules) == "FAKE_REFLECTION"
    # The frozen copies are the defaults as they stand today.
    defaults = [r for r in DEFAULT_ERROR_RULES if r["source"] == "reasoning_guard"]
    assert [dict(r) for r in migration.RULES] == [dict(r) for r in defaults]
    # An empty table is left to errorrules_seed_defaults, which has the rules.
    ErrorRule.objects.all().delete()
    migration.add_rules(apps, None)
    assert not ErrorRule.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "body", "error_type"),
    [
        (401, '{"detail": "the Authorization header is required"}', "UNAUTHORIZED"),
        (403, "a token with the orders:read scope is required", "UNAUTHORIZED"),
        (404, '{"error": "order id is required to exist"}', "RESOURCE_NOT_FOUND"),
        (400, '{"error": "order_id is required"}', "MISSING_REQUIRED_FIELD"),
        (422, '{"error": "qty must be an integer"}', "TYPE_MISMATCH"),
        (302, "", "INVALID_ENDPOINT"),  # a redirect with no usable Location
        (304, "", "INVALID_ENDPOINT"),
    ],
)
def test_http_failures_are_classified_by_status_before_their_wording(
    error_rules: None, status: int, body: str, error_type: str
) -> None:
    event = ErrorEvent(source="http", status_code=status, body=body)
    assert classify_error(event, error_rules_load()) == error_type


@pytest.mark.django_db
def test_the_migration_brings_an_older_installation_the_bad_response_and_3xx_rules(
    error_rules: None,
) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("traces.migrations.0021_error_rules_bad_response_3xx")
    # An installation seeded before: no BAD_RESPONSE or 3xx rules, 401/403 and 404 at 62, 63.
    ErrorRule.objects.filter(exception_class="BAD_RESPONSE").delete()
    ErrorRule.objects.filter(status_min=300).delete()
    ErrorRule.objects.filter(status_min=401, status_max=403).update(position=62)
    ErrorRule.objects.filter(status_min=404, status_max=404).update(position=63)
    expired = ErrorEvent(
        source="http", status_code=401, body="the Authorization header is required"
    )
    assert classify_error(expired, error_rules_load()) == "MISSING_REQUIRED_FIELD"
    # an admin's edit of a moved rule is kept
    ErrorRule.objects.filter(status_min=404).update(name="404 (ours)", body_pattern="order")

    migration.forwards(apps, None)
    migration.forwards(apps, None)

    rules = error_rules_load()
    assert classify_error(expired, rules) == "UNAUTHORIZED"
    assert classify_error(ErrorEvent(source="http", status_code=302), rules) == "INVALID_ENDPOINT"
    envelope = ErrorEvent(
        source="executor", exception_class="BAD_RESPONSE", body="an error in its body: not_found"
    )
    assert classify_error(envelope, rules) == "RESOURCE_NOT_FOUND"
    assert ErrorRule.objects.filter(exception_class="BAD_RESPONSE").count() == 2
    assert ErrorRule.objects.get(name="404 (ours)").position == 63
    # The frozen copies are the defaults as they stand today.
    added = {(r["position"], r["name"]) for r in migration.ADDED}
    assert [dict(r) for r in migration.ADDED] == [
        dict(r) for r in DEFAULT_ERROR_RULES if (r["position"], r["name"]) in added
    ]
    moved = {r["name"]: r["position"] for r in DEFAULT_ERROR_RULES}
    assert (moved["401 / 403"], moved["404"]) == (57, 58)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "body", "error_type"),
    [
        (410, '{"detail": "this order was archived"}', "RESOURCE_NOT_FOUND"),
        (
            422,
            '{"detail": [{"type": "int_parsing", "loc": ["path", "order_id"], '
            '"msg": "Input should be a valid integer, unable to parse string as an integer"}]}',
            "TYPE_MISMATCH",
        ),
        (400, "order_id: Input should be a valid integer", "TYPE_MISMATCH"),
        (409, '{"detail": "the order was already cancelled"}', "INVALID_PARAMETER"),
    ],
)
def test_a_410_is_not_found_and_pydantic_type_errors_are_type_mismatches(
    error_rules: None, status: int, body: str, error_type: str
) -> None:
    event = ErrorEvent(source="http", status_code=status, body=body)
    assert classify_error(event, error_rules_load()) == error_type


@pytest.mark.django_db
def test_the_migration_brings_an_older_installation_the_410_and_pydantic_rules(
    error_rules: None,
) -> None:
    from importlib import import_module

    from django.apps import apps

    migration = import_module("traces.migrations.0022_error_rules_410_and_pydantic_types")
    # An installation seeded before: no 410 rule, the type rule's older pattern.
    ErrorRule.objects.filter(status_min=410).delete()
    ErrorRule.objects.filter(body_pattern=migration.TYPE_NOW).update(
        body_pattern=migration.TYPE_SEEDED
    )
    pydantic = ErrorEvent(source="http", status_code=422, body='{"type": "int_parsing"}')
    gone = ErrorEvent(source="http", status_code=410, body="")
    assert classify_error(pydantic, error_rules_load()) == "INVALID_PARAMETER"
    assert classify_error(gone, error_rules_load()) == "INVALID_PARAMETER"

    migration.forwards(apps, None)
    migration.forwards(apps, None)

    rules = error_rules_load()
    assert classify_error(pydantic, rules) == "TYPE_MISMATCH"
    assert classify_error(gone, rules) == "RESOURCE_NOT_FOUND"
    assert ErrorRule.objects.filter(status_min=410).count() == 1
    # The frozen copies are the defaults as they stand today.
    defaults = {r["name"]: r for r in DEFAULT_ERROR_RULES}
    assert dict(defaults["410 gone"]) == migration.GONE
    assert defaults["4xx naming a type mismatch"]["body_pattern"] == migration.TYPE_NOW
