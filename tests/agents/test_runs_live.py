"""Whole runs of the simulated model against the sandbox over HTTP, faults included."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from babel.dates import format_date

from agents.services import run_execute
from sandbox.models import Order, Product, Sku
from sandbox.services import faultrule_set
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)

STATUS_TO_ERROR = {
    404: "RESOURCE_NOT_FOUND",
    500: "INTERNAL_SERVER_ERROR",
    401: "UNAUTHORIZED",
    429: "RATE_LIMITED",
    504: "TIMEOUT",
}


@pytest.fixture
def careful_model(settings: Any) -> None:
    settings.LLM_BACKEND = "simulated"
    settings.LLM_SIM_ERROR_RATES = {}


def test_order_question_gets_an_answer_grounded_in_sandbox_data(
    live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any, careful_model: Any
) -> None:
    order = Order.objects.filter(status="shipped").first() or Order.objects.first()
    assert order is not None
    trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Where is my order {order.order_id}?",
        llm_backend="simulated",
    )
    async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    assert trace.status == Trace.Status.FINISHED, trace.final_answer
    assert order.order_id in trace.final_answer
    assert order.status in trace.final_answer
    action = trace.steps.get(phase="action", ok=True)
    assert action.tool_name == "get_order"
    assert action.status_code == 200
    assert action.llm_backend == "" and trace.steps.filter(llm_backend="simulated").exists()


def test_fifty_runs_under_thirty_percent_faults_all_end_terminal_and_classified(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    careful_model: Any,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given 30% faults on the orders endpoint; an injected timeout holds its request far
    # longer than the tool waits, so every injected timeout ends as the tool's TIMEOUT
    faultrule_set(
        endpoint="orders",
        rate_404=0.06,
        rate_500=0.08,
        rate_401=0.04,
        rate_429=0.08,
        rate_timeout=0.04,
        timeout_seconds=10.0,
        seed=1234,
    )
    support_agent.tools.filter(name="get_order").update(timeout_seconds=5.0)
    # the suspension breaker (tested on its own) must not hide the faults under test
    settings.AGENT_TOOL_TIMEOUTS_PER_HOUR_TO_SUSPEND = 1000
    caplog.set_level(logging.INFO, logger="sandbox.faults")
    order_ids = list(Order.objects.order_by("order_id").values_list("order_id", flat=True)[:50])
    traces = [
        trace_create(
            agent_id=support_agent.pk, query=f"Where is my order {oid}?", llm_backend="simulated"
        )
        for oid in order_ids
    ]

    # when the 50 runs execute concurrently on one event loop
    async def run_all() -> None:
        await asyncio.gather(*(run_execute(trace_id=str(t.pk)) for t in traces))

    async_to_sync(run_all)()

    # then every run is terminal and every failed tool step carries the right error type
    statuses = set(
        Trace.objects.filter(pk__in=[t.pk for t in traces]).values_list("status", flat=True)
    )
    assert statuses <= {"finished", "fallback", "failed"}
    failed = Step.objects.filter(
        trace__in=traces, phase="action", ok=False, status_code__isnull=False
    )
    assert failed.exists()
    for step in failed:
        assert step.error_type == STATUS_TO_ERROR[step.status_code], step.response_summary
    for step in Step.objects.filter(
        trace__in=traces, phase="action", ok=False, status_code__isnull=True
    ):
        assert step.error_type in {"TIMEOUT", "HALLUCINATED_ANSWER"}
    assert not Step.objects.filter(trace__in=traces, ok=False, error_type="").exists()
    # and the timeouts are exactly the injected ones: no call timed out on its own
    injected = [
        r for r in caplog.records if r.getMessage() == "sandbox fault fired" and r.kind == "timeout"
    ]
    timeouts = Step.objects.filter(
        trace__in=traces, phase="action", action_type="tool", error_type="TIMEOUT"
    )
    assert timeouts.count() == len(injected) > 0


ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2})?")


def test_answers_name_products_and_write_prices_and_dates_for_the_customer(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
    careful_model: Any,
    ops_user: Any,
    client: Any,
) -> None:
    # given a price question by product name and an order that was delivered
    product = Product.objects.order_by("product_id").first()
    order = Order.objects.filter(delivered_at__isnull=False).order_by("order_id").first()
    assert product is not None and order is not None and order.delivered_at is not None
    price_trace = trace_create(
        agent_id=support_agent.pk,
        query=f"How much does the {product.name} cost?",
        llm_backend="simulated",
    )
    order_trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Where is my order {order.order_id}?",
        llm_backend="simulated",
    )
    # when both run against the sandbox over HTTP
    async_to_sync(run_execute)(trace_id=str(price_trace.pk))
    async_to_sync(run_execute)(trace_id=str(order_trace.pk))
    price_trace.refresh_from_db()
    order_trace.refresh_from_db()
    # then the price answer names the product and gives its price in dollars
    assert price_trace.status == Trace.Status.FINISHED, price_trace.final_answer
    sku = Sku.objects.filter(product=product, sku__in=_words(price_trace.final_answer)).first()
    assert sku is not None, price_trace.final_answer
    assert f"{product.name} ({sku.sku})" in price_trace.final_answer
    assert f"${sku.price:,}" in price_trace.final_answer
    # and the order answer gives the delivery date in words, with no raw ISO value
    assert order_trace.status == Trace.Status.FINISHED, order_trace.final_answer
    delivered = format_date(order.delivered_at.astimezone(UTC).date(), "long", locale="en_US")
    assert delivered in order_trace.final_answer
    for trace in (price_trace, order_trace):
        assert not ISO_TIMESTAMP.search(trace.final_answer), trace.final_answer
    # and each rewritten fact links to the step whose observation holds it
    final = order_trace.steps.get(phase="final")
    [fact] = [f for f in final.details["facts"] if f["field"] == "shipping.delivered_at"]
    source = order_trace.steps.get(step_number=fact["step"])
    assert source.phase == "action" and source.tool_name == "get_order" and source.ok
    assert fact["value"] in source.response_summary
    client.force_login(ops_user)
    page = client.get(f"/traces/{order_trace.pk}/").content.decode()
    assert f'href="#step-{fact["step"]}"' in page
    assert f'id="step-{fact["step"]}"' in page


def _words(text: str) -> list[str]:
    return re.findall(r"[\w-]+", text)
