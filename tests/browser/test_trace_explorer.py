"""Ops staff read the trace list, a trace's timeline and the review queue on a 390-px phone,
on the app served by bin/serve with its in-process worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

PHONE = {"width": 390, "height": 844}

# A proposal learned from one trace, made from a second shell of the installation.
PROPOSE = """
from policies.branches import branch_signature
from policies.models import Policy, Strategy
from reviews.models import ReviewItem
from traces.models import Trace

branch = {{"tool": "get_order", "field": "order_id", "transform": "strip"}}
policy, _ = Policy.objects.get_or_create(intent="", tool_name="get_order")
strategy = Strategy.objects.create(
    policy=policy, kind="adapter", tool_name="get_order", error_type="INVALID_PARAMETER",
    root_cause="order ids arrive with spaces around them",
    strategy_update="Trim the order id before the call",
    branch=branch, signature=branch_signature("adapter", branch), status="in_review",
    origin="browser-test",
)
strategy.source_traces.add(Trace.objects.get(pk="{trace_id}"))
ReviewItem.objects.create(strategy=strategy, reason="low_confidence")
print(strategy.pk)
"""


def scroll_width(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_trace_list_and_detail_fit_a_390px_phone(browser: Any, embedded_server: ServedApp) -> None:
    served = embedded_server
    # given a finished run, posted through the API like any client would
    token = served.api_token("ops")
    status, body = served.request(
        "POST", "/api/runs/", token=token, body={"query": f"Where is my order {served.demo_order}?"}
    )
    assert status == 202, body
    trace_id = json.loads(body)["id"]
    assert served.wait_terminal(trace_id, token=token)["status"] == "finished"
    strategy_id = served.manage("shell", "-c", PROPOSE.format(trace_id=trace_id)).split()[-1]
    context = browser.new_context(viewport=PHONE, device_scale_factor=1)
    page = context.new_page()
    login(page, served.url, "ops", "ops-demo")
    page.wait_for_selector("main")

    # when ops search the list for the order on a phone
    page.goto(f"{served.url}/traces/?q={served.demo_order.lstrip('#')}")
    page.wait_for_selector("table.trace-table tbody tr")
    # then each row is a card and nothing scrolls sideways
    assert page.locator("table.trace-table thead").is_hidden()
    assert served.demo_order in page.inner_text("table.trace-table tbody")
    assert scroll_width(page) <= PHONE["width"]
    screenshot(page, "trace_list-390")

    # when they open the trace
    page.click(f"a[href='/traces/{trace_id}/']")
    page.wait_for_selector("#round-1 .validated-input")
    # then the round shows the validated input the tool got, not {}
    validated = json.loads(page.inner_text("#round-1 .validated-input"))
    assert validated and served.demo_order.lstrip("#") in json.dumps(validated)
    assert page.locator("#round-1 details.raw pre").first.is_hidden()
    page.locator("#round-1 .action details.raw summary").click()
    assert page.locator("#round-1 .action details.raw pre").first.is_visible()
    # and the strategy learned from it, in words, with the way to its review
    learned = page.locator(f"#strategy-{strategy_id}")
    assert "in order_id, trim the spaces around it" in learned.inner_text()
    assert scroll_width(page) <= PHONE["width"]
    screenshot(page, "trace_detail-390")

    # when they follow it to the review queue
    learned.locator("a", has_text="review queue").click()
    page.wait_for_selector(f"#strategy-{strategy_id} .branch-description")
    # then the proposal reads as sentences, fits the phone, and leads back to its trace
    assert "{'" not in page.inner_text("main")
    assert scroll_width(page) <= PHONE["width"]
    screenshot(page, "review_queue-390")
    page.locator(f"#strategy-{strategy_id} a.source-trace").first.click()
    page.wait_for_selector(f"#strategy-{strategy_id}")
    assert page.url.endswith(f"/traces/{trace_id}/")
    context.close()
