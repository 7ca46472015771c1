"""The admins' tools page: who may open it, enable/disable, edits with inline errors,
un-suspend, and a list whose query count does not grow with the tools."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Agent, Tool, ToolAlert
from reviews.models import AuditLog
from traces.models import Step
from traces.rollups import rollups_rebuild
from traces.services import trace_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client: Client, admin_role_user: Any) -> Client:
    client.force_login(admin_role_user)
    return client


@pytest.fixture
def get_order(support_agent: Any) -> Tool:
    return Tool.objects.get(name="get_order")


def _edit_payload(tool: Tool, **changes: Any) -> dict[str, Any]:
    payload = {
        "description": tool.description,
        "endpoint_template": tool.endpoint_template,
        "method": tool.method,
        "timeout_seconds": str(tool.timeout_seconds),
        "params_schema": json.dumps(tool.params_schema),
        "allowed_agents": [agent.pk for agent in tool.allowed_agents.all()],
    }
    payload.update(changes)
    return payload


@pytest.mark.parametrize(
    "path",
    [
        "/tools/",
        "/tools/{pk}/",
        "/tools/{pk}/disable/",
        "/tools/{pk}/enable/",
        "/tools/{pk}/unsuspend/",
    ],
)
@pytest.mark.parametrize(("role", "status"), [("support", 403), ("ops", 403), ("admin", 200)])
def test_only_admins_open_the_tools_pages(
    client: Client,
    support_user: Any,
    ops_user: Any,
    admin_role_user: Any,
    get_order: Tool,
    path: str,
    role: str,
    status: int,
) -> None:
    user = {"support": support_user, "ops": ops_user, "admin": admin_role_user}[role]
    client.force_login(user)

    response = client.get(path.format(pk=get_order.pk))

    assert response.status_code == status


@pytest.mark.parametrize("action", ["disable", "enable", "unsuspend"])
def test_ops_cannot_post_tool_actions(
    client: Client, ops_user: Any, get_order: Tool, action: str
) -> None:
    get_order.suspended_until = timezone.now() + timedelta(minutes=5)
    get_order.save()
    client.force_login(ops_user)

    response = client.post(f"/tools/{get_order.pk}/{action}/")

    assert response.status_code == 403
    get_order.refresh_from_db()
    assert get_order.enabled and get_order.suspended_until is not None
    assert not AuditLog.objects.filter(action__startswith="tool.").exists()


def test_anonymous_is_sent_to_login(client: Client, get_order: Tool) -> None:
    response = client.get("/tools/")

    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


@pytest.mark.parametrize(("role", "shown"), [("support", False), ("ops", False), ("admin", True)])
def test_nav_shows_tools_to_admins_only(
    client: Client,
    support_user: Any,
    ops_user: Any,
    admin_role_user: Any,
    support_agent: Any,
    role: str,
    shown: bool,
) -> None:
    client.force_login({"support": support_user, "ops": ops_user, "admin": admin_role_user}[role])

    page = client.get("/traces/").content.decode()

    assert ('href="/tools/"' in page) is shown
    assert "/admin/agents/tool/" not in page


def test_unknown_action_is_404(admin_client: Client, get_order: Tool) -> None:
    assert admin_client.post(f"/tools/{get_order.pk}/delete/").status_code == 404


def test_disable_asks_for_confirmation_then_disables_and_audits(
    admin_client: Client, admin_role_user: Any, get_order: Tool
) -> None:
    confirm = admin_client.get(f"/tools/{get_order.pk}/disable/")
    get_order.refresh_from_db()
    assert get_order.enabled
    assert "TOOL_NOT_ALLOWED" in confirm.content.decode()

    response = admin_client.post(f"/tools/{get_order.pk}/disable/")

    assert response.status_code == 302 and response["Location"] == "/tools/"
    get_order.refresh_from_db()
    assert not get_order.enabled
    audit = AuditLog.objects.get(action="tool.disable")
    assert audit.target == "get_order" and audit.actor == admin_role_user
    page = admin_client.get("/tools/").content.decode()
    assert "get_order disabled" in page
    assert f'href="/tools/{get_order.pk}/enable/"' in page


def test_enable_turns_a_disabled_tool_back_on(admin_client: Client, get_order: Tool) -> None:
    Tool.objects.filter(pk=get_order.pk).update(enabled=False)

    admin_client.post(f"/tools/{get_order.pk}/enable/", {"next": "edit"})

    get_order.refresh_from_db()
    assert get_order.enabled
    assert AuditLog.objects.filter(action="tool.enable", target="get_order").count() == 1


def test_post_without_csrf_token_is_refused(admin_role_user: Any, get_order: Tool) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_role_user)

    response = client.post(f"/tools/{get_order.pk}/disable/")

    assert response.status_code == 403
    get_order.refresh_from_db()
    assert get_order.enabled


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("params_schema", '{"type": "object", "properties": {', "Not valid JSON"),
        ("params_schema", '{"type": "object", "required": "order_id"}', "Not a valid JSON Schema"),
        ("params_schema", '{"type": "objekt"}', "Not a valid JSON Schema"),
        ("params_schema", '{"type": "string"}', '"type": "object"'),
        ("params_schema", "[1, 2]", "must be a JSON object"),
        ("endpoint_template", "https://{host}/orders/{order_id}", "placeholder"),
        ("endpoint_template", "https://evil.example/orders/{order_id}", "allow"),
        ("timeout_seconds", "0", "Between 0 and 60"),
        ("timeout_seconds", "61", "Between 0 and 60"),
        ("method", "TRACE", "Select a valid choice"),
    ],
)
def test_bad_edit_shows_the_error_inline_keeps_the_input_and_saves_nothing(
    admin_client: Client, get_order: Tool, field: str, value: str, message: str
) -> None:
    before = Tool.objects.filter(pk=get_order.pk).values().get()
    payload = _edit_payload(get_order, description="A new description", **{field: value})

    response = admin_client.post(f"/tools/{get_order.pk}/", payload)

    assert response.status_code == 400
    form = response.context["form"]
    assert message.lower() in " ".join(form.errors[field]).lower()
    page = response.content.decode()
    assert 'id="field-' + field + '"' in page and "has-error" in page
    # Nothing the admin typed is lost: the other edit and the bad value are both shown.
    assert "A new description" in page
    assert form[field].value() == value
    assert Tool.objects.filter(pk=get_order.pk).values().get() == before
    assert not AuditLog.objects.filter(action="tool.update").exists()


def test_a_bad_schema_and_a_bad_endpoint_are_reported_together(
    admin_client: Client, get_order: Tool
) -> None:
    payload = _edit_payload(
        get_order, params_schema="{not json", endpoint_template="http://{host}:8000/orders"
    )

    response = admin_client.post(f"/tools/{get_order.pk}/", payload)

    errors = response.context["form"].errors
    assert set(errors) == {"params_schema", "endpoint_template"}
    assert "line 1, column 2" in errors["params_schema"][0]


def test_valid_edit_is_saved_and_audited(
    admin_client: Client, get_order: Tool, support_agent: Agent
) -> None:
    other = Agent.objects.create(slug="returns-bot", name="Returns bot")
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string", "pattern": "^#W\\d{7}$"}},
        "required": ["order_id"],
    }
    payload = _edit_payload(
        get_order,
        description="Look up one order by its id.",
        timeout_seconds="4.5",
        params_schema=json.dumps(schema, indent=4),
        allowed_agents=[other.pk],
    )

    response = admin_client.post(f"/tools/{get_order.pk}/", payload)

    assert response.status_code == 302
    get_order.refresh_from_db()
    assert get_order.description == "Look up one order by its id."
    assert get_order.timeout_seconds == 4.5
    assert get_order.params_schema == schema
    assert list(get_order.allowed_agents.values_list("slug", flat=True)) == ["returns-bot"]
    audit = AuditLog.objects.get(action="tool.update")
    assert audit.details == {
        "fields": ["description", "timeout_seconds", "params_schema"],
        "agents_added": ["returns-bot"],
        "agents_removed": ["support"],
    }


def test_edit_form_shows_the_schema_as_json_and_the_alerts(
    admin_client: Client, get_order: Tool
) -> None:
    ToolAlert.objects.create(
        tool=get_order, kind=ToolAlert.Kind.SUSPENDED, message="get_order suspended for 5 min"
    )

    page = admin_client.get(f"/tools/{get_order.pk}/").content.decode()

    assert "&quot;order_id&quot;" in page
    assert "get_order suspended for 5 min" in page


def test_unsuspend_clears_the_suspension_and_writes_an_alert(
    admin_client: Client, admin_role_user: Any, get_order: Tool
) -> None:
    get_order.suspended_until = timezone.now() + timedelta(minutes=10)
    get_order.save()
    ToolAlert.objects.create(tool=get_order, kind=ToolAlert.Kind.SUSPENDED, message="timeouts")
    listed = admin_client.get("/tools/").content.decode()
    assert "suspended until" in listed and "1 open alert" in listed

    admin_client.post(f"/tools/{get_order.pk}/unsuspend/")

    get_order.refresh_from_db()
    assert get_order.suspended_until is None
    lifted = get_order.alerts.get(kind=ToolAlert.Kind.UNSUSPENDED)
    assert lifted.acknowledged_by == admin_role_user
    assert not get_order.alerts.filter(acknowledged_by__isnull=True).exists()
    assert AuditLog.objects.filter(action="tool.unsuspend", target="get_order").exists()
    assert "suspended until" not in admin_client.get("/tools/").content.decode()


def test_list_shows_every_tool_with_its_error_rate(
    admin_client: Client, get_order: Tool, support_agent: Agent
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    now = timezone.now()
    for number, error_type in enumerate(["", "", "TIMEOUT", "RESOURCE_NOT_FOUND"], start=1):
        Step.objects.create(
            trace=trace,
            step_number=number,
            phase="action",
            action_type="tool",
            tool_name="get_order",
            ok=not error_type,
            error_type=error_type,
            started_at=now,
        )
    rollups_rebuild(since=now)

    response = admin_client.get("/tools/")

    page = response.content.decode()
    for tool in Tool.objects.all():
        assert f'id="tool-{tool.name}"' in page
    row = page.split('id="tool-get_order"')[1].split("</tr>")[0]
    assert "50%" in row and "of 4 calls" in row and "TIMEOUT × 1" in row


def test_empty_list_says_how_to_add_tools(admin_client: Client) -> None:
    page = admin_client.get("/tools/").content.decode()

    assert "manage.py tools_sync" in page


def _grow(count: int, agent: Agent, *, start: int) -> None:
    trace = trace_create(agent_id=agent.pk, query="q", llm_backend="simulated")
    for index in range(start, start + count):
        tool = Tool.objects.create(
            name=f"extra_{index}",
            description="extra",
            params_schema={"type": "object"},
            endpoint_template="{sandbox}/orders/{order_id}",
            suspended_until=timezone.now() + timedelta(minutes=5),
        )
        tool.allowed_agents.add(agent)
        ToolAlert.objects.create(tool=tool, kind=ToolAlert.Kind.SUSPENDED, message="t")
        Step.objects.create(
            trace=trace,
            step_number=index,
            phase="action",
            action_type="tool",
            tool_name=tool.name,
            ok=False,
            error_type="TIMEOUT",
            started_at=timezone.now(),
        )
    rollups_rebuild(since=timezone.now())


def test_list_query_count_does_not_grow_with_tools(
    admin_client: Client, support_agent: Agent
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _grow(2, support_agent, start=1)
    admin_client.get("/tools/")  # the session and permission caches warm up once
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get("/tools/").status_code == 200
    _grow(15, support_agent, start=100)

    with CaptureQueriesContext(connection) as many:
        page = admin_client.get("/tools/").content.decode()

    assert page.count('class="badge fallback" title="after repeated timeouts"') == 17
    assert len(many) == len(few)


def test_the_django_admin_action_lifts_a_suspension_through_the_same_service(
    admin_client: Client, get_order: Tool
) -> None:
    get_order.suspended_until = timezone.now() + timedelta(minutes=10)
    get_order.save()

    admin_client.post(
        "/admin/agents/tool/", {"action": "lift_suspension", "_selected_action": [get_order.pk]}
    )

    get_order.refresh_from_db()
    assert get_order.suspended_until is None
    assert get_order.alerts.filter(kind=ToolAlert.Kind.UNSUSPENDED).exists()
    assert AuditLog.objects.filter(action="tool.unsuspend", target="get_order").exists()


@pytest.mark.parametrize(("window", "shown"), [("1h", "no calls"), ("24h", "of 1 call")])
def test_the_error_window_is_a_url_filter(
    admin_client: Client, support_agent: Agent, window: str, shown: str
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    step = Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        action_type="tool",
        tool_name="get_order",
        started_at=timezone.now(),
    )
    Step.objects.filter(pk=step.pk).update(created_at=timezone.now() - timedelta(hours=2))
    rollups_rebuild(since=timezone.now() - timedelta(hours=3))

    page = admin_client.get(f"/tools/?window={window}").content.decode()

    row = page.split('id="tool-get_order"')[1].split("</tr>")[0]
    assert shown in row
    assert f'value="{window}" selected' in page


@pytest.mark.parametrize("path", ["/tools/", "/tools/import/"])
def test_the_tool_pages_403_says_who_they_are_for(
    client: Client, ops_user: Any, support_user: Any, path: str
) -> None:
    for user in (ops_user, support_user):
        client.force_login(user)
        response = client.get(path)
        assert response.status_code == 403
        assert "Only admins manage the tool whitelist." in response.content.decode()
