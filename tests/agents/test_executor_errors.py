"""The executor's error paths over real sockets: an upstream of the test's own (a small
HTTP server on a free port, standing where the sandbox stands), a port nothing listens on,
and in-process tools that raise, stall or were never registered."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents.tools.credentials import ToolAuth
from agents.tools.executor import (
    ExecutorCode,
    ToolExecutor,
    ToolSnapshot,
    ValidatedCall,
    retry_after_seconds,
)
from tests.agents.runtime_helpers import declared_tool, tools_registered
from tests.redis_server import free_port


class Upstream(BaseHTTPRequestHandler):
    """Answers by path: ``/echo`` echoes the request, ``/away`` redirects off the
    allow-list, ``/loop/N`` redirects to ``/loop/N+1``, ``/see-other`` (303) and
    ``/temporary`` (307) redirect to ``/echo``."""

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _answer(self) -> None:
        url = urlsplit(self.path)
        path = url.path.removeprefix("/sandbox/api")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        if path == "/echo":
            payload = {
                "method": self.command,
                "query": parse_qs(url.query),
                "body": json.loads(body) if body else None,
                "content_type": self.headers.get("Content-Type"),
                "key": self.headers.get("X-Api-Key"),
            }
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if path == "/away":
            location = "http://evil.example.com/steal"
            status = 302
        elif path.startswith("/loop/"):
            location = f"/sandbox/api/loop/{int(path.rsplit('/', 1)[1]) + 1}"
            status = 302
        elif path == "/see-other":
            location, status = "/sandbox/api/echo", 303
        elif path == "/temporary":
            location, status = "/sandbox/api/echo", 307
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(status)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def upstream(settings: Any) -> Iterator[str]:
    """The test's own server as the sandbox base URL: exempt from the SSRF guard and on the
    allow-list, like the sandbox."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/sandbox/api"
    settings.SANDBOX_BASE_URL = base
    yield base
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def http_tool(path: str, **overrides: Any) -> ToolSnapshot:
    values: dict[str, Any] = {
        "name": "upstream_call",
        "description": "test",
        "kind": "http",
        "params_schema": {"type": "object"},
        "endpoint_template": "{sandbox}" + path,
        "method": "GET",
        "timeout_seconds": 10.0,
    }
    values.update(overrides)
    return ToolSnapshot(**values)


def python_tool(name: str, timeout: float = 3.0) -> ToolSnapshot:
    return ToolSnapshot(
        name=name,
        description="test",
        kind="python",
        params_schema={"type": "object"},
        endpoint_template="",
        method="GET",
        timeout_seconds=timeout,
    )


def execute(
    tool: ToolSnapshot, arguments: dict[str, Any], param_locations: dict[str, str] | None = None
) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient(trust_env=False) as client:
            executor = ToolExecutor(
                tools={tool.name: tool},
                http_client=client,
                max_response_bytes=64 * 1024,
                max_redirects=3,
            )
            return await executor.execute(
                ValidatedCall(
                    tool=tool,
                    arguments=arguments,
                    adapters_fired=[],
                    param_locations=param_locations or {},
                )
            )

    return async_to_sync(go)()


# --- HTTP ----------------------------------------------------------------------------------


def test_post_sends_the_arguments_as_a_json_body(upstream: str) -> None:
    result = execute(http_tool("/echo", method="POST"), {"order_id": "#W1", "qty": 2})
    assert result.code == ExecutorCode.OK
    assert result.detail == ""  # an answer needs no explanation
    echoed = json.loads(result.body)
    assert echoed["method"] == "POST"
    assert echoed["body"] == {"order_id": "#W1", "qty": 2}
    assert echoed["content_type"] == "application/json"
    assert echoed["query"] == {}


def test_post_renames_arguments_and_sends_a_query_credential_in_the_query(
    upstream: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_SECRET_UPSTREAM", "s3cret-value-123")
    tool = http_tool(
        "/echo",
        method="POST",
        query_map={"order_id": "orderId"},
        auth=ToolAuth(type="query", name="key", env="TOOL_SECRET_UPSTREAM"),
    )
    result = execute(tool, {"order_id": "#W1"})
    assert result.code == ExecutorCode.OK
    echoed = json.loads(result.body.replace("[REDACTED]", "redacted"))
    assert echoed["body"] == {"orderId": "#W1"}
    assert list(echoed["query"]) == ["key"]
    assert "s3cret-value-123" not in result.body  # never shown to the model or stored


def test_get_sends_booleans_as_json_in_the_query(upstream: str) -> None:
    result = execute(http_tool("/echo"), {"in_stock": True, "q": "lamp"})
    echoed = json.loads(result.body)
    assert echoed["query"] == {"in_stock": ["true"], "q": ["lamp"]}
    assert (echoed["body"], echoed["content_type"]) == (None, None)  # a GET has no body


def test_a_post_whose_arguments_all_go_in_the_query_sends_no_body(upstream: str) -> None:
    tool = http_tool("/echo", method="POST", param_locations={"dry_run": "query"})
    echoed = json.loads(execute(tool, {"dry_run": "yes"}).body)
    assert echoed["query"] == {"dry_run": ["yes"]}
    assert (echoed["body"], echoed["content_type"]) == (None, None)


def test_a_repair_moves_one_argument_and_the_others_keep_the_default_place(
    upstream: str,
) -> None:
    # A GET tool places every argument in the query; a repair sends sku in the body.
    result = execute(http_tool("/echo"), {"q": "lamp", "sku": "AWH-2041-BLK"}, {"sku": "body"})
    echoed = json.loads(result.body)
    assert echoed["query"] == {"q": ["lamp"]}
    assert echoed["body"] == {"sku": "AWH-2041-BLK"}


def test_a_repair_s_placement_adds_to_the_tool_s_own(upstream: str) -> None:
    tool = http_tool("/echo", method="POST", param_locations={"a": "query", "b": "body"})
    result = execute(tool, {"a": "1", "b": "2", "c": "3"}, {"c": "query"})
    echoed = json.loads(result.body)
    assert echoed["query"] == {"a": ["1"], "c": ["3"]}
    assert echoed["body"] == {"b": "2"}


def test_303_after_post_fetches_the_target_with_get_and_no_body(upstream: str) -> None:
    result = execute(http_tool("/see-other", method="POST"), {"order_id": "#W1"})
    echoed = json.loads(result.body)
    assert (echoed["method"], echoed["body"]) == ("GET", None)


def test_307_after_post_repeats_the_post_with_its_body(upstream: str) -> None:
    result = execute(http_tool("/temporary", method="POST"), {"order_id": "#W1"})
    echoed = json.loads(result.body)
    assert (echoed["method"], echoed["body"]) == ("POST", {"order_id": "#W1"})


def test_redirect_outside_the_allow_list_is_an_invalid_endpoint(upstream: str) -> None:
    result = execute(http_tool("/away"), {})
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert result.status_code is None
    assert result.detail == "endpoint not in the allow-list: http://evil.example.com/steal"


def test_too_many_redirects_is_an_invalid_endpoint(upstream: str) -> None:
    result = execute(http_tool("/loop/0"), {})
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert result.detail.startswith("more than 3 redirects starting at ")


def test_refused_connection_is_a_connection_error(settings: Any) -> None:
    # nothing listens on this port; the host is the sandbox's, so the guard lets it through
    settings.SANDBOX_BASE_URL = f"http://127.0.0.1:{free_port()}/sandbox/api"
    result = execute(http_tool("/echo"), {})
    assert result.code == ExecutorCode.CONNECTION_ERROR
    assert result.detail.startswith("ConnectError: ")
    assert result.status_code is None and not result.ok


def test_unrendered_template_is_an_invalid_endpoint(upstream: str) -> None:
    result = execute(http_tool("/orders/{order_id}"), {})
    assert result.code == ExecutorCode.INVALID_ENDPOINT
    assert result.detail == "missing path argument 'order_id'"


def test_missing_credential_fails_the_call_without_a_request(
    upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOL_SECRET_ABSENT", raising=False)
    tool = http_tool(
        "/echo", auth=ToolAuth(type="header", name="X-Api-Key", env="TOOL_SECRET_ABSENT")
    )
    result = execute(tool, {})
    assert result.code == ExecutorCode.CREDENTIAL_MISSING
    assert result.detail.startswith("tool 'upstream_call' cannot authenticate: ")


# --- in-process tools ----------------------------------------------------------------------


@declared_tool(name="raises_value_error", description="test", params_schema={"type": "object"})
def raises_value_error(**_: Any) -> None:
    raise ValueError("no such customer 'U1'")


@declared_tool(name="blocks_the_thread", description="test", params_schema={"type": "object"})
def blocks_the_thread(**_: Any) -> dict[str, str]:
    time.sleep(2)
    return {"late": "yes"}


@declared_tool(name="returns_a_date", description="test", params_schema={"type": "object"})
def returns_a_date(**_: Any) -> dict[str, Any]:
    import datetime

    return {"when": datetime.date(2026, 12, 2), "name": "Zoë"}


@pytest.fixture
def python_tools() -> Iterator[None]:
    with tools_registered(raises_value_error, blocks_the_thread, returns_a_date):
        yield


def test_python_tool_that_raises_is_a_tool_error(python_tools: None) -> None:
    result = execute(python_tool("raises_value_error"), {"customer": "U1"})
    assert result.code == ExecutorCode.TOOL_ERROR
    assert result.detail == "ValueError: no such customer 'U1'"
    assert result.endpoint == "python:raises_value_error"
    assert result.request_payload == {"customer": "U1"}


def test_python_tool_without_a_registered_function_is_a_tool_error() -> None:
    result = execute(python_tool("never_registered"), {})
    assert result.code == ExecutorCode.TOOL_ERROR
    assert result.detail == "no registered function for this tool"
    assert result.endpoint == "python:never_registered"  # where the step says it went


def test_blocking_python_tool_past_its_timeout_is_a_timeout(python_tools: None) -> None:
    result = execute(python_tool("blocks_the_thread", timeout=0.05), {})
    assert result.code == ExecutorCode.TIMEOUT
    assert result.detail == "no result within 0.05s"
    assert result.endpoint == "python:blocks_the_thread"


def test_python_tool_result_is_json_with_non_ascii_kept(python_tools: None) -> None:
    result = execute(python_tool("returns_a_date"), {})
    assert result.code == ExecutorCode.OK and result.status_code == 200
    assert json.loads(result.body) == {"when": "2026-12-02", "name": "Zoë"}


# --- validation ----------------------------------------------------------------------------
def validate(tools: list[ToolSnapshot], name: str, arguments: Any) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient(trust_env=False) as client:
            executor = ToolExecutor(
                tools={tool.name: tool for tool in tools},
                http_client=client,
                max_response_bytes=64 * 1024,
                max_redirects=3,
            )
            return executor.validate(name, arguments)

    return async_to_sync(go)()


def test_a_tool_off_the_whitelist_names_the_allowed_ones() -> None:
    refused = validate([python_tool("b_tool"), python_tool("a_tool")], "rm_rf", {})
    assert refused.code == ExecutorCode.TOOL_NOT_ALLOWED
    assert refused.detail.endswith("allowed: a_tool, b_tool")


def test_an_agent_without_tools_says_none_are_allowed() -> None:
    refused = validate([], "get_order", {})
    assert refused.code == ExecutorCode.TOOL_NOT_ALLOWED
    assert refused.detail == "tool 'get_order' is not on this agent's whitelist; allowed: (none)"


@pytest.mark.parametrize("arguments", [["#W1000001"], "order 1000001", None, 7])
def test_arguments_that_are_not_an_object_are_a_schema_violation(arguments: Any) -> None:
    refused = validate([python_tool("get_order")], "get_order", arguments)
    assert refused.code == ExecutorCode.SCHEMA_VIOLATION
    assert refused.detail == "validator=type path=(root): expected an object"


def test_a_violation_of_the_whole_object_is_placed_at_the_root() -> None:
    tool = http_tool(
        "/echo",
        name="get_order",
        params_schema={"type": "object", "minProperties": 1},
    )
    refused = validate([tool], "get_order", {})
    assert refused.code == ExecutorCode.SCHEMA_VIOLATION
    assert refused.detail.startswith("validator=minProperties path=(root): ")


# --- Retry-After -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("5", 5.0),
        (" 2.5 ", 2.5),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date gone by: call again now
        ("Wed, 21 Oct 2015 07:28:00 -0000", 0.0),  # no zone stated (RFC 5322): UTC
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date(header: str | None, seconds: float) -> None:
    assert retry_after_seconds(header) == seconds


def test_a_retry_after_date_without_a_zone_still_lies_ahead() -> None:
    # Decades ahead, however long the test takes; read as UTC, not refused as naive.
    seconds = retry_after_seconds("Fri, 01 Jan 2100 00:00:00 -0000")
    assert seconds is not None and seconds > 365 * 24 * 3600


def test_a_retry_after_date_is_waited_for_past_the_second_it_names() -> None:
    """The date is to the second and the API's deadline may fall late inside it: the exact
    difference (1.1-1.8 s for a date 2 s ahead) retried before the API was ready."""
    from email.utils import format_datetime

    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    seconds = retry_after_seconds(format_datetime(ahead, usegmt=True))
    assert seconds is not None and 3.0 < seconds <= 4.0
