"""A replay that could not test a strategy is no evidence against it.

During an outage of get_order, the failures of orders nothing was cached for each proposed
``degrade_cache``; its replay had nothing to serve and "failed", twice, and the
negative-feedback stop then held the signature for review before the one failure the
handler could fix (a cached order) was even looked at.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.services import run_execute
from policies.models import ReflexionProposal
from policies.reflexion import reflexion_run
from sandbox.models import Order
from sandbox.services import faultrule_set
from traces.models import Trace
from traces.services import trace_create


@pytest.fixture
def shop(
    live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any, settings: Any
) -> str:
    settings.LLM_SIM_ERROR_RATES = {}
    return live_sandbox


def _run(agent: Any, query: str) -> Trace:
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="simulated")
    async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    return trace


@pytest.mark.django_db(transaction=True)
def test_an_outage_on_uncached_calls_does_not_stop_learning(shop: str, support_agent: Any) -> None:
    cached, other, third = Order.objects.order_by("order_id")[:3]
    assert _run(support_agent, f"Where is my order {cached.order_id}?").status == "finished"
    faultrule_set(endpoint="orders", rate_500=1.0)

    untested = []
    for order in (other, third):
        failed = _run(support_agent, f"Where is my order {order.order_id}?")
        untested += reflexion_run(trace_id=str(failed.pk))
    [record] = reflexion_run(
        trace_id=str(_run(support_agent, f"Where is my order {cached.order_id}?").pk)
    )

    assert untested and all(
        r.reason.startswith("replay inconclusive: nothing cached") for r in untested
    ), [r.reason for r in untested]
    assert record.outcome != ReflexionProposal.Outcome.STOPPED, record.reason
