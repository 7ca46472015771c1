"""The evidence-driven proposer: from the error body (any layout), the tool's schema and
the values the tool accepted before, the simplest repair chain the evidence supports."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from agents.repairs import repair_apply, repair_steps_parse
from policies.branches import branch_errors
from policies.error_bodies import ErrorHints
from policies.evidence import Target, chain_for, value_shape
from policies.reflexion import (
    ANALYZERS,
    MAX_EVIDENCE_CANDIDATES,
    analyze_from_evidence,
    analyze_name_for_id,
    analyze_type_mismatch,
    evidence_candidates,
    failures_of_trace,
)
from traces.models import Step, Trace
from traces.services import trace_create


@pytest.mark.parametrize(
    ("value", "hints", "examples", "expected"),
    [
        ("SHIPPED", ErrorHints(expected_case="lower"), (), [{"op": "case", "to": "lower"}]),
        (
            "#W1234567",
            ErrorHints(),
            ("1234567", "7654321"),
            [{"op": "strip_prefix", "value": "#W"}],
        ),
        ("1234567", ErrorHints(), ("W1234567", "W7654321"), [{"op": "add_prefix", "value": "W"}]),
        ("1234", ErrorHints(length=8), (), [{"op": "zero_pad", "width": 8}]),
        ("1234", ErrorHints(), ("00001111", "00002222"), [{"op": "zero_pad", "width": 8}]),
        (
            "31/12/2026",
            ErrorHints(expected_format="YYYY-MM-DD"),
            (),
            [{"op": "date_format", "from": "%d/%m/%Y", "to": "%Y-%m-%d"}],
        ),
        (
            "12/31/2026",
            ErrorHints(),
            ("2026-01-02", "2025-11-30"),
            [{"op": "date_format", "from": "%m/%d/%Y", "to": "%Y-%m-%d"}],
        ),
        (
            "CAP-0001-BL",
            ErrorHints(),
            ("HAT_0002_RD",),
            [{"op": "separators", "from": "-", "to": "_"}],
        ),
        (
            "Express",
            ErrorHints(allowed_values=("EXPRESS_SHIPPING", "express")),
            (),
            [{"op": "case", "to": "lower"}],
        ),
        (
            "W-1234567",
            ErrorHints(forbidden_prefix="W-"),
            (),
            [{"op": "strip_prefix", "value": "W-"}],
        ),
        (
            "#w1234567",
            ErrorHints(),
            ("W1234567",),
            [{"op": "strip_prefix", "value": "#w"}, {"op": "add_prefix", "value": "W"}],
        ),
    ],
)
def test_the_simplest_chain_the_evidence_accepts(
    value: Any, hints: ErrorHints, examples: tuple[Any, ...], expected: list[dict[str, Any]]
) -> None:
    found = chain_for(value, Target.build(value, hints, examples))
    assert found is not None
    _, steps = found
    assert steps == expected
    repaired = repair_apply(repair_steps_parse(steps, field="v"), {"v": value})["v"]
    assert Target.build(value, hints, examples).fits(repaired)


def test_no_evidence_no_proposal() -> None:
    # No hint, and every accepted example looks like the refused value: nothing to go on.
    assert chain_for("1234567", Target.build("1234567", ErrorHints(), ("7654321",))) is None
    assert chain_for("abc", Target.build("abc", ErrorHints(), ())) is None
    # The value already satisfies the evidence: the problem is elsewhere.
    assert chain_for("abc", Target.build("abc", ErrorHints(expected_case="lower"), ())) is None


def test_shapes_collapse_runs_but_keep_punctuation() -> None:
    assert value_shape("#W1234567") == "#A9{7}"
    assert value_shape("cap_0001") == "a_9{4}"
    assert (value_shape(12), value_shape(True)) == ("int", "bool")


# --- the analyzer over recorded runs -------------------------------------------------------
def _accepted(support_agent: Any, tool: str, arguments: dict[str, Any]) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="earlier", llm_backend="simulated")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        tool_name=tool,
        action_input=arguments,
        status_code=200,
        ok=True,
        response_summary="{}",
        started_at=timezone.now(),
    )


def _facts(failed_trace: Any, **kwargs: Any) -> Any:
    kwargs["body"] = (
        json.dumps(kwargs["body"]) if not isinstance(kwargs["body"], str) else (kwargs["body"])
    )
    [facts] = failures_of_trace(failed_trace(**kwargs))
    return facts


@pytest.mark.django_db
def test_a_case_the_error_body_asks_for(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={"sku": "CAP-0001-BL"},
        error_type="INVALID_PARAMETER",
        body={"errors": [{"field": "sku", "message": "must be lowercase"}]},
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None and proposal.origin == "analyzer:evidence"
    assert proposal.kind == "adapter"
    assert proposal.branch == {"tool": "check_inventory", "field": "sku", "transform": "lower"}
    assert branch_errors(proposal.kind, proposal.branch) == []


@pytest.mark.django_db
def test_a_prefix_the_accepted_calls_do_without(failed_trace: Any, support_agent: Any) -> None:
    for number in ("1000002", "1000003"):
        _accepted(support_agent, "get_order", {"order_id": number})
    facts = _facts(
        failed_trace,
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        body={"detail": "Not found."},
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch == {
        "tool": "get_order",
        "field": "order_id",
        "steps": [{"op": "strip_prefix", "value": "#W"}],
    }
    assert proposal.cited_fields[-1] == "action_input.order_id"
    assert proposal.strategy_update == "Rewrite order_id (strip prefix) before calling get_order"


@pytest.mark.django_db
def test_a_renamed_query_parameter_from_a_fastapi_422(failed_trace: Any) -> None:
    # search_products sends its query argument as ?q= (query_map); the API now wants ?term=.
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "cap"},
        status_code=422,
        error_type="INVALID_PARAMETER",
        body={"detail": [{"type": "missing", "loc": ["query", "term"], "msg": "Field required"}]},
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch == {
        "tool": "search_products",
        "steps": [{"op": "rename", "from": "query", "to": "term", "in": "query"}],
    }


@pytest.mark.django_db
def test_an_unknown_parameter_named_by_its_wire_name_is_renamed_by_its_argument(
    failed_trace: Any,
) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "cap", "limit": 3},
        error_type="INVALID_PARAMETER",
        body={"error": {"message": "Unknown parameter 'q'. Did you mean 'term'?", "param": "q"}},
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch["steps"] == [{"op": "rename", "from": "query", "to": "term"}]


@pytest.mark.django_db
def test_a_rename_the_message_names(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "cap", "limit": 3},
        error_type="INVALID_PARAMETER",
        body={
            "error": {
                "message": "Unknown parameter 'query'. Did you mean 'term'?",
                "param": "query",
            }
        },
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch["steps"] == [{"op": "rename", "from": "query", "to": "term"}]


@pytest.mark.django_db
def test_a_new_required_argument_the_run_knows(failed_trace: Any) -> None:
    trace = failed_trace(
        tool="get_order",
        action_input={"order_id": "#W1000001"},
        error_type="MISSING_REQUIRED_FIELD",
        body=json.dumps({"errors": [{"field": "customer_id", "message": "is required"}]}),
    )
    Trace.objects.filter(pk=trace.pk).update(customer_id="C-9")
    [facts] = failures_of_trace(trace)
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch["steps"] == [{"op": "add", "name": "customer_id", "from": "customer"}]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"errors": [{"field": "query", "message": "is required"}]},
        # by its wire name: search_products sends query as ?q= (query_map)
        {"detail": [{"type": "missing", "loc": ["query", "q"], "msg": "Field required"}]},
    ],
    ids=["by its name", "by its wire name"],
)
def test_a_declared_argument_left_out_is_not_a_rename(
    failed_trace: Any, body: dict[str, Any]
) -> None:
    # search_products declares query: the API asking for it wants the value the model left
    # out, not the one argument that was sent under a new name.
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"limit": 3},
        status_code=422,
        error_type="MISSING_REQUIRED_FIELD",
        body=body,
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is None, proposal.branch if proposal else None


@pytest.mark.django_db
def test_the_sandbox_integer_layout_stays_with_its_own_analyzer(failed_trace: Any) -> None:
    body = {"error": "type_mismatch", "field": "order_id", "expected_type": "integer"}
    facts = _facts(failed_trace, body=body)
    assert analyze_from_evidence(facts) is None
    assert ANALYZERS.index(analyze_from_evidence) < ANALYZERS.index(analyze_type_mismatch)
    first = next(p for p in (a(facts) for a in ANALYZERS) if p is not None)
    assert first.origin == "analyzer:type_mismatch"


@pytest.mark.django_db
def test_an_error_with_nothing_to_go_on_is_left_to_the_others(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        error_type="INVALID_PARAMETER",
        body={"detail": "Bad request"},
    )
    assert analyze_from_evidence(facts) is None
    no_status = _facts(
        failed_trace,
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body={"errors": [{"field": "q", "message": "is required"}]},
    )
    assert analyze_from_evidence(no_status) is None


@pytest.mark.django_db
def test_a_new_required_argument_taken_from_an_earlier_result_of_the_run(
    failed_trace: Any,
) -> None:
    # given a failing call (now step 3) that lacks an argument the API says is required,
    # after a successful lookup whose result holds it and a result that is not JSON
    trace = failed_trace(
        tool="get_order",
        action_input={"order_id": "#W1000001"},
        error_type="MISSING_REQUIRED_FIELD",
        body=json.dumps(
            {"detail": [{"type": "missing", "loc": ["query", "sku"], "msg": "Field required"}]}
        ),
    )
    Step.objects.filter(trace=trace).update(step_number=3)
    for number, tool, summary in (
        (
            1,
            "search_products",
            json.dumps(
                {
                    # searched breadth first, no deeper than 5 levels
                    "meta": {"a": {"b": {"c": {"d": {"sku": "TOO-DEEP"}}}}},
                    "count": 1,
                    "results": [{"name": "Cap", "sku": "CAP-0001"}],
                }
            ),
        ),
        (2, "get_faq", "Plain text, not JSON"),
    ):
        Step.objects.create(
            trace=trace,
            step_number=number,
            phase="action",
            action_type="tool",
            tool_name=tool,
            status_code=200,
            ok=True,
            response_summary=summary,
            started_at=timezone.now(),
        )
    [facts] = failures_of_trace(trace)

    proposal = analyze_from_evidence(facts)

    # then the proposer adds it from the earlier result, where the API wants it
    assert proposal is not None, "no proposal"
    assert proposal.branch["steps"] == [
        {
            "op": "add",
            "name": "sku",
            "from": "fact",
            "tool": "search_products",
            "path": "results.0.sku",
            "in": "query",
        }
    ]
    assert branch_errors(proposal.kind, proposal.branch) == []


@pytest.mark.django_db
def test_stale_accepted_examples_give_way_to_what_the_api_says_now(
    failed_trace: Any, support_agent: Any
) -> None:
    # The tool once accepted ids in another form (a contract that has moved on again).
    for number in ("W-1000002", "W-1000003"):
        _accepted(support_agent, "get_order", {"order_id": number})
    facts = _facts(
        failed_trace,
        error_type="INVALID_PARAMETER",
        body={"errors": [{"field": "order_id", "message": "order_id must be lowercase"}]},
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch == {"tool": "get_order", "field": "order_id", "transform": "lower"}


@pytest.mark.django_db
def test_a_new_required_parameter_with_its_one_value_is_added_not_renamed(
    failed_trace: Any,
) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "cap"},
        error_type="MISSING_REQUIRED_FIELD",
        body={
            "type": "https://example.com/problems/missing",
            "title": "Bad Request",
            "status": 400,
            "detail": "api_version is required; allowed values are 2024-10-01.",
            "invalid-params": [
                {"name": "api_version", "reason": "is required; allowed values are 2024-10-01."}
            ],
        },
    )
    proposal = analyze_from_evidence(facts)
    assert proposal is not None
    assert proposal.branch["steps"] == [
        {"op": "add", "name": "api_version", "from": "value", "value": "2024-10-01"}
    ]
    assert "API's one value" in proposal.strategy_update
    assert branch_errors(proposal.kind, proposal.branch) == []


@pytest.mark.django_db
def test_a_new_required_parameter_with_several_values_is_left_alone(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        tool="search_products",
        action_input={"query": "cap"},
        error_type="MISSING_REQUIRED_FIELD",
        body={"errors": [{"field": "region", "message": "is required; one of: eu, us."}]},
    )
    # Neither a rename of query (the API lists the values it takes) nor a guessed value.
    assert analyze_from_evidence(facts) is None


@pytest.mark.parametrize(
    ("message", "to"),
    [
        ("sku must use '.' as its separator, not '-'", "."),
        ("SKU codes are now separated by ':'", ":"),
        ("the delimiter must be '_'", "_"),
    ],
)
def test_a_separator_the_message_names(message: str, to: str) -> None:
    from policies.error_bodies import message_hints

    hints = message_hints(message)
    assert hints.separator == to
    assert chain_for("AWH-2041-BLK", Target.build("AWH-2041-BLK", hints, ())) == (
        "",
        [{"op": "separators", "from": "-", "to": to}],
    )


@pytest.mark.django_db
def test_a_lowercased_sku_is_a_lookup_on_a_404_and_a_rewrite_on_a_400(
    failed_trace: Any, support_agent: Any
) -> None:
    for sku in ("CAP-0001-BLU", "HAT-0002-RED"):
        _accepted(support_agent, "check_inventory", {"sku": sku})
    refused = {"tool": "check_inventory", "action_input": {"sku": "awh-2041-blk"}}
    not_found = _facts(
        failed_trace, status_code=404, error_type="RESOURCE_NOT_FOUND", body="", **refused
    )
    # The value looks like a name to the lookup analyzer, which takes the 404 over.
    assert analyze_name_for_id(not_found) is not None
    assert list(evidence_candidates(not_found)) == []
    # Refused as malformed instead, the accepted SKUs support a rewrite.
    invalid = _facts(
        failed_trace, status_code=400, error_type="INVALID_PARAMETER", body="", **refused
    )
    [candidate] = evidence_candidates(invalid)
    assert candidate.branch == {"tool": "check_inventory", "field": "sku", "transform": "upper"}


@pytest.mark.django_db
def test_the_evidence_puts_at_most_three_repairs_to_the_replay(failed_trace: Any) -> None:
    facts = _facts(
        failed_trace,
        tool="check_inventory",
        action_input={name: "ABC" for name in ("sku", "warehouse", "region", "channel")},
        error_type="INVALID_PARAMETER",
        body={"detail": "values must be lowercase"},
    )
    # All four arguments break the rule the body states; three repairs go to the replay.
    fields = [c.branch["field"] for c in evidence_candidates(facts)]
    assert MAX_EVIDENCE_CANDIDATES == 3
    assert len(set(fields)) == len(fields) == 3
