"""Tool import against hostile or malformed documents: every one is refused with a list of
reasons (no traceback, no 500, nothing written), a reference that fans out cannot exhaust
the process, no imported text carries a secret or an unbounded length into prompts, and no
tool takes a name the runtime or the code owns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agents.models import Tool
from agents.services import tools_import
from agents.tools.tool_import import (
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_NODES,
    ToolImportError,
    tools_import_parse,
)

from .test_tool_import import API, _doc

pytestmark = pytest.mark.django_db

KEY = "sk-proj-AAAAAAAAAAAAAAAAAAAAAAAAAAAA"


def _problems(document: Any) -> str:
    raw = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(ToolImportError) as caught:
        tools_import_parse(raw, base_url=API)
    return "\n".join(caught.value.problems)


def test_a_reference_that_fans_out_is_refused_before_it_expands() -> None:
    """S0 -> (S1, S1) -> (S2, S2) ... : 2**15 nodes from a document of 2 KB, each chain
    of references shorter than the depth limit."""
    schemas = {
        f"S{i}": {
            "type": "object",
            "properties": {
                "a": {"$ref": f"#/components/schemas/S{i + 1}"},
                "b": {"$ref": f"#/components/schemas/S{i + 1}"},
            },
        }
        for i in range(15)
    }
    schemas["S15"] = {"type": "string"}
    document = {
        "openapi": "3.0.3",
        "paths": {
            "/x": {
                "post": {
                    "operationId": "x",
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/S0"}}
                        }
                    },
                }
            }
        },
        "components": {"schemas": schemas},
    }
    assert f"more than {MAX_SCHEMA_NODES} nodes" in _problems(document)


def _with(change: Any) -> dict[str, Any]:
    document = _doc()
    change(document)
    return document


def _post(document: dict[str, Any]) -> dict[str, Any]:
    return document["paths"]["/customers/{customer_id}/notes"]["post"]


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (_with(lambda d: _post(d)["parameters"][0].update(schema="string")), "not an object"),
        (_with(lambda d: _post(d)["parameters"][0].update(schema=5)), "not an object"),
        (_with(lambda d: _post(d).update(parameters=5)), "'parameters' must be a list"),
        (_with(lambda d: d.update(servers=5)), "no absolute server URL"),
        (
            _with(lambda d: d["components"]["schemas"]["Note"].update(properties=["a"])),
            "properties must be an object",
        ),
        ('{"openapi": "3.0.0", "paths": ' + "[" * 100_000, "nested too deeply"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=[
        "schema-a-string",
        "schema-a-number",
        "parameters-a-number",
        "servers-a-number",
        "properties-a-list",
        "json-nested-unclosed",
        "json-nested",
    ],
)
def test_a_malformed_document_gets_reasons_not_a_traceback(document: Any, reason: str) -> None:
    if isinstance(document, dict):  # the server URL comes from the document, not --base-url
        with pytest.raises(ToolImportError) as caught:
            tools_import_parse(json.dumps(document))
        problems = "\n".join(caught.value.problems)
    else:
        problems = _problems(document)
    assert reason in problems


def test_a_deeply_nested_schema_is_refused_with_a_reason() -> None:
    levels = 400  # parses as JSON; deeper than the checks' recursion goes
    schema = (
        '{"type": "object", "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels
    )
    functions = f'[{{"type": "function", "function": {{"name": "deep", "parameters": {schema}}}}}]'
    assert "nested too deeply" in _problems(functions)


def test_a_function_lists_references_are_resolved_or_refused_at_import() -> None:
    good = {
        "type": "object",
        "properties": {"order": {"$ref": "#/$defs/Order"}},
        "$defs": {"Order": {"type": "string", "pattern": "^[0-9]+$"}},
    }
    (spec,) = tools_import_parse(
        json.dumps([{"type": "function", "function": {"name": "f", "parameters": good}}]),
        base_url=API,
    )
    assert spec.params_schema["properties"]["order"] == {"type": "string", "pattern": "^[0-9]+$"}
    for ref in ("#/nowhere", "https://schemas.example.com/order.json"):
        bad = {"type": "object", "properties": {"a": {"$ref": ref}}}
        problems = _problems([{"name": "f", "parameters": bad}])
        assert "points nowhere" in problems or "only local $ref" in problems


def test_an_edited_schema_whose_reference_points_nowhere_is_refused(support_agent: Any) -> None:
    tool = Tool.objects.get(name="get_order")
    tool.params_schema = {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}
    with pytest.raises(ValidationError, match="points nowhere"):
        tool.full_clean()


def test_texts_inside_imported_schemas_are_redacted_and_clipped() -> None:
    long = f"Authorization: Bearer {KEY} " + "x" * 5000
    document = _doc()
    _post(document)["parameters"][0]["schema"] = {"type": "boolean", "description": long}
    document["components"]["schemas"]["Note"]["properties"]["text"].update(
        description=long, title=long, examples=[f"api_key={KEY}"], default=f"token {KEY}"
    )
    functions = [
        {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": long}},
            },
        }
    ]
    specs = tools_import_parse(json.dumps(document)) + tools_import_parse(
        json.dumps(functions), base_url=API
    )
    for spec in specs:
        stored = json.dumps(spec.params_schema)
        assert KEY not in stored and KEY[:12] not in stored
        for prop in spec.params_schema["properties"].values():
            assert len(prop.get("description", "")) <= MAX_DESCRIPTION_CHARS
            assert len(prop.get("title", "")) <= MAX_DESCRIPTION_CHARS


def test_no_tool_takes_the_runtimes_action_name(support_agent: Any) -> None:
    assert "runtime's own" in _problems([{"name": "final_answer"}])
    document = _doc()
    _post(document)["operationId"] = "final_answer"
    assert "runtime's own" in _problems(document)
    tool = Tool(
        name="final_answer",
        description="x",
        kind=Tool.Kind.PYTHON,
        params_schema={"type": "object"},
    )
    with pytest.raises(ValidationError, match="runtime's own"):
        tool.full_clean(validate_unique=False)


def test_an_import_never_takes_a_code_declared_name_even_before_its_row_exists(
    settings: Any,
) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [API]
    assert not Tool.objects.filter(name="get_order").exists()  # tools_sync has not run
    document = _doc()
    _post(document)["operationId"] = "get_order"
    with pytest.raises(ToolImportError, match="a code-declared tool already has this name"):
        tools_import(raw=json.dumps(document))
    assert not Tool.objects.filter(name="get_order").exists()


def test_the_admin_page_shows_a_malformed_documents_reasons(
    client: Client, admin_role_user: Any
) -> None:
    client.force_login(admin_role_user)
    document = _doc()
    _post(document).update(parameters=5)
    upload = SimpleUploadedFile("x.json", json.dumps(document).encode(), "application/json")
    response = client.post("/tools/import/", {"file": upload})
    assert response.status_code == 400
    assert b"Nothing was imported" in response.content
    assert b"must be a list" in response.content
