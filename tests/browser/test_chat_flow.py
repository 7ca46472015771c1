"""A support agent logs in, asks the assistant about an order and watches the steps arrive."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from sandbox.models import Order
from tests.browser.conftest import screenshot
from traces.models import Trace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(live_sandbox: str, small_shop: Any, settings: Any) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    call_command("demo_seed", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115


def login(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_support_agent_asks_about_an_order_and_sees_the_grounded_answer(
    page: Any, live_server: Any, demo: None
) -> None:
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    login(page, live_server.url, "support", "support-demo")
    page.wait_for_selector("#chat-form")
    assert "simulated" in page.inner_text(".banner")

    page.fill("textarea[name=query]", f"Where is my order {order.order_id}?")
    page.click("#chat-form button[type=submit]")
    # htmx polls the run until it is terminal; wait for the final badge
    page.wait_for_selector("article.run .badge.finished", timeout=30_000)
    run_text = page.inner_text("article.run")
    assert "get_order" in run_text
    assert "reflection" in run_text.lower()
    assert order.order_id in page.inner_text("article.run .answer")
    screenshot(page, "chat")

    trace = Trace.objects.get(source="chat")
    page.click("article.run .answer a")
    page.wait_for_selector("table.steps-table")
    assert str(trace.pk) in page.inner_text("h1")
    screenshot(page, "trace_detail")


def test_ops_sees_the_trace_explorer_with_filters(page: Any, live_server: Any, demo: None) -> None:
    login(page, live_server.url, "ops", "ops-demo")
    page.goto(f"{live_server.url}/traces/")
    page.wait_for_selector("form.filters")
    assert "No traces match." in page.inner_text("table")
    screenshot(page, "trace_list")


def test_wrong_password_is_refused_with_a_message(page: Any, live_server: Any, demo: None) -> None:
    login(page, live_server.url, "support", "wrong")
    assert "Wrong username or password" in page.inner_text("main")
