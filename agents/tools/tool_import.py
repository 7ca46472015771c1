"""Parse tool documents into tool specs: an OpenAPI 3 document or an OpenAI function list.

Nothing here writes rows: ``tools_import_parse`` returns the specs (or raises
``ToolImportError`` listing every problem it found), and ``agents.services.tools_import``
saves them in one transaction. A document is untrusted input: its size, the number of
operations, names, descriptions and ``$ref`` depth are all bounded.

OpenAPI: each operation (GET, POST, PUT, PATCH, DELETE) becomes one tool. Its path, query
and JSON-body parameters are merged into one object schema, and ``param_locations``
records where each argument goes. The base URL is ``--base-url`` or the first absolute
entry of ``servers``.

Function list: ``[{"type": "function", "function": {"name", "description", "parameters"}}]``
(or the bare ``{"name", ...}`` objects). Such a list names no endpoint, so each entry may
carry ``"x-endpoint": {"method": "POST", "path": "/orders/{order_id}"}``; without one the
tool is ``POST {base}/{name}`` with every argument in the JSON body. A base URL is
required.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator

from agents.tools.adapters import schema_references_problems
from traces.redaction import redact_text, redact_value

MAX_DOCUMENT_BYTES = 1_000_000
MAX_OPERATIONS = 200
MAX_DESCRIPTION_CHARS = 1000
MAX_REF_DEPTH = 20
# One tool's arguments schema, $refs expanded: it goes into every reasoning prompt.
MAX_SCHEMA_NODES = 5_000
MAX_SCHEMA_BYTES = 32_768
# Action names the runtime gives a meaning of its own: no tool may take one.
RESERVED_NAMES = frozenset({"final_answer"})
METHODS = ("get", "post", "put", "patch", "delete")
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
ARGUMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ToolImportError(ValueError):
    """The document cannot be imported; ``problems`` lists every reason found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class ToolSpec:
    """One tool as a document describes it, ready to become a Tool row."""

    name: str
    description: str
    method: str
    endpoint_template: str
    params_schema: dict[str, Any]
    param_locations: dict[str, str] = field(default_factory=dict)
    query_map: dict[str, str] = field(default_factory=dict)


def tools_import_parse(raw: bytes | str, *, base_url: str = "") -> list[ToolSpec]:
    """The tool specs of an OpenAPI 3 document or an OpenAI function list (JSON or YAML)."""
    if isinstance(raw, str):
        raw = raw.encode()
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ToolImportError([f"the document is larger than {MAX_DOCUMENT_BYTES} bytes"])
    try:
        return _parse(_load(raw), base_url=base_url)
    except RecursionError:
        raise ToolImportError(["the document is nested too deeply"]) from None
    except (TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, ToolImportError):
            raise
        # A field of an unexpected type that no check above named: still the document's
        # fault, and said as such (the admin page and the command show it, no traceback).
        raise ToolImportError([f"the document is malformed: {exc}"]) from None


def _parse(document: Any, *, base_url: str) -> list[ToolSpec]:
    if isinstance(document, list):
        return _function_list(document, base_url=base_url)
    if isinstance(document, dict) and "openapi" in document:
        return _openapi(document, base_url=base_url)
    if isinstance(document, dict) and "swagger" in document:
        raise ToolImportError(["Swagger 2 is not supported; convert it to OpenAPI 3 first"])
    raise ToolImportError(
        ["not an OpenAPI 3 document (no 'openapi' key) nor a JSON list of function tools"]
    )


def _load(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as json_error:
        try:
            import yaml

            from config.safe_yaml import yaml_load_plain
        except ImportError:  # pragma: no cover - PyYAML ships with the project's deps
            raise ToolImportError([f"not valid JSON: {json_error}"]) from None
        try:
            loaded = yaml_load_plain(raw)
        except yaml.YAMLError as exc:
            raise ToolImportError([f"neither valid JSON nor YAML: {exc}"]) from None
        if not isinstance(loaded, dict | list):
            raise ToolImportError([f"not valid JSON: {json_error}"]) from None
        return loaded


def _clip(text: Any) -> str:
    """A description as stored and put in prompts: secret-looking values redacted (a
    document may show a real key in an example), whitespace folded, cut to length."""
    return " ".join(redact_text(str(text or "")).split())[:MAX_DESCRIPTION_CHARS]


def _base(base_url: str) -> str:
    return base_url.strip().rstrip("/")


def _check_schema(schema: Any, where: str, problems: list[str]) -> None:
    if not isinstance(schema, dict):
        problems.append(f"{where}: the schema is not an object")
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        problems.append(f"{where}: invalid JSON Schema: {exc.message}")
        return
    problems += schema_references_problems(schema, where)
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        problems.append(
            f"{where}: the arguments schema is {size} bytes, more than {MAX_SCHEMA_BYTES} "
            "(it goes into every prompt)"
        )


def _schema_clean(schema: Any) -> Any:
    """A schema's texts as stored and put in prompts: every ``description`` and ``title``
    clipped like an operation's, and secret-looking examples and defaults redacted (a
    document may show a real key in one)."""
    if isinstance(schema, list):
        return [_schema_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("description", "title") and isinstance(value, str):
            cleaned[key] = _clip(value)
        elif key in ("example", "examples", "default"):
            cleaned[key] = redact_value(value)
        else:
            cleaned[key] = _schema_clean(value)
    return cleaned


def _check_name(name: str, where: str, problems: list[str]) -> bool:
    if name in RESERVED_NAMES:
        problems.append(f"{where}: {name!r} is an action of the runtime's own, not a tool name")
        return False
    return True


def _check_names(specs: list[ToolSpec], problems: list[str]) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            problems.append(f"tool name {spec.name!r} appears twice")
        seen.add(spec.name)


# --- OpenAI function-calling list -------------------------------------------------------


def _function_list(items: list[Any], *, base_url: str) -> list[ToolSpec]:
    problems: list[str] = []
    base = _base(base_url)
    if not base:
        problems.append("a function list names no server: pass a base URL (--base-url)")
    if len(items) > MAX_OPERATIONS:
        problems.append(f"more than {MAX_OPERATIONS} tools in one document")
    specs: list[ToolSpec] = []
    for index, item in enumerate(items[:MAX_OPERATIONS]):
        where = f"item {index}"
        function = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(function, dict):
            problems.append(f"{where}: not an object with a 'function'")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            problems.append(f"{where}: name {name!r} must match {TOOL_NAME.pattern}")
            continue
        where = f"function {name}"
        if not _check_name(name, where, problems):
            continue
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            problems.append(f'{where}: parameters must be a JSON Schema with "type": "object"')
            continue
        try:
            # Its local $refs (to its own "$defs") inlined, as an OpenAPI operation's are:
            # a reference that points nowhere is refused here, not when a run calls it.
            parameters = _schema_clean(_resolve(parameters, parameters, where))
        except ToolImportError as exc:
            problems.extend(exc.problems)
            continue
        before = len(problems)
        _check_schema(parameters, where, problems)
        if len(problems) > before:
            continue
        endpoint = item.get("x-endpoint") or function.get("x-endpoint") or {}
        if not isinstance(endpoint, dict):
            problems.append(f"{where}: x-endpoint must be an object")
            continue
        method = str(endpoint.get("method", "POST")).upper()
        if method.lower() not in METHODS:
            problems.append(f"{where}: method {method} is not one of {', '.join(METHODS)}")
            continue
        path = str(endpoint.get("path", f"/{name}"))
        if not path.startswith("/"):
            problems.append(f"{where}: x-endpoint path must start with '/'")
            continue
        properties = parameters.get("properties") or {}
        if not isinstance(properties, dict):
            problems.append(f"{where}: parameters.properties must be an object")
            continue
        path_names = re.findall(r"{([^}]*)}", path)
        missing = [p for p in path_names if p not in properties]
        if missing:
            problems.append(f"{where}: path placeholders {missing} are not parameters")
            continue
        rest = "query" if method == "GET" else "body"
        locations = {arg: ("path" if arg in path_names else rest) for arg in properties}
        specs.append(
            ToolSpec(
                name=name,
                description=_clip(function.get("description")) or name,
                method=method,
                endpoint_template=f"{base}{path}",
                params_schema=parameters,
                param_locations=locations,
            )
        )
    _check_names(specs, problems)
    if problems:
        raise ToolImportError(problems)
    return specs


# --- OpenAPI 3 -------------------------------------------------------------------------


def _openapi(document: dict[str, Any], *, base_url: str) -> list[ToolSpec]:
    problems: list[str] = []
    version = str(document.get("openapi", ""))
    if not version.startswith("3."):
        raise ToolImportError([f"openapi version {version!r} is not 3.x"])
    base = _base(base_url) or _server_url(document, problems)
    paths = document.get("paths")
    if not isinstance(paths, dict) or not paths:
        problems.append("the document has no paths")
        raise ToolImportError(problems)
    specs: list[ToolSpec] = []
    names: set[str] = set()
    count = 0
    for path, item in paths.items():
        if not isinstance(item, dict) or not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"path {path!r}: must start with '/' and map to an object")
            continue
        shared = item.get("parameters", [])
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            count += 1
            if count > MAX_OPERATIONS:
                problems.append(f"more than {MAX_OPERATIONS} operations in one document")
                raise ToolImportError(problems)
            if isinstance(operation, dict):
                name = _operation_name(path, method, operation)
                if name in names:
                    problems.append(f"tool name {name!r} appears twice")
                names.add(name)
            spec = _operation(document, path, method, operation, shared, base, problems)
            if spec is not None:
                specs.append(spec)
    if not count:
        problems.append("the document has no GET, POST, PUT, PATCH or DELETE operations")
    if problems:
        raise ToolImportError(problems)
    return specs


def _server_url(document: dict[str, Any], problems: list[str]) -> str:
    servers = document.get("servers") or []
    for server in servers if isinstance(servers, list) else []:
        url = server.get("url", "") if isinstance(server, dict) else ""
        if isinstance(url, str) and re.match(r"^https?://", url) and "{" not in url:
            return _base(url)
    problems.append(
        "no absolute server URL in 'servers' (variables are not expanded): pass --base-url"
    )
    return ""


def _resolve(
    document: dict[str, Any],
    node: Any,
    where: str,
    depth: int = 0,
    budget: list[int] | None = None,
) -> Any:
    """``node`` with every local ``$ref`` replaced by its target (bounded: no cycles, and
    at most ``MAX_SCHEMA_NODES`` nodes in all, however often references fan out)."""
    budget = [MAX_SCHEMA_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise ToolImportError(
            [f"{where}: the schema expands to more than {MAX_SCHEMA_NODES} nodes ($ref fan-out)"]
        )
    if depth > MAX_REF_DEPTH:
        raise ToolImportError([f"{where}: $ref nesting deeper than {MAX_REF_DEPTH} (a cycle?)"])
    if isinstance(node, list):
        return [_resolve(document, value, where, depth, budget) for value in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/"):
            raise ToolImportError([f"{where}: only local $ref ('#/...') is supported: {ref}"])
        target: Any = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise ToolImportError([f"{where}: $ref {ref} points nowhere"])
            target = target[part]
        return _resolve(document, target, where, depth + 1, budget)
    return {key: _resolve(document, value, where, depth, budget) for key, value in node.items()}


def schema_refs_problem(schema: Any) -> str:
    """Why a stored arguments schema's ``$ref`` would fail when a run validates against it
    (one that points nowhere or off the document, a cycle, a fan-out, a ``$dynamicRef``
    off the document); "" when none."""
    try:
        _resolve(schema, schema, "the schema")
    except ToolImportError as exc:
        return "; ".join(exc.problems)
    except RecursionError:
        return "the schema is nested too deeply"
    return "; ".join(schema_references_problems(schema, "the schema"))


def _operation_name(path: str, method: str, operation: dict[str, Any]) -> str:
    name = operation.get("operationId")
    if not isinstance(name, str) or not name:
        name = f"{method}_{path}"
    name = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    if not name or name[0].isdigit():
        name = f"op_{name}"
    return name[:64]


def _operation(
    document: dict[str, Any],
    path: str,
    method: str,
    operation: Any,
    shared: Any,
    base: str,
    problems: list[str],
) -> ToolSpec | None:
    where = f"{method.upper()} {path}"
    if not isinstance(operation, dict):
        problems.append(f"{where}: the operation is not an object")
        return None
    name = _operation_name(path, method, operation)
    where = f"{where} ({name})"
    if not _check_name(name, where, problems):
        return None
    own = operation.get("parameters") or []
    if not isinstance(shared or [], list) or not isinstance(own, list):
        problems.append(f"{where}: 'parameters' must be a list")
        return None
    try:
        budget = [MAX_SCHEMA_NODES]  # for the operation's parameters and body together
        parameters = _resolve(document, [*(shared or []), *own], where, budget=budget)
        body = _resolve(document, operation.get("requestBody"), where, budget=budget)
    except ToolImportError as exc:
        problems.extend(exc.problems)
        return None
    properties: dict[str, Any] = {}
    required: list[str] = []
    locations: dict[str, str] = {}
    query_map: dict[str, str] = {}
    before = len(problems)
    for parameter in parameters:
        if not isinstance(parameter, dict):
            problems.append(f"{where}: a parameter is not an object")
            continue
        place, original = parameter.get("in"), parameter.get("name")
        if place in {"header", "cookie"}:
            if parameter.get("required"):
                problems.append(
                    f"{where}: required {place} parameter {original!r} is not supported "
                    "(credentials go in the tool's auth setting)"
                )
            continue
        if place not in {"path", "query"} or not isinstance(original, str):
            problems.append(f"{where}: parameter {original!r} has an unknown 'in': {place!r}")
            continue
        argument = re.sub(r"[^A-Za-z0-9_]", "_", original)
        if not ARGUMENT_NAME.match(argument):
            problems.append(f"{where}: parameter name {original!r} cannot become an argument")
            continue
        if place == "path" and argument != original:
            problems.append(f"{where}: path parameter {original!r} must be a plain identifier")
            continue
        if argument in locations:
            problems.append(f"{where}: argument {argument!r} is declared twice")
            continue
        schema = parameter.get("schema") or {"type": "string"}
        if not isinstance(schema, dict):
            problems.append(f"{where}: parameter {original!r} has a schema that is not an object")
            continue
        schema = dict(schema)
        if parameter.get("description") and "description" not in schema:
            schema["description"] = _clip(parameter["description"])
        properties[argument] = schema
        locations[argument] = place
        if argument != original:
            query_map[argument] = original
        if place == "path" or parameter.get("required"):
            required.append(argument)
    if body is not None:
        content = body.get("content", {}) if isinstance(body, dict) else {}
        media = content.get("application/json") if isinstance(content, dict) else None
        body_schema = media.get("schema") if isinstance(media, dict) else None
        if not isinstance(body_schema, dict) or body_schema.get("type", "object") != "object":
            problems.append(
                f"{where}: only a JSON request body whose schema is an object is supported"
            )
        elif not isinstance(body_schema.get("properties") or {}, dict):
            problems.append(f"{where}: the request body's properties must be an object")
        else:
            for argument, prop in (body_schema.get("properties") or {}).items():
                if not ARGUMENT_NAME.match(str(argument)):
                    problems.append(f"{where}: body property {argument!r} is not an identifier")
                elif argument in locations:
                    problems.append(f"{where}: body property {argument!r} clashes with a parameter")
                else:
                    properties[argument] = prop
                    locations[argument] = "body"
            if body.get("required"):
                required.extend(
                    name
                    for name in body_schema.get("required") or []
                    if locations.get(name) == "body"
                )
    placeholders = re.findall(r"{([^}]*)}", path)
    undeclared = [p for p in placeholders if locations.get(p) != "path"]
    if undeclared:
        problems.append(f"{where}: path placeholders {undeclared} have no path parameter")
    if len(problems) > before:
        return None
    params_schema: dict[str, Any] = {
        "type": "object",
        "properties": _schema_clean(properties),
        "required": sorted(set(required), key=required.index),
        "additionalProperties": False,
    }
    _check_schema(params_schema, where, problems)
    if len(problems) > before:
        return None
    summary = operation.get("summary") or ""
    detail = operation.get("description") or ""
    description = _clip(f"{summary}. {detail}" if summary and detail else summary or detail)
    return ToolSpec(
        name=name,
        description=description or f"{method.upper()} {path}",
        method=method.upper(),
        endpoint_template=f"{base}{path}",
        params_schema=params_schema,
        param_locations=locations,
        query_map=query_map,
    )
