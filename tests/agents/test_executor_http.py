"""The executor against the sandbox over real HTTP (live server), and its guards."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents.tools.executor import ExecutorCode, ToolExecutor, ToolSnapshot, ValidatedCall, redact
from sandbox.models import Order
from sandbox.services import faultrule_set
from traces.redaction import REDACTED

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(**overrides: Any) -> ToolSnapshot:
    values: dict[str, Any] = {
        "name": "get_order",
        "description": "order",
        "kind": "http",
        "params_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "endpoint_template": "{sandbox}/orders/{order_id}",
        "method": "GET",
        "timeout_seconds": 3.0,
    }
    values.update(overrides)
    return ToolSnapshot(**values)


def execute(tool: ToolSnapshot, arguments: dict[str, Any], **executor_kwargs: Any) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient(trust_env=False) as client:
            executor = ToolExecutor(
                tools={tool.name: tool},
                http_client=client,
                max_response_bytes=executor_kwargs.get("max_bytes", 256 * 1024),
                max_redirects=3,
            )
            return await executor.execute(
                ValidatedCall(tool=tool, arguments=arguments, adapters_fired=[]),
                idempotency_key=executor_kwargs.get("idempotency_key", ""),
            )

    return async_to_sync(go)()


def test_sandbox_host_is_reached_although_it_is_loopback(
    live_sandbox: str, small_shop: Any
) -> None:
    order = Order.objects.first()
    assert order is not None
    result = execute(snapshot(), {"order_id": order.order_id})
    assert result.code == ExecutorCode.OK
    assert result.status_code == 200
    assert "%23W" in result.endpoint  # the '#' is quoted, never a URL fragment
    assert order.order_id in result.body


@pytest.mark.parametrize(
    "template",
    ["http://evil.example.com/orders/{order_id}", "file:///etc/passwd#{order_id}"],
)
def test_endpoint_off_the_allow_list_is_refused(live_sandbox: str, template: str) -> None:
    result = execute(snapshot(endpoint_template=template), {"order_id": "#W1"})
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert result.status_code is None


@pytest.mark.parametrize(
    "base",
    [
        "http://169.254.169.254/latest",
        "http://10.0.0.8/api",
        "http://2130706433/api",
        "http://[::1]:8080/api",
        "http://0x7f000001/api",
    ],
)
def test_allow_listed_but_private_address_is_blocked_by_the_ssrf_guard(
    live_sandbox: str, settings: Any, base: str
) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [base + "/"]
    result = execute(snapshot(endpoint_template=base + "/orders/{order_id}"), {"order_id": "x"})
    assert result.code == ExecutorCode.SSRF_BLOCKED


def test_path_traversal_argument_is_refused(live_sandbox: str) -> None:
    result = execute(snapshot(), {"order_id": ".."})
    assert result.code == ExecutorCode.INVALID_ENDPOINT


def test_timeout_fault_becomes_timeout(live_sandbox: str, small_shop: Any) -> None:
    # given an upstream that holds every request, then answers 504
    faultrule_set(endpoint="orders", rate_timeout=1.0, timeout_seconds=5.0)
    # when the tool's own timeout is shorter than the hold
    result = execute(snapshot(timeout_seconds=0.2), {"order_id": "#W1000000"})
    # then the executor gave up at its timeout: a call that waited for the upstream would
    # carry the 504 (HTTP_ERROR) instead of no response at all
    assert result.code == ExecutorCode.TIMEOUT
    assert result.status_code is None and result.body == ""
    assert result.detail == "no response within 0.2s"


def test_response_over_the_cap_is_refused(live_sandbox: str, small_shop: Any) -> None:
    order = Order.objects.first()
    assert order is not None
    result = execute(snapshot(), {"order_id": order.order_id}, max_bytes=50)
    assert result.code == ExecutorCode.RESPONSE_TOO_LARGE


def test_http_error_keeps_status_and_body(live_sandbox: str, small_shop: Any) -> None:
    result = execute(snapshot(), {"order_id": "#W0000001"})
    assert result.code == ExecutorCode.HTTP_ERROR
    assert result.status_code == 404
    assert "not_found" in result.body


def test_secrets_are_redacted_from_recorded_payloads() -> None:
    payload = {"order_id": "#W1", "api_key": "sk-123", "auth": {"password": "p", "user": "u"}}
    assert redact(payload) == {
        "order_id": "#W1",
        "api_key": REDACTED,
        "auth": {"password": REDACTED, "user": "u"},
    }


@pytest.mark.parametrize(
    "base",
    ["http://0177.0.0.1", "http://[::1", "http://api.example.com:port", "http://exa mple.com"],
)
def test_allow_listed_but_unparseable_url_gives_invalid_endpoint(settings: Any, base: str) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [base + "/"]
    result = execute(snapshot(endpoint_template=base + "/orders/{order_id}"), {"order_id": "1"})
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert result.status_code is None
    assert result.detail


PUBLIC_API = "http://93.184.216.34/api"


def execute_with_transport(
    tool: ToolSnapshot, arguments: dict[str, Any], handler: Any, idempotency_key: str | None = None
) -> tuple[Any, list[httpx.Request]]:
    """Run one call through a mock transport; the public IP literal needs no DNS lookup.
    ``idempotency_key=None``: the call is made without one, as a replay makes it."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        response: httpx.Response = handler(request)
        return response

    async def go() -> Any:
        transport = httpx.MockTransport(record)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
            executor = ToolExecutor(
                tools={tool.name: tool},
                http_client=client,
                max_response_bytes=256 * 1024,
                max_redirects=3,
            )
            call = ValidatedCall(tool=tool, arguments=arguments, adapters_fired=[])
            if idempotency_key is None:
                return await executor.execute(call)
            return await executor.execute(call, idempotency_key=idempotency_key)

    return async_to_sync(go)(), seen


def redirect_once(location: str) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/orders/1":
            return httpx.Response(302, headers={"Location": location})
        return httpx.Response(200, json={"reached": request.url.path})

    return handler


@pytest.mark.parametrize(
    "location",
    [
        "http://93.184.216.34.evil.net/api/x",
        "http://evil.net/api/x",
        "http://user@93.184.216.34/api/x",
        "http://0177.0.0.1/api/x",
        "http://[::1/api/x",
        "http://93.184.216.34:8080/api/x",
        "https://93.184.216.34/api/x",
        "/apix/secret",
        "/admin",
        "/api/%2e%2e/admin",
        "/api/%252e%252e/admin",
    ],
)
def test_redirects_are_re_checked_against_the_allow_list(settings: Any, location: str) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [PUBLIC_API]
    result, seen = execute_with_transport(
        snapshot(endpoint_template=PUBLIC_API + "/orders/{order_id}"),
        {"order_id": "1"},
        redirect_once(location),
    )
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert [request.url.path for request in seen] == ["/api/orders/1"]


def test_redirect_inside_the_allow_list_is_followed(settings: Any) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [PUBLIC_API]
    result, seen = execute_with_transport(
        snapshot(endpoint_template=PUBLIC_API + "/orders/{order_id}"),
        {"order_id": "1"},
        redirect_once("/api/orders/2"),
    )
    assert result.code == ExecutorCode.OK
    assert [request.url.path for request in seen] == ["/api/orders/1", "/api/orders/2"]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (200, ExecutorCode.OK),
        (204, ExecutorCode.OK),
        (299, ExecutorCode.OK),
        (300, ExecutorCode.HTTP_ERROR),  # Multiple Choices, no Location: nothing to follow
        (304, ExecutorCode.HTTP_ERROR),
        (199, ExecutorCode.HTTP_ERROR),
    ],
)
def test_only_a_2xx_answer_is_a_successful_call(settings: Any, status: int, code: str) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [PUBLIC_API]
    result, _ = execute_with_transport(
        snapshot(endpoint_template=PUBLIC_API + "/orders/{order_id}"),
        {"order_id": "1"},
        lambda request: httpx.Response(status, json={"status": status}),
    )
    assert (result.code, result.ok, result.status_code) == (code, code == ExecutorCode.OK, status)


def test_a_post_repeated_with_its_idempotency_key_runs_once(
    live_sandbox: str, small_shop: Any
) -> None:
    from sandbox.models import IdempotentRequest, ReturnRequest
    from sandbox.selectors import order_return_eligibility

    order = next(o for o in Order.objects.all() if order_return_eligibility(order=o).eligible)
    tool = snapshot(
        name="create_return",
        endpoint_template="{sandbox}/returns",
        method="POST",
        params_schema={"type": "object", "properties": {}},
    )
    arguments = {"order_id": order.order_id, "reason": "Wrong size"}

    first = execute(tool, arguments, idempotency_key="run-1:round-2")
    again = execute(tool, arguments, idempotency_key="run-1:round-2")

    assert first.status_code == again.status_code == 201
    assert again.body == first.body
    assert ReturnRequest.objects.filter(order=order).count() == 1
    assert IdempotentRequest.objects.get(key="run-1:round-2").replays == 1


@pytest.mark.parametrize(("method", "sent"), [("POST", True), ("DELETE", True), ("GET", False)])
def test_the_idempotency_key_goes_with_methods_that_change_something(
    settings: Any, method: str, sent: bool
) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [PUBLIC_API]
    _, seen = execute_with_transport(
        snapshot(endpoint_template=PUBLIC_API + "/orders/{order_id}", method=method),
        {"order_id": "1"},
        lambda request: httpx.Response(200, json={}),
        idempotency_key="k",
    )
    assert seen[0].headers.get("Idempotency-Key") == ("k" if sent else None)


def test_a_post_made_without_a_key_sends_none(settings: Any) -> None:
    # a replay's calls carry no run's key: the API must not dedupe them against each other
    settings.TOOL_ENDPOINT_ALLOWLIST = [PUBLIC_API]
    _, seen = execute_with_transport(
        snapshot(endpoint_template=PUBLIC_API + "/orders/{order_id}", method="POST"),
        {"order_id": "1"},
        lambda request: httpx.Response(201, json={}),
    )
    assert "Idempotency-Key" not in seen[0].headers
