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
