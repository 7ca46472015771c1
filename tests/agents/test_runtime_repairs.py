"""A policy adapter made of argument moves changes what goes on the wire: a renamed query
parameter keeps its location, an added one goes where the step says, and its value comes
from the run (the customer id). A real HTTP API on loopback records what arrived."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.models import Tool
from agents.services import run_execute
from policies.selectors import runtime_policy_cache_clear
from tests.agents.runtime_helpers import answer, reason, reflect, use_fake_llm
from tests.agents.test_runtime_policy import publish
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    runtime_policy_cache_clear()
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    yield agent
    runtime_policy_cache_clear()


def renamed_api(request: ApiRequest) -> tuple[int, Any]:
    """The partner renamed ``term`` to ``q`` and now wants the customer in the query."""
    if "q" not in request.query:
        return 422, {"detail": [{"loc": ["query", "q"], "msg": "Field required"}]}
    return 200, {"results": [{"sku": "CAP-0001", "name": request.query["q"][0]}]}


def partner_search(agent: Any) -> Tool:
    tool = Tool.objects.create(
        name="partner_search",
        description="Search the partner catalogue by a free-text term.",
        params_schema={
            "type": "object",
            "properties": {"term": {"type": "string"}},
            "required": ["term"],
        },
        endpoint_template="{sandbox}/search",
        method="GET",
        param_locations={"term": "query"},
        source=Tool.Source.IMPORT,
    )
    tool.allowed_agents.add(agent)
    return tool


def test_argument_moves_reach_the_wire(agent: Any, openai_server: Any, settings: Any) -> None:
    adapter = publish(
        "adapter",
        {
            "tool": "partner_search",
            "steps": [
                {"op": "rename", "from": "term", "to": "q"},
                {"op": "add", "name": "customer_id", "from": "customer", "in": "query"},
            ],
        },
    )
    with RecordingAPI(respond=renamed_api) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_search(agent)
        openai_server.enqueue(
            reason("partner_search", {"term": "cap"}), reflect(True), answer("We have CAP-0001.")
        )
        trace = trace_create(
            agent_id=agent.pk, query="Do you sell a cap?", llm_backend="openai", customer_id="C-77"
        )
        async_to_sync(run_execute)(trace_id=str(trace.pk))
    # The tool's own location (query) followed the renamed argument; the added one went
    # where its step said. An imported tool sends nowhere an argument it does not list, so
    # without the locations neither would have arrived.
    assert [request.query for request in api.requests] == [{"q": ["cap"], "customer_id": ["C-77"]}]
    action = trace.steps.get(phase="action")
    assert action.ok and action.status_code == 200
    assert action.action_input == {"q": "cap", "customer_id": "C-77"}
    fired = action.adapters_fired[-1]
    assert fired["strategy"] == adapter.pk
    assert fired["locations"] == {"q": "query", "customer_id": "query"}


def test_an_argument_added_from_the_customers_question_reaches_the_wire(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    publish(
        "adapter",
        {
            "tool": "partner_search",
            "steps": [
                {
                    "op": "add",
                    "name": "order",
                    "from": "query",
                    "pattern": r"#W(\d{7})",
                    "group": 1,
                    "in": "query",
                }
            ],
        },
    )
    with RecordingAPI(respond=lambda request: (200, {"results": []})) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_search(agent)
        openai_server.enqueue(
            reason("partner_search", {"term": "cap"}), reflect(True), answer("No caps, sorry.")
        )
        trace = trace_create(
            agent_id=agent.pk,
            query="Can I add a cap to order #W1234567?",
            llm_backend="openai",
        )
        async_to_sync(run_execute)(trace_id=str(trace.pk))
    # the run's own question is what the step reads the value from
    assert [request.query for request in api.requests] == [{"term": ["cap"], "order": ["1234567"]}]
    assert trace.steps.get(phase="action").action_input == {"term": "cap", "order": "1234567"}
