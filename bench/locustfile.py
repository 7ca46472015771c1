"""Locust users for ``bench/web_load.py``: the console as ops people and the API as a
client use it. Run by the locust CLI (gevent), never imported by the app or the tests.

Environment (set by ``bench/web_load.py``): ``WEB_LOAD_USER`` / ``WEB_LOAD_PASSWORD`` (a
console login), ``WEB_LOAD_TOKEN`` (an API token allowed to start runs) and
``WEB_LOAD_ORDER`` (an order number of the demo shop to ask about).
"""

from __future__ import annotations

import os
import re

from locust import HttpUser, between, task

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class ConsoleUser(HttpUser):
    """Looks at the overview and the trace explorer, and starts a run now and then."""

    wait_time = between(0.5, 1.5)  # a person reading, not a tight loop

    def on_start(self) -> None:
        form = self.client.get("/accounts/login/", name="login form").text
        match = CSRF.search(form)
        if match is None:
            raise RuntimeError("the login form carries no CSRF token")
        self.client.post(
            "/accounts/login/",
            data={
                "username": os.environ["WEB_LOAD_USER"],
                "password": os.environ["WEB_LOAD_PASSWORD"],
                "csrfmiddlewaretoken": match.group(1),
            },
            headers={"Referer": f"{self.host}/accounts/login/"},
            name="login",
        )

    @task(3)
    def overview(self) -> None:
        self.client.get("/dashboards/", name="overview /dashboards/")

    @task(3)
    def trace_list(self) -> None:
        self.client.get("/traces/", name="trace list /traces/")

    @task(1)
    def run_create(self) -> None:
        order = os.environ["WEB_LOAD_ORDER"]
        self.client.post(
            "/api/runs/",
            json={"query": f"Where is my order {order}?"},
            headers={"Authorization": f"Token {os.environ['WEB_LOAD_TOKEN']}"},
            name="run creation POST /api/runs/",
        )
