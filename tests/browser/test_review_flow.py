"""A reviewer works the review queue in Chromium on the app served by bin/serve: approves a
proposal after editing it (a refused edit first shows its error and keeps the text), and
rejects another with a reason, each with the keyboard shortcuts; every decision leaves
its audit row.

The embedded shape only: the production-shape fixture flushes a shared Redis database.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

# A validation rule learned from a recorded call of search_products without its query,
# waiting in the queue; made from a second shell of the installation.
PROPOSE = """
from django.utils import timezone
from agents.models import Agent
from policies.branches import branch_signature
from policies.models import Policy, Strategy
from reviews.models import ReviewItem
from traces.models import Step, Trace
from traces.services import trace_create

agent = Agent.objects.order_by("pk").first()
trace = trace_create(agent_id=agent.pk, query="{query}", llm_backend="simulated")
Step.objects.create(
    trace=trace, step_number=1, phase="action", action_type="tool",
    tool_name="search_products", action_input={{"limit": 3}}, ok=False,
    error_type="MISSING_REQUIRED_FIELD", started_at=timezone.now(),
    response_summary='{{"field": "query"}}',
)
Trace.objects.filter(pk=trace.pk).update(status="failed")
branch = {{"tool": "search_products", "schema": {{"required": ["query"]}}}}
policy, _ = Policy.objects.get_or_create(intent="", tool_name="search_products")
strategy = Strategy.objects.create(
    policy=policy, kind="validation_rule", tool_name="search_products",
    error_type="MISSING_REQUIRED_FIELD",
    root_cause="search_products called without required query",
    strategy_update="{update}",
    branch=branch, signature=branch_signature("validation_rule", branch),
    status="in_review", replay_status="passed", origin="browser-test",
)
strategy.source_traces.add(trace)
item = ReviewItem.objects.create(strategy=strategy, reason="low_confidence")
print(item.pk, strategy.pk)
"""

AUDIT = """
import json
from reviews.models import AuditLog
rows = AuditLog.objects.filter(target__in=["review {item}", "S{strategy}"]).order_by("pk")
print(json.dumps([[r.action, r.actor.username if r.actor else r.actor_kind, r.details]
                  for r in rows]))
"""

STRATEGY = """
import json
from policies.models import Strategy
s = Strategy.objects.get(pk={strategy})
print(json.dumps([s.status, s.branch, s.root_cause]))
"""


def _shell(served: ServedApp, code: str) -> str:
    lines = served.manage("shell", "-c", code).strip().splitlines()
    return lines[-1] if lines else ""


def _propose(served: ServedApp, query: str, update: str) -> tuple[int, int]:
    item, strategy = _shell(served, PROPOSE.format(query=query, update=update)).split()
    return int(item), int(strategy)


def _audit(served: ServedApp, item: int, strategy: int) -> list[list[Any]]:
    return list(json.loads(_shell(served, AUDIT.format(item=item, strategy=strategy))))


def test_ops_approve_a_proposal_with_an_edit(page: Any, embedded_server: ServedApp) -> None:
    served = embedded_server
    item, strategy = _propose(served, "find me a jacket", "Validate the search query first")
    login(page, served.url, "ops", "ops-demo")
    page.wait_for_selector("nav")

    # the queue links to the item; the item reads as words and shows the version to come
    page.goto(f"{served.url}/reviews/")
    page.click(f"#review-{item} a.item-link")
    page.wait_for_selector("#version-preview")
    assert "refuse the call unless the input requires query" in page.inner_text("#strategy")
    assert "Approving creates" in page.inner_text("#version-preview")
    assert "{'" not in page.inner_text("#strategy")

    # e opens the edit form; an invalid rule is refused with its error, the text kept
    page.keyboard.press("e")
    page.wait_for_selector("#edit-form textarea[name=branch]", state="visible")
    broken = "tool: search_products\nschema: {type: objekt}\n"
    page.fill("textarea[name=branch]", broken)
    page.fill("input[name=strategy_update]", "Require a search query of two characters")
    page.click("#edit-approve")
    page.wait_for_selector("#field-branch .errorlist")
    assert "schema is invalid" in page.inner_text("#field-branch .errorlist")
    assert page.input_value("textarea[name=branch]") == broken
    assert page.input_value("input[name=strategy_update]") == (
        "Require a search query of two characters"
    )
    screenshot(page, "review_item_edit_error")

    # a valid edit is replayed against the recorded call, then published
    page.fill(
        "textarea[name=branch]",
        "tool: search_products\nschema:\n  required: [query]\n"
        "  properties:\n    query: {type: string, minLength: 2}\n",
    )
    page.fill("#edit-form input[name=note]", "tightened the rule")
    page.click("#edit-approve")
    page.wait_for_selector("text=edited and approved")
    assert "published as version v" in page.inner_text("main")
    assert page.inner_text("#item-status") == "Approved"
    screenshot(page, "review_item_approved")

    # Approval publishes a canary (POLICY_PUBLISH=canary): the strategy is approved and
    # its version serves 1% until the evaluator promotes it.
    assert "a canary on 1%" in page.inner_text("main")
    status, branch, _ = json.loads(_shell(served, STRATEGY.format(strategy=strategy)))
    assert status == "approved"
    assert branch["schema"]["properties"]["query"]["minLength"] == 2
    rows = _audit(served, item, strategy)
    actions = [(action, actor) for action, actor, _ in rows]
    assert ("strategy.edit", "ops") in actions and ("strategy.approve", "ops") in actions
    [approve] = [details for action, actor, details in rows if action == "review.approve"]
    assert approve["edited"] == ["branch", "strategy_update"]
    assert approve["note"] == "tightened the rule"
    assert approve["published"].startswith("published as version v")


def test_admin_rejects_a_proposal_with_a_reason(page: Any, embedded_server: ServedApp) -> None:
    served = embedded_server
    item, strategy = _propose(served, "any red shoes", "Validate every search before calling")
    login(page, served.url, "admin", "admin-demo")
    page.wait_for_selector("nav")
    page.goto(f"{served.url}/reviews/{item}/")
    page.wait_for_selector("#actions")
    assert "Keyboard shortcuts" in page.inner_text("#shortcuts")
    screenshot(page, "review_item")

    # r moves to the reason; Enter there rejects
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.id") == "reject-note"
    page.keyboard.type("duplicates the rule we already have")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=rejected")
    assert page.inner_text("#item-status") == "Rejected"
    assert "duplicates the rule we already have" in page.inner_text("#decision")

    status, _, _ = json.loads(_shell(served, STRATEGY.format(strategy=strategy)))
    assert status == "rejected"
    rows = _audit(served, item, strategy)
    [reject] = [details for action, actor, details in rows if action == "review.reject"]
    assert reject["note"] == "duplicates the rule we already have"
    assert ["review.reject", "admin"] in [[action, actor] for action, actor, _ in rows]

    # and the admin finds the row on the audit log page
    page.goto(f"{served.url}/reviews/audit/?action=review.reject&target=review%20{item}")
    page.wait_for_selector("main table")
    assert "duplicates the rule we already have" in page.inner_text("main table")
    screenshot(page, "review_audit_reject")
