"""The live chat on the app served by bin/serve, in each deployment shape: steps arrive
over the WebSocket (not by polling), a socket dropped mid-run resumes without losing or
repeating a step, and the chat works on a 390-px phone."""

from __future__ import annotations

import html
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp, app_teardown, embedded_app, production_app

pytestmark = [pytest.mark.browser, pytest.mark.served]

# Bounds on waits for a hung app; no assertion depends on how long anything takes.
RUN_TIMEOUT_MS = 90_000
# The simulated model waits this long per call on the slow app, so a run lasts seconds.
SLOW_LLM_MS = "1500"
# Redis database of the slow production-shape app (the regular one uses 13).
SLOW_REDIS_DB = 12


class HelpdeskPage(BaseHTTPRequestHandler):
    """Another site's page carrying the documented snippet for the app named in ``?app=``."""

    def do_GET(self) -> None:
        app = parse_qs(urlparse(self.path).query).get("app", [""])[0]
        body = (
            '<!doctype html><h1>Helpdesk</h1><div id="agentops-chat"></div>'
            f'<script src="{html.escape(app)}/static/js/embed.js" '
            'data-target="#agentops-chat" data-height="700" async></script>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def helpdesks() -> Iterator[dict[str, str]]:
    """Two pages of other origins on the same site as the app (so the session cookie goes
    to the framed chat): one the app lists as allowed to frame it, one it does not."""
    servers = {
        name: ThreadingHTTPServer(("127.0.0.1", 0), HelpdeskPage) for name in ("listed", "stranger")
    }
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {name: f"http://127.0.0.1:{server.server_port}" for name, server in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module", params=["embedded", "production"])
def slow_served(request: pytest.FixtureRequest, helpdesks: dict[str, str]) -> Iterator[ServedApp]:
    workdir = Path(tempfile.mkdtemp(prefix=f"agentops-slow-{request.param}-"))
    if request.param == "embedded":
        app = embedded_app(workdir)
    else:
        app = production_app(workdir, name_suffix="_slow", redis_db=SLOW_REDIS_DB)
    app.shape = f"{request.param}-slow"
    app.env["LLM_SIM_LATENCY_MS"] = SLOW_LLM_MS
    app.env["CHAT_EMBED_ALLOWED_ORIGINS"] = helpdesks["listed"]
    try:
        app.start()
        yield app
    finally:
        app_teardown(app)


def ask(page: Any, served: ServedApp, question: str) -> str:
    login(page, served.url, "support", "support-demo")
    page.wait_for_selector("#chat-form")
    # a conversation of its own, so the page holds only this run
    with page.expect_navigation():
        page.evaluate("document.querySelector('details.history form').submit()")
    page.wait_for_selector("#chat-form")
    page.fill("textarea[name=query]", question)
    page.click("#chat-form button[type=submit]")
    run = page.wait_for_selector("article.run[data-run]")
    return str(run.get_attribute("data-run"))


def page_steps(page: Any, run_id: str) -> list[int]:
    return page.eval_on_selector_all(
        f"#run-{run_id} ol.steps > li[data-step]",
        "items => items.map(item => parseInt(item.dataset.step, 10))",
    )


def served_steps(page: Any, served: ServedApp, run_id: str) -> list[int]:
    """The run's steps as the server renders them from the database."""
    html = page.request.get(f"{served.url}/traces/{run_id}/run/").text()
    return [int(n) for n in re.findall(r'data-step="(\d+)"', html)]


def poll_requests(page: Any) -> list[str]:
    seen: list[str] = []
    page.on(
        "request",
        lambda request: seen.append(request.url) if "/run/" in request.url else None,
    )
    return seen


def test_live_steps_arrive_over_the_websocket(page: Any, served: ServedApp) -> None:
    polls = poll_requests(page)
    run_id = ask(page, served, f"Where is my order {served.demo_order}?")
    # the run is followed by its socket until the terminal status arrives on it
    page.wait_for_selector(f'#run-{run_id}[data-live="done"]', timeout=RUN_TIMEOUT_MS)
    live = page.evaluate("({c: AgentOpsLive.connects, r: AgentOpsLive.received})")
    assert live["c"] >= 1 and live["r"] >= 1
    assert polls == []  # htmx never had to poll
    steps = page_steps(page, run_id)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert steps == served_steps(page, served, run_id)
    text = page.inner_text(f"#run-{run_id}").lower()
    assert "thinking" in text and "calling a tool" in text and "observation" in text
    assert "reflection" in text
    assert served.demo_order in page.inner_text(f"#run-{run_id} .draft")
    # the copy button puts the draft on the clipboard
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.url)
    page.click(f"#run-{run_id} button[data-copy]")
    page.wait_for_selector(f"#run-{run_id} button[data-copy]:text('Copied')")
    draft = page.inner_text(f"#run-{run_id} .draft")
    assert page.evaluate("navigator.clipboard.readText()") == draft
    # the answer's actions work on the live-rendered block (htmx processed it)
    page.click(f"#run-{run_id} button[name=rating][value=up]")
    page.wait_for_selector(f'#run-{run_id} button[value=up][aria-pressed="true"]')
    page.click(f"#run-{run_id} .handover button")
    page.wait_for_selector(f"#run-{run_id} .badge.handed")
    screenshot(page, f"chat-live-{served.shape}")


def test_a_socket_dropped_mid_run_resumes_without_losing_a_step(
    page: Any, slow_served: ServedApp
) -> None:
    served = slow_served
    polls = poll_requests(page)
    run_id = ask(page, served, f"Where is my order {served.demo_order}?")
    page.wait_for_selector(f'#run-{run_id}[data-live="open"] ol.steps > li[data-step]')
    # when the socket drops and stays down while the worker writes more steps
    page.evaluate("id => AgentOpsLive.drop(id, true)", run_id)
    page.wait_for_selector(f'#run-{run_id}[data-live="closed"]')
    seen_before = page_steps(page, run_id)
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while len(served_steps(page, served, run_id)) <= len(seen_before):
        assert time.monotonic() < deadline, served.log_tail()
        page.wait_for_timeout(200)
    assert page_steps(page, run_id) == seen_before  # nothing reached the page meanwhile
    # then the reconnect replays what was missed and streams the rest
    page.evaluate("AgentOpsLive.resume()")
    page.wait_for_selector(f'#run-{run_id}[data-live="done"]', timeout=RUN_TIMEOUT_MS)
    steps = page_steps(page, run_id)
    assert steps == served_steps(page, served, run_id)
    assert steps == list(range(1, len(steps) + 1))
    assert len(steps) > len(seen_before)
    live = page.evaluate("({c: AgentOpsLive.connects, s: AgentOpsLive.skipped})")
    assert live == {"c": 2, "s": 0}  # one reconnect, and the server sent no step twice
    assert polls == []
    assert served.demo_order in page.inner_text(f"#run-{run_id} .draft")


def test_the_chat_on_a_390_px_phone(browser: Any, served: ServedApp) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        run_id = ask(page, served, f"Where is my order {served.demo_order}?")
        page.wait_for_selector(f'#run-{run_id}[data-live="done"]', timeout=RUN_TIMEOUT_MS)
        answer = page.inner_text(f"#run-{run_id} .draft").strip()
        assert served.demo_order in answer
        # no horizontal scroll, and the answer appears once on the page
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert page.inner_text("body").count(answer) == 1
        assert page.is_visible(f"#run-{run_id} button[data-copy]")
        assert page.is_visible(f"#run-{run_id} .handover button")
        screenshot(page, f"chat-390px-{served.shape}")
    finally:
        context.close()


def host_page(page: Any, origin: str, served: ServedApp) -> None:
    page.goto(f"{origin}/helpdesk?app={served.url}")


def test_the_documented_snippet_embeds_a_working_chat(
    page: Any, slow_served: ServedApp, helpdesks: dict[str, str]
) -> None:
    served = slow_served
    login(page, served.url, "support", "support-demo")
    page.wait_for_selector("#chat-form")
    host_page(page, helpdesks["listed"], served)
    chat = page.frame_locator("#agentops-chat iframe")
    chat.locator("#chat-form textarea[name=query]").fill(f"Where is my order {served.demo_order}?")
    chat.locator("#chat-form button[type=submit]").click()
    chat.locator('article.run[data-live="done"]').wait_for(timeout=RUN_TIMEOUT_MS)
    assert served.demo_order in chat.locator("article.run .draft").inner_text()
    assert chat.locator(".topbar").count() == 0
    screenshot(page, f"chat-embed-{served.shape}")


def test_a_page_not_listed_cannot_frame_the_chat(
    page: Any, slow_served: ServedApp, helpdesks: dict[str, str]
) -> None:
    login(page, slow_served.url, "support", "support-demo")
    page.wait_for_selector("#chat-form")
    blocked: list[str] = []
    page.on("console", lambda message: blocked.append(message.text))
    host_page(page, helpdesks["stranger"], slow_served)
    page.wait_for_selector("#agentops-chat iframe", state="attached")
    frame = page.frame_locator("#agentops-chat iframe")
    # Chromium replaces a refused frame with its error page and says why on the console
    page.wait_for_function(
        "() => [...document.querySelectorAll('iframe')].length === 1", timeout=RUN_TIMEOUT_MS
    )
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while not any("frame-ancestors" in text for text in blocked):
        assert time.monotonic() < deadline, blocked
        page.wait_for_timeout(100)
    assert frame.locator("#chat-form").count() == 0


def test_when_sockets_are_refused_the_chat_falls_back_to_polling(
    page: Any, slow_served: ServedApp
) -> None:
    served = slow_served
    # given a network path that refuses every WebSocket
    page.route_web_socket("**/ws/runs/**", lambda ws: ws.close(code=4403, reason="refused"))
    polls = poll_requests(page)
    run_id = ask(page, served, f"Where is my order {served.demo_order}?")
    # then htmx polling takes the run to its end
    page.wait_for_selector(f"#run-{run_id} .badge.finished", timeout=RUN_TIMEOUT_MS)
    assert polls, "htmx never polled"
    assert page.evaluate("AgentOpsLive.connects") == 0
    assert served.demo_order in page.inner_text(f"#run-{run_id} .draft")
    assert page_steps(page, run_id) == served_steps(page, served, run_id)


def test_without_javascript_the_chat_refreshes_until_the_answer(
    browser: Any, slow_served: ServedApp
) -> None:
    served = slow_served
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        login(page, served.url, "support", "support-demo")
        page.wait_for_selector("#chat-form")
        page.click("details.history form button")
        page.wait_for_selector("#chat-form")
        page.fill("textarea[name=query]", f"Where is my order {served.demo_order}?")
        page.click("#chat-form button[type=submit]")
        page.wait_for_selector("article.run .badge.running")  # the run outlives the request
        page.wait_for_selector("article.run .badge.finished", timeout=RUN_TIMEOUT_MS)
        assert served.demo_order in page.inner_text("article.run .draft")
        # the answer's actions are plain forms
        page.click("article.run .handover button")
        page.wait_for_selector("article.run .badge.handed")
    finally:
        context.close()
