"""Ops roll a canary back by hand on /policies/rollouts/ in real Chromium against bin/serve
with its in-process worker, confirming on a second screen; the decision and its audit row
name the user, and the admin finds the row on the audit log page.

The embedded shape only, like the tools page: the production-shape fixture flushes a
Redis database that parallel sessions on this machine also use.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

# A canary approved by ops in that installation (any rollout left open is rolled back
# first: one is open at a time).
START = """
import json
from django.contrib.auth import get_user_model
from policies.models import Policy, Rollout, Strategy
from policies.branches import branch_signature
from policies.rollouts import rollout_manual
from policies.services import strategy_activate
for open_one in Rollout.objects.filter(is_open=True):
    rollout_manual(rollout_id=open_one.pk, action="rollback", actor=None, note="test setup")
branch = {"tool": "get_order", "text": "Quote the order status word for word."}
policy, _ = Policy.objects.get_or_create(intent="", tool_name="get_order")
strategy = Strategy.objects.create(
    policy=policy, kind="prompt_hint", tool_name="get_order", error_type="HALLUCINATED_ANSWER",
    root_cause="answers paraphrased the status", strategy_update="quote the status verbatim",
    branch=branch, signature=branch_signature("prompt_hint", branch), origin="human",
    status="in_review",
)
ops = get_user_model().objects.get(username="ops")
version = strategy_activate(strategy=strategy, actor=ops, author_kind="reviewer")
print(json.dumps({"rollout": Rollout.objects.get(version=version).pk, "strategy": strategy.pk}))
"""

AUDIT = """
import json
from policies.models import Rollout, RolloutDecision, Strategy
from reviews.models import AuditLog
rollout = Rollout.objects.get(pk={pk})
row = AuditLog.objects.get(action="rollout.rollback", target=rollout.label)
decision = RolloutDecision.objects.get(rollout=rollout, action="rollback")
print(json.dumps({{
    "state": rollout.state, "percent": rollout.percent,
    "strategy": Strategy.objects.get(pk=rollout.strategy_id).status,
    "actor": row.actor.username if row.actor else None, "actor_kind": row.actor_kind,
    "reason": row.details.get("reason"), "from": row.details.get("from_percent"),
    "decision_actor": decision.actor.username if decision.actor else None,
    "decision_window": decision.window_start is not None,
}}))
"""


# Finished customer runs on both arms: 1 of 4 canary runs failed, none of 6 stable ones.
RUNS = """
import json
from agents.models import Agent
from policies.models import Rollout
from traces.models import Trace
rollout = Rollout.objects.select_related("version", "stable").get(pk={pk})
agent = Agent.objects.order_by("pk").first()
stable = rollout.stable.label if rollout.stable else ""
rows = [(rollout.version.label, i == 0) for i in range(4)] + [(stable, False)] * 6
Trace.objects.bulk_create([
    Trace(agent=agent, query="q", query_hash="q", policy_version=label, origin="customer",
          status="failed" if failed else "finished", error_type="TIMEOUT" if failed else "",
          total_latency_ms=120)
    for label, failed in rows
])
print(json.dumps({{"runs": len(rows)}}))
"""


def _shell(served: ServedApp, code: str) -> dict[str, Any]:
    lines = served.manage("shell", "-c", code).strip().splitlines()
    return json.loads(lines[-1])


def test_ops_roll_a_canary_back_and_the_audit_row_names_them(
    page: Any, embedded_server: ServedApp
) -> None:
    served = embedded_server
    started = _shell(served, START)
    pk = started["rollout"]

    login(page, served.url, "ops", "ops-demo")
    page.click("nav >> text=Policies")
    page.click("nav.subnav >> text=Rollouts")
    page.wait_for_selector("#rollouts")
    page.click(f"#rollouts >> a[href='/policies/rollouts/{pk}/']")
    page.wait_for_selector("#rollout-percent")
    assert page.inner_text("#rollout-percent") == "1%"
    assert page.inner_text("#rollout-state") == "Running"
    assert "start" in page.inner_text("#decisions").lower()
    page.wait_for_function("document.querySelector('#rollout-errors').dataset.ready !== undefined")

    # with runs on both arms, each guarded-metric tile draws the canary's difference
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    assert _shell(served, RUNS.format(pk=pk)) == {"runs": 10}
    page.reload()
    for metric in ("error_rate", "success_rate", "p95_ms"):
        # drawn ("1"), not "no run yet" nor "could not load"
        page.wait_for_selector(f"#guard-{metric}[data-ready='1']", state="visible")
    assert errors == []
    screenshot(page, "rollout_detail")

    # when ops roll it back, confirming on the second screen with a note
    page.click("#rollback")
    page.wait_for_selector("#confirm")
    assert "back to the stable version" in page.inner_text("main")
    page.fill("input[name=note]", "customers complain about the wording")
    page.click("#confirm")
    page.wait_for_selector("#rollout-state >> text=Rolled Back")
    assert "rollback" in page.inner_text("#decisions").lower()
    assert "customers complain about the wording" in page.inner_text("#decisions")
    assert page.locator("#controls").count() == 0  # an ended rollout offers no controls
    screenshot(page, "rollout_rolled_back")

    # then the rollout, the strategy, the decision and the audit row say who and why
    audit = _shell(served, AUDIT.format(pk=pk))
    assert audit == {
        "state": "rolled_back",
        "percent": 0,
        "strategy": "rejected",
        "actor": "ops",
        "actor_kind": "user",
        "reason": "rollback by ops: customers complain about the wording",
        "from": 1,
        "decision_actor": "ops",
        "decision_window": True,
    }

    # and the admin finds the row on the audit log page
    page.context.clear_cookies()
    login(page, served.url, "admin", "admin-demo")
    page.goto(f"{served.url}/reviews/audit/?action=rollout.rollback")
    body = page.inner_text("main")
    assert f"rollout {pk}" in body and "ops" in body
