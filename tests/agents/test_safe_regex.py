"""Patterns the learning loop writes run on RE2, in time linear in the text: a proposal whose
pattern backtracks catastrophically on Python's ``re`` (nested, or merely adjacent,
quantifiers) cannot freeze the event loop every run of a worker shares. A pattern RE2
cannot run is refused when proposed, and one stored before is never run on ``re``.

The inputs below take hours or more on ``re``: a regression does not finish."""

from __future__ import annotations

from typing import Any

import jsonschema._keywords
import pytest

from agents.repairs import repair_apply, repair_steps_parse
from agents.safe_regex import regex_fullmatch, regex_unsafe_reason, schema_regex_problems
from agents.tools.adapters import validate_arguments
from policies.branches import branch_errors

NESTED = r"^(\d+)+$"
ADJACENT = r"\d*\d*\d*\d*\d*\d*#"
EVIL = "1" * 5000 + "x"


def test_a_validation_rules_pattern_runs_on_re2_not_on_the_backtracking_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def backtracking(*args: Any) -> Any:
        raise AssertionError("jsonschema's own pattern check (Python re) ran")

    monkeypatch.setattr(jsonschema._keywords.re, "search", backtracking)
    schema = {"type": "object", "properties": {"order_id": {"type": "string", "pattern": NESTED}}}
    issues = validate_arguments(schema=schema, arguments={"order_id": EVIL})
    assert [issue.validator for issue in issues] == ["pattern"]
    assert validate_arguments(schema=schema, arguments={"order_id": "12345"}) == []


def test_a_pre_condition_and_a_repair_match_in_linear_time() -> None:
    assert regex_fullmatch(NESTED, EVIL, otherwise=True) is False
    (step,) = repair_steps_parse(
        [{"op": "regex_replace", "pattern": ADJACENT, "replacement": ""}], field="order_id"
    )
    assert repair_apply([step], {"order_id": "1" * 999}) == {"order_id": "1" * 999}


@pytest.mark.parametrize(
    ("kind", "branch", "problem"),
    [
        (
            "pre_condition",
            {
                "tool": "get_order",
                "arg": "order_id",
                "not_pattern": r"(\d)\1",
                "call": "find_orders",
                "input": {"q": "{value}"},
                "take": "results.0.order_id",
                "assign": "order_id",
            },
            "RE2",
        ),
        (
            "validation_rule",
            {"tool": "get_order", "amend": {"order_id": {"type": "string", "pattern": "(?=1)1"}}},
            "RE2",
        ),
        (
            "validation_rule",
            {
                "tool": "get_order",
                "schema": {"type": "object", "patternProperties": {"^(a+)+$": {}}},
            },
            "patternProperties",
        ),
    ],
    ids=["backreference", "lookahead", "pattern-properties"],
)
def test_a_proposal_whose_pattern_re2_cannot_run_is_refused(
    kind: str, branch: dict[str, Any], problem: str
) -> None:
    errors = branch_errors(kind, branch)
    assert any(problem in error for error in errors), errors


def test_a_repair_step_re2_cannot_run_is_refused_and_a_stored_one_never_runs() -> None:
    with pytest.raises(ValueError, match="RE2"):
        repair_steps_parse([{"op": "regex_replace", "pattern": r"(?<=a)b"}], field="x")
    assert regex_unsafe_reason(NESTED) == ""  # RE2 runs it: nothing to refuse
    # A pattern stored before: the caller's answer, not a run on re.
    assert regex_fullmatch(r"(\d)\1", "11", otherwise=True) is True
    assert schema_regex_problems({"items": [{"pattern": r"(a)\1"}]}) == [
        "schema.items[0].pattern: not a pattern that runs in linear time (RE2): "
        "invalid escape sequence: \\1"
    ]
