"""Every console page works under the Content-Security-Policy the app sends: Chromium, on
the app served by bin/serve in each deployment shape, reports no refused script, style or
connection on any page of the admin's navigation, and the charts, the live chat socket
and the tools page's window selector still work."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]


def _watch(page: Any) -> list[str]:
    """What went wrong on the pages: console errors (a refused script, style or socket is
    one), uncaught exceptions, and failed requests other than the favicon's (there is
    none; Chromium asks anyway, and says so as a console error of its own)."""
    problems: list[str] = []

    def console(message: Any) -> None:
        if "Failed to load resource" in message.text:
            return  # reported with its address by on_response below
        if message.type == "error" or "Content Security Policy" in message.text:
            problems.append(message.text)

    def on_response(response: Any) -> None:
        if response.status >= 400 and not response.url.endswith("/favicon.ico"):
            problems.append(f"{response.status} {response.url}")

    page.on("console", console)
    page.on("response", on_response)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return problems


def test_every_page_of_the_navigation_runs_under_the_policy(page: Any, served: ServedApp) -> None:
    problems = _watch(page)
    login(page, served.url, "admin", "admin-demo")
    page.wait_for_selector("nav")
    hrefs = page.eval_on_selector_all("nav a[href^='/']", "links => links.map(a => a.href)")
    assert len(hrefs) >= 8, hrefs

    for href in dict.fromkeys(hrefs):
        response = page.goto(href)
        assert response is not None and response.status == 200, href
        policy = response.header_value("content-security-policy") or ""
        assert "script-src 'self'" in policy, (href, policy)
        page.wait_for_load_state("networkidle")

    assert problems == []


def test_charts_and_the_tools_window_selector_still_work(
    page: Any, embedded_server: ServedApp
) -> None:
    served = embedded_server
    problems = _watch(page)
    login(page, served.url, "admin", "admin-demo")
    page.goto(f"{served.url}/dashboards/")
    # charts.js ran and fetched its series (it marks the canvas ready once it has): a
    # refused script or fetch would not. With no runs yet there is nothing to draw.
    page.wait_for_selector("canvas[data-ready='1']", state="attached")
    assert page.evaluate("() => typeof window.Chart") == "function"

    page.goto(f"{served.url}/tools/")
    options = page.eval_on_selector_all("#window option", "os => os.map(o => o.value)")
    chosen = options[-1]
    with page.expect_navigation():
        page.select_option("#window", chosen)
    assert f"window={chosen}" in page.url
    assert problems == []
