"""Responses that say "success" and are none: a 2xx with an error envelope, an HTML page or
broken JSON is a failed call (``BAD_RESPONSE``) with a classified error type, and what the
body carries that storage refuses (a NUL) or that is not UTF-8 reaches nobody garbled."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.tools.executor import ExecutorCode, response_body_problem
from tests.agents.test_executor_errors import execute, http_tool
from tests.redis_server import free_port
from traces.classifier import ErrorEvent, classify_error, error_rules_load

# path -> (status, content type, body)
CANNED: dict[str, tuple[int, str, bytes]] = {
    "/error-envelope": (200, "application/json", b'{"error": "order not_found"}'),
    "/ok-false": (200, "application/json", b'{"ok": false, "status": "error"}'),
    "/html": (200, "text/html", b"<!DOCTYPE html><html><body>Bad gateway</body></html>"),
    "/truncated": (200, "application/json", b'{"order_id": "#W1", "status": "deliv'),
    "/data-with-null-error": (200, "application/json", b'{"order_id": "#W1", "error": null}'),
    "/plain": (200, "text/plain", b"[INFO] all good"),
    "/nul": (200, "application/json", b'{"order_id": "#W1", "note": "a\x00b"}'),
    "/latin1": (
        200,
        "application/json; charset=iso-8859-1",
        '{"status": "expédié"}'.encode("latin-1"),
    ),
    "/empty": (204, "", b""),
    "/empty-object": (200, "application/json", b"{}"),
    "/wrapped-empty": (200, "application/json", b'{"data": {}}'),
    "/no-results": (200, "application/json", b"[]"),
    "/order": (200, "application/json", b'{"order_id": "#W1", "state": "shipped"}'),
    "/renamed-empty": (200, "application/json", b'{"items": []}'),
    "/envelope": (200, "application/json", b'{"data": {"order_id": "#W1", "status": "ok"}}'),
    "/other-names": (200, "application/json", b'{"state": "shipped", "total": 0}'),
    "/empty-200": (200, "application/json", b""),
    "/bad-gzip": (200, "application/json", b"this is not a gzip stream at all"),
}


class Canned(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        status, content_type, body = CANNED[self.path.split("?")[0].removeprefix("/sandbox/api")]
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if self.path.endswith("/bad-gzip"):
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def canned(settings: Any) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.SANDBOX_BASE_URL = f"http://127.0.0.1:{server.server_address[1]}/sandbox/api"
    yield settings.SANDBOX_BASE_URL
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _error_type(result: Any) -> str:
    event = ErrorEvent(source="executor", exception_class=result.code, body=result.detail)
    return classify_error(event, error_rules_load())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "error_type", "says"),
    [
        ("/error-envelope", "RESOURCE_NOT_FOUND", "an error in its body: order not_found"),
        ("/ok-false", "INTERNAL_SERVER_ERROR", "an error in its body: error"),
        ("/html", "INTERNAL_SERVER_ERROR", "an HTML page"),
        ("/truncated", "INTERNAL_SERVER_ERROR", "not valid JSON"),
    ],
)
def test_a_2xx_that_is_no_result_is_a_classified_failure(
    canned: str, error_rules: None, path: str, error_type: str, says: str
) -> None:
    result = execute(http_tool(path), {})
    assert (result.code, result.ok, result.status_code) == (ExecutorCode.BAD_RESPONSE, False, 200)
    assert says in result.detail and result.detail.startswith("the API answered 200 with ")
    assert _error_type(result) == error_type


@pytest.mark.parametrize("path", ["/data-with-null-error", "/plain", "/empty"])
def test_data_plain_text_and_an_empty_answer_stay_results(canned: str, path: str) -> None:
    result = execute(http_tool(path), {})
    assert (result.code, result.ok) == (ExecutorCode.OK, True)


def test_a_nul_never_leaves_the_executor_and_the_declared_charset_is_read(canned: str) -> None:
    nul = execute(http_tool("/nul"), {})
    assert nul.ok and "\x00" not in nul.body and '"ab"' in nul.body
    latin = execute(http_tool("/latin1"), {})
    assert latin.ok and "expédié" in latin.body


@pytest.mark.parametrize(
    ("body", "content_type", "problem"),
    [
        (
            '{"errors": [{"message": "Order not found"}], "data": null}',
            "application/json",
            "Order not found",
        ),
        ('{"errors": [], "data": {"order": {"id": 1}}}', "application/json", ""),
        ('{"errors": [{"message": "Order not found"}]}', "application/json", "Order not found"),
        ('{"success": false, "order": {"id": 1}}', "application/json", "an error in its body"),
        ('{"status": "shipped", "order_id": "#W1"}', "application/json", ""),
        ('{"status": "error", "message": "upstream down"}', "", "upstream down"),
        ("[1, 2", "text/plain", ""),
    ],
)
def test_what_counts_as_an_error_envelope(body: str, content_type: str, problem: str) -> None:
    found = response_body_problem(body, content_type)
    assert (problem in found) if problem else found == ""


@pytest.mark.parametrize(
    ("arguments", "body", "problem"),
    [
        ({"order_id": "#W1001549"}, '{"order_id": "#W9999999", "status": "delivered"}', "not"),
        ({"order_id": 1001549}, '{"order_id": "#W1001549", "status": "delivered"}', ""),
        ({"order_id": "#W1001549"}, '{"order_id": "#W1001549"}', ""),
        ({"orderId": "A-7"}, '{"orderId": "B-7"}', "not"),
        ({"sku": "AWH-2041-BLK"}, '{"sku": "awh2041blk", "price": 3}', ""),
        ({"q": "lamp"}, '{"q": "chair"}', ""),  # not an identifier
        ({"order_id": "#W1"}, '[{"order_id": "#W2"}]', ""),  # a list answers many
        ({"paid": "yes"}, '{"paid": "no"}', ""),
    ],
)
def test_an_answer_about_another_thing_than_the_one_asked_for_is_no_result(
    arguments: dict[str, Any], body: str, problem: str
) -> None:
    from agents.tools.executor import response_identity_problem

    found = response_identity_problem(arguments, body)
    assert (problem in found and found.startswith("an answer about")) if problem else found == ""


@pytest.mark.django_db
def test_a_body_that_does_not_decode_is_a_broken_response_not_a_lost_connection(
    canned: str, error_rules: None
) -> None:
    result = execute(http_tool("/bad-gzip"), {})
    assert (result.code, result.ok) == (ExecutorCode.BAD_RESPONSE, False)
    assert "does not decode as its Content-Encoding" in result.detail
    assert _error_type(result) == "INTERNAL_SERVER_ERROR"


ORDER_FIELDS = ("order_id", "status", "shipping.carrier")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/empty-200", "an empty body, where the tool returns order_id, status, shipping"),
        ("/empty-object", "no data, where the tool returns order_id, status, shipping: {}"),
        ("/wrapped-empty", "no data, where the tool returns order_id, status, shipping: {"),
        ("/renamed-empty", "no data, where the tool returns order_id, status, shipping: {"),
    ],
)
def test_a_2xx_with_none_of_the_tools_key_fields_is_no_result(
    canned: str, error_rules: None, path: str, says: str
) -> None:
    """An order lookup answered {} used to be a success, and the answer said "I found order
    #W…" from nothing."""
    result = execute(http_tool(path, key_fields=ORDER_FIELDS), {})
    assert (result.code, result.ok) == (ExecutorCode.BAD_RESPONSE, False)
    assert says in result.detail
    assert _error_type(result) == "INTERNAL_SERVER_ERROR"


@pytest.mark.parametrize(
    "path", ["/no-results", "/order", "/envelope", "/other-names", "/empty", "/empty-object"]
)
def test_a_list_data_under_any_name_a_204_or_a_tool_without_key_fields_stays_a_result(
    canned: str, path: str
) -> None:
    """Key fields stay a hint: an envelope, other names with data (0 is data), a list and a
    deliberate 204 are results."""
    fields = () if path == "/empty-object" else ORDER_FIELDS
    result = execute(http_tool(path, key_fields=fields), {})
    assert (result.code, result.ok) == (ExecutorCode.OK, True)
