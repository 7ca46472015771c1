"""Ops open the overview and the failures page on the app served by bin/serve, and a bar
of the failures chart drills down to exactly the traces it counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

# The biggest segment of the stacked chart, in page coordinates, read from Chart.js itself.
BIGGEST_BAR = """() => {
  const canvas = document.getElementById('failures-over-time');
  canvas.scrollIntoView();
  const chart = Chart.getChart(canvas);
  let best = null;
  chart.data.datasets.forEach((dataset, d) => dataset.data.forEach((value, i) => {
    if (value > 0 && (!best || value > best.value)) best = {d, i, value};
  }));
  const bar = chart.getDatasetMeta(best.d).data[best.i];
  const box = canvas.getBoundingClientRect();
  return {x: box.left + bar.x, y: box.top + (bar.y + bar.base) / 2,
          errorType: chart.data.datasets[best.d].label, steps: best.value};
}"""


def _traces_with_a_matching_step(
    served: ServedApp, *, error_type: str, since: str, until: str
) -> set[str]:
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{served.database_name}") as db:
        rows = db.execute(
            """SELECT DISTINCT s.trace_id FROM traces_step s JOIN traces_trace t
               ON t.id = s.trace_id
               WHERE s.error_type = %s AND s.created_at >= %s AND s.created_at < %s
               AND t.origin = 'customer'""",
            [error_type, datetime.fromisoformat(since), datetime.fromisoformat(until)],
        ).fetchall()
    return {str(row[0]) for row in rows}


def test_a_failures_bar_drills_down_to_the_matching_traces(
    page: Any, production_server: ServedApp
) -> None:
    served = production_server
    served.manage("bench_dashboard", "--steps", "3000", "--days", "2", "--no-measure")
    login(page, served.url, "ops", "ops-demo")

    page.goto(f"{served.url}/dashboards/?window=7d")
    page.wait_for_selector("canvas[data-chart=runs][data-ready='1']")
    assert page.locator("[data-kpi=success_rate] .kpi-value").inner_text().endswith("%")
    screenshot(page, "dashboard_overview")

    page.goto(f"{served.url}/dashboards/failures/?window=24h")
    for canvas in ("failures-over-time", "breakdown-tool", "breakdown-endpoint"):
        page.wait_for_selector(f"#{canvas}[data-ready='1']")
    page.wait_for_selector("#breakdown-policy_version[data-ready='1']")
    screenshot(page, "dashboard_failures")

    bar = page.evaluate(BIGGEST_BAR)
    page.mouse.click(bar["x"], bar["y"])
    page.wait_for_url("**/traces/?*")
    params = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
    assert params["step_error"] == bar["errorType"]

    listed = {
        href.rstrip("/").rsplit("/", 1)[-1]
        for href in page.locator("table tbody td:first-child a").evaluate_all(
            "links => links.map(a => a.getAttribute('href'))"
        )
    }
    expected = _traces_with_a_matching_step(
        served, error_type=bar["errorType"], since=params["since"], until=params["until"]
    )
    assert listed == expected
    assert 1 <= len(listed) <= bar["steps"]
    screenshot(page, "dashboard_drilldown_traces")


@pytest.mark.parametrize("path", ["/dashboards/?window=7d", "/dashboards/failures/?window=7d"])
def test_the_dashboards_fit_a_390_px_phone(
    browser: Any, production_server: ServedApp, path: str
) -> None:
    served = production_server
    context = browser.new_context(viewport={"width": 390, "height": 844})
    phone = context.new_page()
    login(phone, served.url, "ops", "ops-demo")
    phone.goto(served.url + path)
    phone.wait_for_function(
        "() => [...document.querySelectorAll('canvas[data-chart]')].every(c => c.dataset.ready)"
    )
    width = phone.evaluate("() => document.scrollingElement.scrollWidth")
    screenshot(phone, "dashboard_" + ("failures" if "failures" in path else "overview") + "-390")
    context.close()
    assert width <= 390
