"""Tool credentials by environment-variable name: sent at call time, never stored or shown."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from agents.models import Tool
from agents.tools.credentials import ToolAuth, tool_auth_parse
from agents.tools.executor import ExecutorCode, ToolExecutor, ToolSnapshot, ValidatedCall
from traces.redaction import REDACTED

API = "http://93.184.216.34/api"
SECRET = "shop-key-7f3a9c1e5b"


@pytest.fixture(autouse=True)
def allow_api(settings: Any) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [API]


def snapshot(auth: ToolAuth | None, **overrides: Any) -> ToolSnapshot:
    values: dict[str, Any] = {
        "name": "stock",
        "description": "stock",
        "kind": "http",
        "params_schema": {"type": "object"},
        "endpoint_template": API + "/stock/{sku}",
        "method": "GET",
        "timeout_seconds": 3.0,
        "auth": auth,
    }
    values.update(overrides)
    return ToolSnapshot(**values)


def execute(
    tool: ToolSnapshot, arguments: dict[str, Any], respond: Any = None
) -> tuple[Any, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if respond is not None:
            response: httpx.Response = respond(request)
            return response
        return httpx.Response(200, json={"sku": "A1", "in_stock": 4})

    async def go() -> Any:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            executor = ToolExecutor(
                tools={tool.name: tool},
                http_client=client,
                max_response_bytes=64 * 1024,
                max_redirects=3,
            )
            return await executor.execute(
                ValidatedCall(tool=tool, arguments=arguments, adapters_fired=[])
            )

    return async_to_sync(go)(), seen


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        (
            ToolAuth(type="bearer", env="SHOP_API_KEY", name="Authorization"),
            "authorization",
            f"Bearer {SECRET}",
        ),
        (ToolAuth(type="header", env="SHOP_API_KEY", name="X-Api-Key"), "x-api-key", SECRET),
    ],
)
def test_header_credentials_are_sent_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, auth: ToolAuth, header: str, expected: str
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    result, seen = execute(snapshot(auth), {"sku": "A1"})
    assert result.code == ExecutorCode.OK
    assert seen[0].headers[header] == expected
    assert SECRET not in json.dumps(result.request_payload) + result.endpoint + result.detail


def test_query_credential_is_sent_and_wins_over_a_model_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    auth = ToolAuth(type="query", env="SHOP_API_KEY", name="api_key")
    result, seen = execute(snapshot(auth), {"sku": "A1", "api_key": "chosen-by-the-model"})
    assert result.code == ExecutorCode.OK
    assert seen[0].url.params.get_list("api_key") == [SECRET]
    assert SECRET not in result.endpoint
    assert result.request_payload == {"sku": "A1", "api_key": REDACTED}


def test_query_credential_goes_in_the_query_of_a_post(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    auth = ToolAuth(type="query", env="SHOP_API_KEY", name="key")
    result, seen = execute(snapshot(auth, method="POST"), {"sku": "A1", "qty": 2})
    assert result.code == ExecutorCode.OK
    assert seen[0].url.params["key"] == SECRET
    assert json.loads(seen[0].content) == {"qty": 2}


def test_an_echoed_credential_is_redacted_from_the_observation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    auth = ToolAuth(type="header", env="SHOP_API_KEY", name="X-Api-Key")

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": f"key {request.headers['x-api-key']} revoked"})

    result, _ = execute(snapshot(auth), {"sku": "A1"}, respond=echo)
    assert result.code == ExecutorCode.HTTP_ERROR
    assert result.status_code == 401
    assert SECRET not in result.body
    assert f"key {REDACTED} revoked" in result.body


ENCODABLE_SECRET = "Zm9vYmFy+c2VjcmV0/a2V5=="  # base64, as many vendors issue keys


def test_a_query_credential_echoed_encoded_is_redacted_from_the_observation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An API that echoes the request URL (the key percent-encoded) or writes the key
    JSON-escaped (``\\/``): neither form reaches the model or the Step."""
    monkeypatch.setenv("SHOP_API_KEY", ENCODABLE_SECRET)
    auth = ToolAuth(type="query", env="SHOP_API_KEY", name="key")

    def echo(request: httpx.Request) -> httpx.Response:
        escaped = ENCODABLE_SECRET.replace("/", "\\/")
        text = f'{{"error": "no route", "url": "{request.url}", "key": "{escaped}"}}'
        return httpx.Response(404, text=text, headers={"content-type": "application/json"})

    result, seen = execute(snapshot(auth), {"sku": "A1"}, respond=echo)
    assert "%2B" in str(seen[0].url)  # sent percent-encoded
    assert result.code == ExecutorCode.HTTP_ERROR
    for form in ("Zm9vYmFy", "c2VjcmV0", "a2V5"):
        assert form not in result.body, result.body
    assert result.body.count(REDACTED) == 2


def test_a_cross_origin_redirect_does_not_carry_the_credential_header(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    settings.TOOL_ENDPOINT_ALLOWLIST = [API, "http://93.184.216.35/mirror"]
    auth = ToolAuth(type="header", env="SHOP_API_KEY", name="X-Api-Key")

    def redirect(request: httpx.Request) -> httpx.Response:
        if request.url.host == "93.184.216.34":
            return httpx.Response(302, headers={"Location": "http://93.184.216.35/mirror/A1"})
        return httpx.Response(200, json={"sku": "A1"})

    result, seen = execute(snapshot(auth), {"sku": "A1"}, respond=redirect)
    assert result.code == ExecutorCode.OK
    assert [request.headers.get("x-api-key") for request in seen] == [SECRET, None]


@pytest.mark.parametrize("env", ["SHOP_KEY_NEVER_SET", "SHOP_KEY_EMPTY", "SHOP_KEY_BLANK"])
def test_a_missing_environment_variable_is_a_classified_error_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.delenv("SHOP_KEY_NEVER_SET", raising=False)
    monkeypatch.setenv("SHOP_KEY_EMPTY", "")
    monkeypatch.setenv("SHOP_KEY_BLANK", "   ")
    auth = ToolAuth(type="bearer", env=env, name="Authorization")
    result, seen = execute(snapshot(auth), {"sku": "A1"})
    assert result.code == ExecutorCode.CREDENTIAL_MISSING
    assert f"{env} is not set" in result.detail
    assert seen == []


def test_an_invalid_stored_auth_fails_the_call_not_the_run() -> None:
    result, seen = execute(snapshot(None, auth_error="type must be one of ..."), {"sku": "A1"})
    assert result.code == ExecutorCode.CREDENTIAL_MISSING
    assert seen == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, None),
        (None, None),
        (
            {"type": "bearer", "env": "SHOP_API_KEY"},
            ToolAuth(type="bearer", env="SHOP_API_KEY", name="Authorization"),
        ),
        (
            {"type": "header", "name": "X-Api-Key", "env": "SHOP_API_KEY"},
            ToolAuth(type="header", env="SHOP_API_KEY", name="X-Api-Key"),
        ),
        (
            {"type": "query", "name": "api_key", "env": "SHOP_API_KEY"},
            ToolAuth(type="query", env="SHOP_API_KEY", name="api_key"),
        ),
    ],
)
def test_valid_auth_settings_parse(raw: Any, expected: ToolAuth | None) -> None:
    assert tool_auth_parse(raw) == expected


def tool_row(**overrides: Any) -> Tool:
    values: dict[str, Any] = {
        "name": "stock",
        "description": "d",
        "params_schema": {"type": "object"},
        "endpoint_template": API + "/stock/{sku}",
        "auth": {"type": "header", "name": "X-Api-Key", "env": "SHOP_API_KEY"},
    }
    values.update(overrides)
    return Tool(**values)


def test_tool_clean_accepts_an_env_reference() -> None:
    tool_row().clean()


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"type": "bearer", "env": "SHOP_API_KEY", "value": SECRET}, "never in this row"),
        ({"type": "bearer", "token": SECRET}, "never in this row"),
        ({"type": "bearer", "env": SECRET}, "env must name an environment variable"),
        ({"type": "bearer", "env": "shop_api_key"}, "env must name an environment variable"),
        ({"type": "basic", "env": "SHOP_API_KEY"}, "type must be one of"),
        ({"type": "header", "env": "SHOP_API_KEY"}, "HTTP header name"),
        ({"type": "header", "name": "X Api Key", "env": "SHOP_API_KEY"}, "HTTP header name"),
        ({"type": "query", "name": "a&b", "env": "SHOP_API_KEY"}, "query parameter name"),
        ({"type": "bearer", "name": "X-Api-Key", "env": "SHOP_API_KEY"}, 'use "header"'),
        ("SHOP_API_KEY", "Must be an object"),
        # The installation's own secrets may not be sent to a tool's endpoint.
        ({"type": "query", "name": "k", "env": "DJANGO_SECRET_KEY"}, "reserved"),
        ({"type": "bearer", "env": "LLM_API_KEY"}, "reserved"),
        ({"type": "header", "name": "X-Db", "env": "DATABASE_URL"}, "reserved"),
        ({"type": "header", "name": "X-Broker", "env": "CELERY_BROKER_URL"}, "reserved"),
        ({"type": "header", "name": "X-Redis", "env": "REDIS_URL"}, "reserved"),
        ({"type": "header", "name": "X-Pg", "env": "PGPASSWORD"}, "reserved"),
    ],
)
def test_tool_clean_refuses_malformed_auth_and_stored_secrets(auth: Any, message: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        tool_row(auth=auth).clean()
    assert message in excinfo.value.message_dict["auth"][0]


def test_tool_clean_refuses_auth_on_a_python_tool() -> None:
    with pytest.raises(ValidationError) as excinfo:
        tool_row(kind=Tool.Kind.PYTHON, endpoint_template="").clean()
    assert "Only HTTP tools" in excinfo.value.message_dict["auth"][0]


@pytest.mark.django_db
def test_admin_shows_the_variable_name_only(
    admin_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_API_KEY", SECRET)
    tool = tool_row()
    tool.save()

    listing = admin_client.get("/admin/agents/tool/").content.decode()
    change = admin_client.get(f"/admin/agents/tool/{tool.pk}/change/").content.decode()

    assert "header X-Api-Key from $SHOP_API_KEY" in listing
    assert "SHOP_API_KEY" in change
    assert SECRET not in listing + change


def test_a_stored_auth_naming_a_reserved_variable_fails_the_call_without_sending_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents.services import _snapshot_auth

    # A row saved around Tool.clean() (a queryset update, a shell) is refused at call time.
    monkeypatch.setenv("DJANGO_SECRET_KEY", SECRET)
    row = tool_row(auth={"type": "query", "name": "k", "env": "DJANGO_SECRET_KEY"})

    result, seen = execute(snapshot(**{"auth": None, **_snapshot_auth(row)}), {"sku": "A1"})

    assert result.code == ExecutorCode.CREDENTIAL_MISSING
    assert "reserved" in result.detail
    assert seen == []
