"""A 429 or 503 that says how long to wait becomes a bounded wait-and-retry handler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.branches import branch_errors
from policies.reflexion import (
    ANALYZERS,
    analyze_retry_after,
    failures_of_trace,
    quality_gates,
)
from traces.models import Step

pytestmark = pytest.mark.django_db


def _facts(failed_trace: Any, *, status: int, error_type: str, body: Any, details=None) -> Any:
    trace = failed_trace(
        tool="get_sku_price",
        action_input={"sku": "AWH-2041-BLK"},
        status_code=status,
        error_type=error_type,
        body=body if isinstance(body, str) else json.dumps(body),
    )
    if details is not None:
        Step.objects.filter(trace=trace).update(details=details)
    [facts] = failures_of_trace(trace)
    return facts


@pytest.mark.parametrize(
    ("status", "error_type", "body", "details", "wait"),
    [
        (503, "SERVICE_UNAVAILABLE", {"detail": "unavailable"}, {"retry_after_s": 2.0}, 2.0),
        (429, "RATE_LIMITED", {"error": "rate_limited", "retry_after": 3}, None, 3.0),
        (503, "SERVICE_UNAVAILABLE", "503: down for a moment, retry after 1 s", None, 1.0),
    ],
    ids=["header", "body-field", "body-text"],
)
def test_a_stated_wait_becomes_a_wait_retry_handler(
    failed_trace, status, error_type, body, details, wait
):
    facts = _facts(failed_trace, status=status, error_type=error_type, body=body, details=details)
    assert facts.retry_after_s == wait

    proposal = analyze_retry_after(facts)

    assert proposal is not None and proposal.kind == "error_handler"
    assert proposal.branch == {
        "tool": "get_sku_price",
        "on": error_type,
        "action": "wait_retry",
        "max_retries": 1,
        "max_wait_s": max(2.0, 2 * wait),
    }
    assert branch_errors(proposal.kind, proposal.branch) == []
    # It passes the business constraints (one retry, no retry storm) that gate every proposal.
    assert quality_gates(proposal, facts)["constraints"] == ""
    # It cites only fields the failed trace has, as every analyzer's proposal must.
    assert quality_gates(proposal, facts)["facts_anchored"] == ""
    assert proposal.cited_trace_ids == [facts.trace_id]
    # It comes before the degrade-to-cache analyzer, which needs a cache to be of any use.
    first = next(p for p in (a(facts) for a in ANALYZERS) if p is not None)
    assert first.origin == "analyzer:retry_after"


@pytest.mark.parametrize(
    ("status", "error_type", "body", "details"),
    [
        (429, "RATE_LIMITED", {"error": "rate_limited"}, None),  # no wait stated
        (503, "SERVICE_UNAVAILABLE", {"detail": "down"}, {"retry_after_s": 600}),  # too long
        (500, "INTERNAL_SERVER_ERROR", {"detail": "retry after 1 s"}, None),  # not retry-later
    ],
    ids=["no-wait", "too-long", "a-500"],
)
def test_no_handler_without_a_usable_stated_wait(failed_trace, status, error_type, body, details):
    facts = _facts(failed_trace, status=status, error_type=error_type, body=body, details=details)

    assert analyze_retry_after(facts) is None
