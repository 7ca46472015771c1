"""An ops user runs an A/B experiment of the learning loop in real Chromium against
bin/serve with its in-process worker: create it, start it (confirming), let API traffic
in, read the report, stop it; every step leaves its audit row.

The orders API has drifted (it wants the bare integer id) and the loop has learned an
adapter for it, so the treatment arm answers and the control arm, without learned
strategies, cannot. The app is served on its own for this module: the drift and the
published strategy must not reach other modules' runs.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from policies.experiments import CONTROL, TREATMENT, experiment_arm_assign
from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp, app_teardown, embedded_app

pytestmark = [pytest.mark.browser, pytest.mark.served]

PER_ARM = 10
PUBLISH_ADAPTER = """
from policies.branches import branch_signature
from policies.models import Policy, Strategy
from policies.services import strategy_activate
b = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
p, _ = Policy.objects.get_or_create(intent="", tool_name="get_order")
s = Strategy.objects.create(
    policy=p, kind="adapter", tool_name="get_order", error_type="TYPE_MISMATCH",
    root_cause="get_order requires the bare integer id", branch=b,
    strategy_update="Convert order_id to its digits", signature=branch_signature("adapter", b),
    origin="human",
)
print(strategy_activate(strategy=s, author_kind="reviewer").number)
"""


@pytest.fixture(scope="module")
def served() -> Iterator[ServedApp]:
    app = embedded_app(Path(tempfile.mkdtemp(prefix="agentops-experiments-")))
    try:
        app.start()
        yield app
    finally:
        app_teardown(app)


def _shell(served: ServedApp, code: str) -> str:
    lines = served.manage("shell", "-c", code).strip().splitlines()
    return lines[-1] if lines else ""


def _sessions(experiment_pk: int, arm: str) -> list[str]:
    """Session ids the experiment's hash puts in ``arm`` (the same function the app runs)."""
    chosen = []
    for i in range(10_000):
        unit = f"browser-{arm}-{i}"
        if (
            experiment_arm_assign(
                experiment_pk=experiment_pk, unit=f"session:{unit}", traffic_percent=100
            )
            == arm
        ):
            chosen.append(unit)
        if len(chosen) == PER_ARM:
            return chosen
    raise AssertionError("the hash never chose this arm")


def _ask(served: ServedApp, token: str, session_id: str) -> str:
    status, body = served.request(
        "POST",
        "/api/runs/",
        token=token,
        body={"query": f"Where is my order {served.demo_order}?", "session_id": session_id},
    )
    assert status == 202, body
    return str(json.loads(body)["id"])


def test_ops_runs_an_experiment_from_draft_to_report_to_stop(page: Any, served: ServedApp) -> None:
    token = served.api_token("ops")
    status, body = served.request(
        "PUT",
        "/sandbox/api/_faults/orders",
        body={"drift": "require_int_id"},
        headers={"Authorization": "Basic " + base64.b64encode(b"ops:ops-demo").decode()},
    )
    assert status == 200, body
    assert _shell(served, PUBLISH_ADAPTER).isdigit()

    login(page, served.url, "ops", "ops-demo")
    page.click("nav >> text=Experiments")
    page.wait_for_selector("text=No experiments yet")
    page.click("#new-experiment")
    page.fill("input[name=name]", "Learned strategies vs none")
    page.fill("textarea[name=hypothesis]", "The adapter for the drifted orders API answers.")
    page.fill("input[name=traffic_percent]", "100")
    page.fill("input[name=planned_runs_per_arm]", str(PER_ARM))
    page.click("#create")
    page.wait_for_selector("text=created as a draft")
    match = re.search(r"/policies/experiments/(\d+)/$", page.url)
    assert match, page.url
    pk = int(match.group(1))
    assert page.inner_text("#status") == "Draft"
    assert "Not enough runs yet" in page.inner_text("#verdict")

    # start, after the confirmation page says what the control arm means for customers
    page.click("#start")
    page.wait_for_selector("#confirm")
    assert "no learned strategies" in page.inner_text("main")
    screenshot(page, "experiment_start_confirm")
    page.click("#confirm")
    page.wait_for_selector("text=new sessions are split from now on")
    assert page.inner_text("#status") == "Running"

    # traffic: new conversations, ten the hash puts in each arm
    control, treated = _sessions(pk, CONTROL), _sessions(pk, TREATMENT)
    ids = [_ask(served, token, session) for session in control + treated]
    for trace_id in ids:
        served.wait_terminal(trace_id, token=token)

    page.reload()
    page.wait_for_selector("#arms")
    assert page.inner_text("#arm-control .n") == str(PER_ARM)
    assert page.inner_text("#arm-treatment .n") == str(PER_ARM)
    assert page.inner_text("#arm-treatment .success").startswith("100.0% (")
    assert page.inner_text("#arm-control .success").startswith("0.0% (")
    verdict = page.inner_text("#verdict")
    assert verdict.startswith("The learned strategies help: success rate 100.0%"), verdict
    assert "p < 0.001" in page.inner_text("#tests")
    screenshot(page, "experiment_report")

    page.click("#stop")
    page.wait_for_selector("#confirm")
    page.click("#confirm")
    page.wait_for_selector("text=new sessions run as usual")
    assert page.inner_text("#status") == "Stopped"
    # a run after the stop enters no arm and applies the active version again
    after = served.wait_terminal(_ask(served, token, "browser-after-stop"), token=token)
    assert after["status"] == "finished"

    page.click("text=← Experiments")
    assert "Stopped" in page.inner_text(f"#experiment-{pk}")
    audit = _shell(
        served,
        "from reviews.models import AuditLog; "
        f"print(list(AuditLog.objects.filter(target='E{pk}').order_by('id')"
        ".values_list('action', 'actor__username', 'actor_kind')))",
    )
    assert audit == str(
        [
            ("experiment.create", "ops", "user"),
            ("experiment.start", "ops", "user"),
            ("experiment.stop", "ops", "user"),
        ]
    )
