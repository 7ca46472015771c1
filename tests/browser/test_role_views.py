"""Each role's view of the console, in Chromium on the app served by bin/serve: the nav
shows only what the role may use, and every page it links opens."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

ROLES = {
    "support": ("support-demo", {"Assistant", "My traces", "API"}),
    "ops": (
        "ops-demo",
        {
            "Assistant",
            "Overview",
            "Failures",
            "Traces",
            "Reviews",
            "Policies",
            "Experiments",
            "Jobs",
            "API",
        },
    ),
    "admin": (
        "admin-demo",
        {
            "Assistant",
            "Overview",
            "Failures",
            "Traces",
            "Reviews",
            "Tools",
            "Policies",
            "Experiments",
            "Jobs",
            "Audit log",
            "Admin",
            "API",
        },
    ),
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_sees_its_own_console(page: Any, embedded_server: ServedApp, role: str) -> None:
    password, expected = ROLES[role]
    login(page, embedded_server.url, role, password)
    page.wait_for_selector("nav")
    links = {
        text.strip(): href
        for text, href in page.eval_on_selector_all(
            "nav a", "els => els.map(a => [a.textContent, a.getAttribute('href')])"
        )
    }
    # the nav offers the role's pages and nothing above its role
    assert expected <= set(links), links
    forbidden = set().union(*(names for _, names in ROLES.values())) - expected
    assert not forbidden & set(links), links
    screenshot(page, f"home-{role}")
    # and every page it links opens for that role
    for text, href in links.items():
        if href.startswith("/admin/") or text == "API":
            continue
        response = page.goto(embedded_server.url + href)
        assert response is not None and response.status == 200, (text, href)
        assert page.locator("h1").count() >= 1, (text, href)
