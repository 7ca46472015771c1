"""A support agent logs in, asks the assistant about an order and watches the steps arrive,
on the app served by bin/serve (daphne) in each deployment shape."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]


def login(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_support_agent_asks_about_an_order_and_sees_the_grounded_answer(
    page: Any, served: ServedApp
) -> None:
    login(page, served.url, "support", "support-demo")
    page.wait_for_selector("#chat-form")
    assert "simulated" in page.inner_text(".banner")

    page.fill("textarea[name=query]", f"Where is my order {served.demo_order}?")
    page.click("#chat-form button[type=submit]")
    # htmx polls the run until it is terminal; wait for the final badge
    page.wait_for_selector("article.run .badge.finished", timeout=60_000)
    run_text = page.inner_text("article.run")
    assert "get_order" in run_text
    assert "reflection" in run_text.lower()
    assert served.demo_order in page.inner_text("article.run .answer")
    screenshot(page, f"chat-{served.shape}")

    page.click("article.run .answer a")
    page.wait_for_selector("ol.timeline")
    assert "get_order" in page.inner_text("ol.timeline")
    screenshot(page, f"trace_detail-{served.shape}")


def test_ops_sees_the_trace_explorer_with_filters(page: Any, served: ServedApp) -> None:
    login(page, served.url, "ops", "ops-demo")
    page.goto(f"{served.url}/traces/")
    page.wait_for_selector("form.filters")
    assert page.locator("table").count() >= 1
    screenshot(page, f"trace_list-{served.shape}")


def test_wrong_password_is_refused_with_a_message(page: Any, served: ServedApp) -> None:
    login(page, served.url, "support", "wrong")
    assert "Wrong username or password" in page.inner_text("main")
