"""Admins' classifier patterns run in linear time, and one that cannot run breaks nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from traces.classifier import ErrorEvent, classify_error, error_rules_load
from traces.models import ErrorRule
from traces.patterns import BODY_SCAN_CHARS

pytestmark = pytest.mark.django_db


def _rule(pattern: str, **fields: Any) -> ErrorRule:
    values: dict[str, Any] = {
        "position": 1,
        "name": "admin's rule",
        "source": "http",
        "status_min": 400,
        "status_max": 499,
        "body_pattern": pattern,
        "error_type": "RATE_LIMITED",
    }
    values.update(fields)
    return ErrorRule(**values)


@pytest.mark.parametrize("pattern", ["(", "(?<=a)b", r"(a)\1"])
def test_a_pattern_that_cannot_run_in_linear_time_is_refused_when_saved(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _rule(pattern).full_clean()
    assert "RE2" in str(caught.value.message_dict["body_pattern"])


def test_a_bad_pattern_in_the_table_is_skipped_and_the_other_rules_still_classify(
    error_rules: None,
) -> None:
    """Saved past clean() (a queryset update): it used to make every rule load raise, so
    every run and every OTLP ingest failed."""
    _rule("(", position=0, error_type="UNAUTHORIZED").save()
    rules = error_rules_load()
    event = ErrorEvent(source="http", status_code=429, body="slow down")
    assert classify_error(event, rules) == "RATE_LIMITED"  # the seeded 429 rule
    assert all(rule.name != "admin's rule" for rule in rules)


def test_every_pattern_runs_on_re2(error_rules: None) -> None:
    """(\\w+\\s?)+$ on Python's re backtracks exponentially on "aaa…a!"; RE2's time is
    linear in the text whatever the pattern. The seeded rules' patterns run there too."""
    import re2

    _rule(r"(\w+\s?)+$", position=0).save()
    rules = error_rules_load()
    patterned = [rule for rule in rules if rule.body_regex is not None]
    assert len(patterned) >= 4
    assert all(isinstance(rule.body_regex.compiled, re2._Regexp) for rule in patterned)
    event = ErrorEvent(source="http", status_code=400, body="a" * 5000 + "!")
    assert classify_error(event, rules) == "INVALID_PARAMETER"  # the seeded "any other 4xx"


def test_patterns_read_the_head_of_a_huge_body_case_insensitively(error_rules: None) -> None:
    _rule("order NOT found", position=0, error_type="RESOURCE_NOT_FOUND").save()
    rules = error_rules_load()
    head = ErrorEvent(source="http", status_code=400, body="Order not found" + "x" * 10**6)
    tail = ErrorEvent(
        source="http", status_code=400, body="x" * BODY_SCAN_CHARS + "order not found"
    )
    assert classify_error(head, rules) == "RESOURCE_NOT_FOUND"
    assert classify_error(tail, rules) != "RESOURCE_NOT_FOUND"


def test_an_older_rule_that_re2_cannot_run_keeps_its_meaning_on_re(error_rules: None) -> None:
    """Saved before patterns had to be RE2's: "not found\\Z" still classifies as it did
    (skipping it made a missing order INVALID_PARAMETER, which Reflexion tries to repair)."""
    ErrorRule.objects.bulk_create(
        [_rule(r"order not found\Z", position=0, error_type="RESOURCE_NOT_FOUND")]
    )
    rules = error_rules_load()
    event = ErrorEvent(source="http", status_code=400, body="Order not found")
    assert classify_error(event, rules) == "RESOURCE_NOT_FOUND"


def test_dollar_matches_before_a_final_newline_as_it_did(error_rules: None) -> None:
    _rule("not found$", position=0, error_type="RESOURCE_NOT_FOUND").save()
    event = ErrorEvent(source="http", status_code=400, body="Not Found\n")
    assert classify_error(event, error_rules_load()) == "RESOURCE_NOT_FOUND"


def test_a_half_group_is_no_valid_pattern() -> None:
    """Wrapped as (?i:…), "a)|(b" would compile, its second branch case-sensitive."""
    with pytest.raises(ValidationError):
        _rule("a)|(b").full_clean()


def test_a_rule_re2_refuses_can_still_be_disabled_from_the_admin_list(
    error_rules: None, client: Any, django_user_model: Any
) -> None:
    """The admin list edits only "enabled": a rule whose old pattern RE2 refuses must not
    make that page's save fail (it is how an admin switches such a rule off)."""
    ErrorRule.objects.bulk_create([_rule(r"(?<=order )not found", position=0)])
    rule = ErrorRule.objects.get(position=0)
    admin = django_user_model.objects.create_superuser("root-admin", "a@example.com", "pw-1")
    client.force_login(admin)
    rows = list(ErrorRule.objects.order_by("position", "id"))
    form: dict[str, Any] = {
        "form-TOTAL_FORMS": str(len(rows)),
        "form-INITIAL_FORMS": str(len(rows)),
        "_save": "Save",
    }
    for number, row in enumerate(rows):
        form[f"form-{number}-id"] = str(row.pk)
        if row.enabled and row.pk != rule.pk:
            form[f"form-{number}-enabled"] = "on"
    response = client.post("/admin/traces/errorrule/", form)
    assert response.status_code == 302, response.content[:500]
    rule.refresh_from_db()
    assert not rule.enabled
