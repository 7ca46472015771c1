"""Tool import: OpenAPI 3 documents and function lists become disabled Tool rows, re-import
updates them, bad documents import nothing, and the sandbox's own document yields tools a
run calls over real HTTP once an admin enables them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client

from agents.models import Tool
from agents.services import tool_set_enabled, tool_snapshots, tools_import
from agents.tools.tool_import import ToolImportError, tools_import_parse
from reviews.models import AuditLog
from sandbox.models import Order
from tests.agents.runtime_helpers import answer, reason, reflect, run_query, use_fake_llm
from traces.models import Trace

pytestmark = pytest.mark.django_db

API = "https://api.example.com/v1"


def _doc(**paths: Any) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Shop", "version": "1"},
        "servers": [{"url": API}],
        "paths": paths
        or {
            "/customers/{customer_id}/notes": {
                "parameters": [{"$ref": "#/components/parameters/CustomerId"}],
                "post": {
                    "operationId": "addNote",
                    "summary": "Add a note to a customer",
                    "parameters": [
                        {"name": "dry-run", "in": "query", "schema": {"type": "boolean"}}
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Note"}}
                        },
                    },
                },
                "get": {"summary": "List notes"},
            }
        },
        "components": {
            "parameters": {
                "CustomerId": {
                    "name": "customer_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                }
            },
            "schemas": {
                "Note": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "maxLength": 500}},
                    "required": ["text"],
                }
            },
        },
    }


@pytest.fixture
def allow_example(settings: Any) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [API]


def test_openapi_operations_merge_path_query_and_body_into_one_schema() -> None:
    specs = {spec.name: spec for spec in tools_import_parse(json.dumps(_doc()))}
    assert set(specs) == {"addNote", "get_customers_customer_id_notes"}
    note = specs["addNote"]
    assert note.method == "POST"
    assert note.endpoint_template == f"{API}/customers/{{customer_id}}/notes"
    assert note.param_locations == {"customer_id": "path", "dry_run": "query", "text": "body"}
    assert note.query_map == {"dry_run": "dry-run"}
    assert note.params_schema["required"] == ["customer_id", "text"]
    assert note.params_schema["properties"]["text"] == {"type": "string", "maxLength": 500}
    assert note.params_schema["additionalProperties"] is False


def test_a_bad_document_lists_every_problem() -> None:
    document = _doc(
        **{
            "/a/{x}": {"get": {"operationId": "a"}},
            "/b": {"post": {"operationId": "b", "requestBody": {"$ref": "#/nowhere"}}},
            "/c": {"get": {"operationId": "a"}},
        }
    )
    with pytest.raises(ToolImportError) as caught:
        tools_import_parse(json.dumps(document))
    text = "\n".join(caught.value.problems)
    assert "path placeholders ['x'] have no path parameter" in text
    assert "$ref #/nowhere points nowhere" in text
    assert "tool name 'a' appears twice" in text


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "neither valid JSON nor YAML"),
        ('{"swagger": "2.0"}', "Swagger 2"),
        ('{"openapi": "3.0.0", "paths": {"/x": {"get": {}}}}', "no absolute server URL"),
        ('[{"type": "function", "function": {"name": "x"}}]', "pass a base URL"),
    ],
)
def test_unusable_documents_are_refused_with_a_reason(raw: str, message: str) -> None:
    with pytest.raises(ToolImportError) as caught:
        tools_import_parse(raw)
    assert message in str(caught.value)


def test_function_list_uses_x_endpoint_or_posts_to_its_name() -> None:
    functions = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
                    "required": ["city"],
                },
            },
            "x-endpoint": {"method": "GET", "path": "/weather/{city}"},
        },
        {"name": "ping", "parameters": {"type": "object", "properties": {"n": {}}}},
    ]
    weather, ping = tools_import_parse(json.dumps(functions), base_url=API + "/")
    assert (weather.method, weather.endpoint_template) == ("GET", f"{API}/weather/{{city}}")
    assert weather.param_locations == {"city": "path", "units": "query"}
    assert (ping.method, ping.endpoint_template, ping.param_locations) == (
        "POST",
        f"{API}/ping",
        {"n": "body"},
    )


def test_secret_looking_values_in_descriptions_are_redacted() -> None:
    key = "sk-live-" + "0123456789abcdef" * 2
    doc = _doc(
        **{
            "/orders/{order_id}": {
                "get": {
                    "operationId": "getOrder",
                    "summary": "Read an order",
                    "description": f"Example: curl -H 'Authorization: Bearer {key}' ...",
                    "parameters": [
                        {
                            "name": "order_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                            "description": f"An order id; test with api_key={key}",
                        }
                    ],
                }
            }
        }
    )
    [spec] = tools_import_parse(json.dumps(doc))
    assert key not in json.dumps([spec.description, spec.params_schema])
    assert "[REDACTED]" in spec.description
    assert spec.description.startswith("Read an order. Example: curl")
    assert spec.params_schema["properties"]["order_id"]["description"].startswith("An order id")


def test_import_creates_disabled_rows_and_reimport_updates_without_enabling(
    allow_example: None, support_agent: Any
) -> None:
    result = tools_import(raw=json.dumps(_doc()), origin="shop.json")
    assert sorted(result.created) == ["addNote", "get_customers_customer_id_notes"]
    note = Tool.objects.get(name="addNote")
    assert (note.enabled, note.source, note.import_origin) == (False, "import", "shop.json")
    assert not note.allowed_agents.exists()
    assert "addNote" not in tool_snapshots(agent_id=support_agent.pk)
    assert AuditLog.objects.filter(action="tool.import.create", target="addNote").exists()

    # an admin enables one tool; the document then changes and is imported again
    tool_set_enabled(tool_id=note.pk, enabled=True, actor=None)
    changed = _doc()
    changed["paths"]["/customers/{customer_id}/notes"]["post"]["summary"] = "Append a note"
    again = tools_import(raw=json.dumps(changed), origin="shop.json")
    assert again.updated == ["addNote"] and again.unchanged == ["get_customers_customer_id_notes"]
    assert Tool.objects.filter(source="import").count() == 2
    note.refresh_from_db()
    assert note.description == "Append a note" and note.enabled is True
    other = Tool.objects.get(name="get_customers_customer_id_notes")
    assert other.enabled is False


def test_a_refused_import_writes_nothing(allow_example: None, support_agent: Any) -> None:
    document = _doc()
    # one operation collides with a code-declared tool, another leaves the allow-list
    document["paths"]["/customers/{customer_id}/notes"]["post"]["operationId"] = "get_order"
    document["paths"]["/elsewhere"] = {"get": {"operationId": "x"}}
    document["servers"] = [{"url": "https://evil.example.net"}]
    before = Tool.objects.count()
    with pytest.raises(ToolImportError) as caught:
        tools_import(raw=json.dumps(document))
    text = "\n".join(caught.value.problems)
    assert "get_order: a code-declared tool already has this name" in text
    assert "not on TOOL_ENDPOINT_ALLOWLIST" in text
    assert Tool.objects.count() == before
    assert not AuditLog.objects.filter(action__startswith="tool.import").exists()


def test_command_dry_run_writes_nothing_and_errors_exit_with_the_list(
    allow_example: None, tmp_path: Path, capsys: Any
) -> None:
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(_doc()))
    call_command("tools", "import", str(path), "--dry-run")
    assert "would import 2 tools (2 new, 0 updated)" in capsys.readouterr().out
    assert not Tool.objects.filter(source="import").exists()
    call_command("tools", "import", str(path))
    assert Tool.objects.filter(source="import", enabled=False).count() == 2
    path.write_text('{"openapi": "3.0.0", "servers": [], "paths": {}}')
    with pytest.raises(CommandError, match="nothing imported:\n  - no absolute server URL"):
        call_command("tools", "import", str(path))


def test_admin_page_previews_then_imports_on_confirm(
    client: Client, admin_role_user: Any, allow_example: None
) -> None:
    client.force_login(admin_role_user)
    upload = SimpleUploadedFile("shop.json", json.dumps(_doc()).encode(), "application/json")
    preview = client.post("/tools/import/", {"file": upload})
    assert preview.status_code == 200
    assert b"import-preview" in preview.content and b"addNote" in preview.content
    assert not Tool.objects.filter(source="import").exists()
    confirmed = client.post(
        "/tools/import/",
        {"document": preview.context["document"], "origin": "shop.json", "confirm": "1"},
    )
    assert confirmed.status_code == 302
    assert Tool.objects.filter(source="import", enabled=False).count() == 2
    audit = AuditLog.objects.get(action="tool.import.create", target="addNote")
    assert audit.actor == admin_role_user
    bad = client.post(
        "/tools/import/",
        {"file": SimpleUploadedFile("x.json", b'{"openapi": "3.0.0", "paths": {}}')},
    )
    assert bad.status_code == 400 and b"Nothing was imported" in bad.content


@pytest.mark.django_db(transaction=True)
def test_the_sandbox_openapi_document_yields_tools_a_run_calls_once_enabled(
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: None,
    settings: Any,
    openai_server: Any,
) -> None:
    # the sandbox publishes its document; import it as an operator would
    document = httpx.get(f"{live_sandbox}/openapi.json", timeout=10).content
    result = tools_import(raw=document, origin="sandbox openapi.json")
    assert {"getOrder", "searchProducts", "createReturn"} <= set(result.created)
    get_order = Tool.objects.get(name="getOrder")
    assert get_order.endpoint_template == "{sandbox}/orders/{order_id}"
    assert not get_order.enabled

    use_fake_llm(settings, openai_server)
    order = Order.objects.first()
    assert order is not None
    # still disabled: a call to it is refused
    openai_server.enqueue(
        reason("getOrder", {"order_id": order.order_id}),
        reason("getOrder", {"order_id": order.order_id}),
    )
    trace, _ = run_query(support_agent, f"Where is {order.order_id}?")
    assert not trace.steps.filter(phase="action", ok=True).exists()

    for name in ("getOrder", "searchProducts"):
        tool = Tool.objects.get(name=name)
        tool_set_enabled(tool_id=tool.pk, enabled=True, actor=None)
        tool.allowed_agents.add(support_agent)
    openai_server.enqueue(
        reason("getOrder", {"order_id": order.order_id}),
        reflect(),
        reason("searchProducts", {"q": "shoe", "limit": 2}),
        reflect(),
        answer(f"Order {order.order_id} is {order.status}."),
    )
    trace, _ = run_query(support_agent, f"Where is {order.order_id}?")
    assert trace.status == Trace.Status.FINISHED
    calls = list(trace.steps.filter(phase="action").order_by("step_number"))
    assert [(s.tool_name, s.ok, s.status_code) for s in calls] == [
        ("getOrder", True, 200),
        ("searchProducts", True, 200),
    ]
    assert calls[0].endpoint.endswith("/orders/%23" + order.order_id[1:])
    assert "q=shoe" in calls[1].endpoint or calls[1].request_payload == {"q": "shoe", "limit": 2}
