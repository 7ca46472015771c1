"""An admin manages the tool whitelist on /tools/ in real Chromium against bin/serve with
its in-process worker: a refused schema edit shows its error inline, and a tool disabled
on the page cannot be called by the next run posted through the API.

The embedded shape only: the production-shape fixture flushes one shared Redis database
(13) on start, which parallel sessions on this machine also use.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]


def _run_steps(served: ServedApp, token: str) -> tuple[dict, list[dict]]:
    status, body = served.request(
        "POST", "/api/runs/", token=token, body={"query": f"Where is my order {served.demo_order}?"}
    )
    assert status == 202, body
    trace = served.wait_terminal(json.loads(body)["id"], token=token)
    status, body = served.request("GET", f"/api/traces/{trace['id']}/steps/", token=token)
    assert status == 200, body
    return trace, json.loads(body)


def _called(steps: list[dict], tool: str) -> list[dict]:
    return [s for s in steps if s["phase"] == "action" and s["tool_name"] == tool]


def test_admin_disables_a_tool_and_the_next_api_run_cannot_call_it(
    page: Any, embedded_server: ServedApp
) -> None:
    served = embedded_server
    token = served.api_token("admin")
    # given a run that calls get_order while it is enabled
    _, steps = _run_steps(served, token)
    assert [s["status_code"] for s in _called(steps, "get_order")] == [200]

    login(page, served.url, "admin", "admin-demo")
    page.click("nav >> text=Tools")
    page.wait_for_selector("table.tools-table")
    row = page.locator("#tool-get_order")
    assert "enabled" in row.inner_text()
    screenshot(page, "tools_list")

    # when the admin disables it on the page, confirming on the second screen
    row.locator("text=Disable").click()
    page.wait_for_selector("#confirm")
    assert "TOOL_NOT_ALLOWED" in page.inner_text("main")
    page.click("#confirm")
    page.wait_for_selector("text=get_order disabled")
    assert "disabled" in page.locator("#tool-get_order").inner_text()

    # then the next run posted through the API never calls it
    trace, steps = _run_steps(served, token)
    assert _called(steps, "get_order") == []
    assert "not available" in trace["final_answer"] and "get_order" not in trace["final_answer"]

    # and after it is enabled again, the run after that calls it again
    page.locator("#tool-get_order").locator("text=Enable").click()
    page.click("#confirm")
    page.wait_for_selector("text=get_order enabled")
    _, steps = _run_steps(served, token)
    assert [s["status_code"] for s in _called(steps, "get_order")] == [200]


def test_a_bad_schema_edit_shows_its_error_inline_and_keeps_the_text(
    page: Any, embedded_server: ServedApp
) -> None:
    served = embedded_server
    login(page, served.url, "admin", "admin-demo")
    page.goto(f"{served.url}/tools/")
    page.locator("#tool-get_order").locator("text=Edit").click()
    page.wait_for_selector("form.tool-form")
    original = page.input_value("textarea[name=params_schema]")
    assert '"order_id"' in original

    broken = original.replace('"object"', '"objekt"', 1)
    page.fill("textarea[name=params_schema]", broken)
    page.fill("input[name=endpoint_template]", "https://{host}/orders/{order_id}")
    page.click("form.tool-form button[type=submit]")

    page.wait_for_selector("#field-params_schema .errorlist")
    assert "Not a valid JSON Schema" in page.inner_text("#field-params_schema .errorlist")
    assert page.input_value("textarea[name=params_schema]") == broken
    assert "placeholder" in page.inner_text("#field-endpoint_template .errorlist")
    screenshot(page, "tools_edit_errors")
    page.goto(f"{served.url}/tools/")
    page.locator("#tool-get_order").locator("text=Edit").click()
    page.wait_for_selector("form.tool-form")
    assert page.input_value("textarea[name=params_schema]") == original
    screenshot(page, "tools_edit")


def test_the_tools_list_is_usable_at_phone_width(browser: Any, embedded_server: ServedApp) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        login(page, embedded_server.url, "admin", "admin-demo")
        page.goto(f"{embedded_server.url}/tools/")
        page.wait_for_selector("#tool-get_order")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        screenshot(page, "tools_list-390")
    finally:
        context.close()
