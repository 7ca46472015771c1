"""The review item page and its actions: what approving publishes, edit-then-approve with a
fresh replay, reject with a reason, asking for evidence, assignment, and who may do it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from policies.models import PolicyVersion, Strategy
from policies.reflexion import reflexion_run
from policies.services import policy_members_with, strategy_activate, strategy_outcome_record
from reviews.models import AuditLog, ReviewItem
from reviews.services import (
    ReviewConflict,
    StrategyEdit,
    StrategyEditInvalid,
    feedback_submit,
    published_label,
    review_item_approve,
    review_item_assign,
    review_item_edit_approve,
    review_item_lock,
    review_item_reject,
    review_item_reopen,
    review_item_request_evidence,
)
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db

RULE = {"tool": "search_products", "schema": {"required": ["query"]}}
STRICTER = (
    "tool: search_products\n"
    "schema:\n"
    "  required: [query]\n"
    "  properties:\n"
    "    query: {type: string, minLength: 2}\n"
)


@pytest.fixture
def proposal(make_strategy: Any, failed_trace: Any) -> ReviewItem:
    """A validation rule learned from a recorded call without its query, in review."""
    trace = failed_trace(
        tool="search_products", action_input={"limit": 3}, error_type="MISSING_REQUIRED_FIELD"
    )
    strategy = make_strategy(
        kind="validation_rule",
        branch=RULE,
        error_type="MISSING_REQUIRED_FIELD",
        root_cause="search_products called without required query",
        strategy_update="Validate that query is present before calling search_products",
        status=Strategy.Status.IN_REVIEW,
        replay_status=Strategy.Replay.PASSED,
    )
    strategy.source_traces.add(trace)
    return ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)


def _edit_form(**overrides: str) -> dict[str, str]:
    return {
        "root_cause": "search_products called without a usable query",
        "strategy_update": "Require a query of two characters or more",
        "branch": STRICTER,
        "note": "tightened",
        **overrides,
    }
