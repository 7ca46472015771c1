"""JSON Schema references are followed only inside the schema.

Arguments schemas and validation rules come from admins, imported documents, reviewers and
the learning loop's model. Left to itself, jsonschema fetches any other ``$ref`` or
``$dynamicRef`` (http, file) when it validates: a request past the SSRF guard and the
allow-list, or a local file's content echoed back in a validation message. Such a reference
is refused where a schema is saved, and one already stored is a validation issue, never a
fetch.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.tools.adapters import adapt_arguments, validate_arguments
from agents.tools.tool_import import ToolImportError, schema_refs_problem, tools_import_parse
from policies.branches import branch_errors


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A loopback server that answers any GET with a schema, recording what was asked."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
def test_a_stored_remote_reference_is_an_issue_and_nothing_is_fetched(
    listener: tuple[str, list[str]], keyword: str
) -> None:
    url, hits = listener
    schema = {"type": "object", "properties": {"sku": {keyword: f"{url}/meta-data/"}}}

    issues = validate_arguments(schema=schema, arguments={"sku": "A-1"})
    adapted, fired, remaining = adapt_arguments(schema=schema, arguments={"sku": 7})

    assert hits == []
    assert [(i.validator, "not followed" in i.message) for i in issues] == [("$ref", True)]
    assert (adapted, fired, [i.validator for i in remaining]) == ({"sku": 7}, [], ["$ref"])


def test_a_file_reference_reads_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"const": "SECRET-FROM-DISK"}))
    schema = {"type": "object", "properties": {"q": {"$ref": secret.as_uri()}}}

    issues = validate_arguments(schema=schema, arguments={"q": "x"})

    assert issues and all("SECRET-FROM-DISK" not in i.message for i in issues)


def test_references_inside_the_schema_still_validate() -> None:
    schema = {
        "type": "object",
        "properties": {"sku": {"$ref": "#/$defs/sku"}},
        "$defs": {"sku": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"}},
    }
    assert validate_arguments(schema=schema, arguments={"sku": "A-1"}) == []
    assert [i.validator for i in validate_arguments(schema=schema, arguments={"sku": "a"})] == [
        "pattern"
    ]


def test_strategies_with_outside_references_are_refused(listener: tuple[str, list[str]]) -> None:
    url, hits = listener
    rule = {"tool": "get_order", "schema": {"allOf": [{"$ref": f"{url}/x"}]}}
    amend = {"tool": "get_order", "amend": {"order_id": {"$dynamicRef": "file:///etc/passwd"}}}

    assert any("$ref" in e and "not" in e for e in branch_errors("validation_rule", rule))
    assert any(
        e.startswith("amend.order_id") and "$dynamicRef" in e
        for e in branch_errors("validation_rule", amend)
    )
    assert hits == []


def test_tools_with_outside_references_are_refused() -> None:
    schema = {"type": "object", "properties": {"sku": {"$dynamicRef": "http://169.254.169.254/"}}}
    assert "$dynamicRef" in schema_refs_problem(schema)
    document = [
        {
            "type": "function",
            "function": {"name": "vendor_lookup", "description": "Look up", "parameters": schema},
            "x-endpoint": {"method": "GET", "path": "/skus/{sku}"},
        }
    ]
    with pytest.raises(ToolImportError) as refused:
        tools_import_parse(json.dumps(document), base_url="http://shop.example")
    assert any("$dynamicRef" in problem for problem in refused.value.problems)
