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
    assert all(isinstance(rule.body_regex, re2._Regexp) for rule in patterned)
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
