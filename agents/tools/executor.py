"""The tool executor: whitelist, JSON Schema + adapters, allow-list, SSRF guard, timeout,
size cap, standard error codes. Nothing the model says reaches the network unchecked.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from agents.observation import response_text
from agents.tools.adapters import ADAPTERS, adapt_arguments
from agents.tools.credentials import (
    CredentialMissing,
    ToolAuth,
    credential_request_parts,
    credential_resolve,
)
from agents.tools.endpoints import (
    EndpointTemplateError,
    endpoint_allowed,
    endpoint_refusal,
    endpoint_render,
    sandbox_host,
)
from agents.tools.registry import registered_python_tool
from agents.tools.ssrf import (
    EndpointNotAllowed,
    ResponseTooLarge,
    SSRFBlocked,
    TooManyRedirects,
    UnparseableURL,
    ssrf_safe_request,
)
from traces.redaction import redact_known_secrets, redact_text, redact_value, storable_text


class ExecutorCode:
    """Standard result codes of a tool call."""

    OK = "OK"
    TOOL_NOT_ALLOWED = "TOOL_NOT_ALLOWED"
    TOOL_SUSPENDED = "TOOL_SUSPENDED"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    INVALID_ENDPOINT = "INVALID_ENDPOINT"
    SSRF_BLOCKED = "SSRF_BLOCKED"
    TIMEOUT = "TIMEOUT"
    CONNECTION_ERROR = "CONNECTION_ERROR"
    RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"
    HTTP_ERROR = "HTTP_ERROR"
    # A 2xx whose body is an error ({"error": "not_found"}, {"ok": false}), an HTML page, or
    # not the JSON it declares: a failed call, whatever the status says.
    BAD_RESPONSE = "BAD_RESPONSE"
    TOOL_ERROR = "TOOL_ERROR"
    CREDENTIAL_MISSING = "CREDENTIAL_MISSING"


# Keys an error envelope carries besides the error itself; a body with any other key holds
# data, whatever its "error" says.
_ERROR_ENVELOPE_KEYS = frozenset(
    {
        "error",
        "errors",
        "message",
        "msg",
        "code",
        "status",
        "status_code",
        "statuscode",
        "detail",
        "details",
        "ok",
        "success",
        "request_id",
        "requestid",
        "trace_id",
        "timestamp",
        "path",
        "type",
        "title",
    }
)
_ERROR_STATUSES = frozenset({"error", "fail", "failed", "failure"})


def response_body_problem(body: str, content_type: str) -> str:
    """Why a 2xx response is no result after all, or "": an HTML page where the tool reads
    JSON, a body that is not the JSON it declares, or an error envelope (``{"error": …}``,
    ``{"ok": false}``, ``{"status": "error"}``) with no data beside it. Plain text and an
    empty body pass: the observation shows them as they are."""
    stripped = body.lstrip()
    if not stripped:
        return ""
    media = content_type.split(";")[0].strip().lower()
    if "html" in media or stripped[:14].lower().startswith(("<!doctype html", "<html")):
        return "an HTML page, not the JSON the tool reads"
    declared = media.endswith("json")
    if not (declared or stripped[0] in "{["):
        return ""
    try:
        data = json.loads(body, strict=False)
    except ValueError as exc:
        # Only a body that says it is JSON is held to it ("[INFO] …" is plain text).
        return f"a body that is not valid JSON ({getattr(exc, 'msg', exc)})" if declared else ""
    if not isinstance(data, dict):
        return ""
    failed = data.get("ok") is False or data.get("success") is False
    keys = {str(key).lower() for key in data}
    if data.get("data") in (None, {}, []):
        keys.discard("data")  # GraphQL's shape: {"errors": […], "data": null}
    envelope = keys <= _ERROR_ENVELOPE_KEYS
    error = data.get("error") or data.get("errors")
    status = data.get("status")
    if envelope and (
        error or (isinstance(status, str) and status.strip().lower() in _ERROR_STATUSES)
    ):
        failed = True
    if not failed:
        return ""
    return "an error in its body: " + _error_text(data)[:300]


def _holds_nothing(value: Any, *, depth: int = 0) -> bool:
    """Whether ``value`` carries no data: None, "", an empty container, or (one envelope
    level deep) a mapping whose every value holds nothing. 0 and false are data."""
    if value is None or value == "" or value == [] or value == {}:
        return True
    if isinstance(value, dict) and depth < 1:
        return all(_holds_nothing(item, depth=depth + 1) for item in value.values())
    return False


def response_fields_problem(
    body: str, content_type: str, key_fields: Sequence[str], *, status: int = 200
) -> str:
    """Why a 2xx response holds nothing of what the tool returns, or "": for a tool that
    names its key fields (``status``, ``shipping.carrier``), an empty body (a 204 or 205
    says "no content" on purpose), or a JSON object that has none of their top-level names
    and holds no data at all (``{}``, ``{"data": {}}``, ``{"items": []}``). Such a "success"
    answered "I found order #W…" from nothing. Key fields stay a hint otherwise: an
    envelope (``{"data": {…}}``), another field name with data, a list (even empty), or an
    empty list under a key field (no results) are results."""
    tops = list(dict.fromkeys(field.split(".")[0] for field in key_fields if field))
    if not tops:
        return ""
    named = ", ".join(tops[:6]) + (", …" if len(tops) > 6 else "")
    if not body.strip():
        return "" if status in (204, 205) else f"an empty body, where the tool returns {named}"
    media = content_type.split(";")[0].strip().lower()
    if not (media.endswith("json") or body.lstrip()[:1] == "{"):
        return ""
    try:
        data = json.loads(body, strict=False)
    except ValueError:
        return ""  # response_body_problem speaks for a body that says it is JSON
    if isinstance(data, dict) and not any(top in data for top in tops) and _holds_nothing(data):
        shown = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        shown = shown if len(shown) <= 120 else shown[:120] + "…"
        return f"no data, where the tool returns {named}: {shown}"
    return ""


def _identifier(name: str) -> bool:
    """An argument that names one thing: ``id``, ``order_id``, ``orderId``, ``sku``."""
    lowered = name.lower()
    return (
        lowered in ("id", "sku")
        or lowered.endswith(("_id", "-id", "_number", "_sku"))
        or (name.endswith("Id") and len(name) > 2)
    )


def _id_key(value: Any) -> str:
    return re.sub(r"[^0-9a-z]", "", str(value).lower())


def response_identity_problem(arguments: dict[str, Any], body: str) -> str:
    """Why a 2xx JSON object answers about something else, or "": an identifier argument
    (``order_id``, ``sku``) that the body names at its top level with another value (an
    upstream that answered for order #W9999999 when #W1001549 was asked for). Forms of one
    id match (``#W1000001`` and ``1000001``): one normalised value ends with the other."""
    candidates = {
        name: value
        for name, value in arguments.items()
        if _identifier(name) and isinstance(value, str | int) and not isinstance(value, bool)
    }
    if not candidates or not body.lstrip().startswith("{"):
        return ""
    try:
        data = json.loads(body, strict=False)
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    for name, asked in candidates.items():
        got = data.get(name)
        if not isinstance(got, str | int) or isinstance(got, bool):
            continue
        asked_key, got_key = _id_key(asked), _id_key(got)
        if not asked_key or not got_key:
            continue
        short, long = sorted((asked_key, got_key), key=len)
        if not long.endswith(short):
            return (
                f"an answer about {name} {str(got)[:60]!r}, not the {str(asked)[:60]!r} asked for"
            )
    return ""


def _error_text(data: dict[str, Any]) -> str:
    for key in ("error", "errors", "message", "detail", "msg", "title", "status"):
        value = data.get(key)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, dict):
            value = value.get("message") or value.get("code") or value.get("type") or value
        if value not in (None, "", [], {}):
            return value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(data, default=str)


def redact(value: Any) -> Any:
    """The call's arguments as they may be recorded: secret-looking values replaced."""
    return redact_value(value)


IDEMPOTENCY_HEADER = "Idempotency-Key"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class ToolSnapshot:
    """What the executor needs of a Tool row, read once per run."""

    name: str
    description: str
    kind: str
    params_schema: dict[str, Any]
    endpoint_template: str
    method: str
    timeout_seconds: float
    key_fields: tuple[str, ...] = ()
    query_map: dict[str, str] = field(default_factory=dict)
    param_locations: dict[str, str] = field(default_factory=dict)
    adapters: tuple[str, ...] = ()
    suspended: bool = False
    auth: ToolAuth | None = None
    auth_error: str = ""


@dataclass(frozen=True)
class ValidatedCall:
    tool: ToolSnapshot
    arguments: dict[str, Any]
    adapters_fired: list[dict[str, Any]]
    # Where arguments a policy repair renamed or added go ("path", "query", "body"),
    # over the tool's own param_locations.
    param_locations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidationFailure:
    code: str
    detail: str
    adapters_fired: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ToolCallResult:
    """The outcome of one executed call; ``code`` is OK or a standard error code."""

    code: str
    ok: bool
    status_code: int | None
    endpoint: str
    request_payload: dict[str, Any]
    body: str
    response_size: int
    latency_ms: int
    content_type: str = "application/json"
    detail: str = ""
    # Seconds the API asked the client to wait (its Retry-After header), if it said.
    retry_after_s: float | None = None
    # Why the response may be out of date, as its headers say ("" when they do not).
    stale: str = ""


def response_staleness(headers: Any) -> str:
    """Why a response's headers say it may be out of date, or "": a ``Warning`` of the
    11x stale family (RFC 7234: 110 stale, 111 revalidation failed, 112 disconnected), an
    ``Age`` past the ``max-age`` it was served under, or a cache's ``X-Cache: STALE``."""
    reasons = []
    warning = headers.get("warning") or ""
    if re.match(r"\s*11[0-3]\b", warning):
        reasons.append(f"Warning: {warning.strip()[:80]}")
    age = headers.get("age") or ""
    max_age = re.search(
        r"(?:^|[,\s])(?:s-)?max-age\s*=\s*(\d+)", headers.get("cache-control") or ""
    )
    if age.strip().isdigit() and max_age and int(age) > int(max_age.group(1)):
        reasons.append(f"Age {int(age)} s, past its max-age of {max_age.group(1)} s")
    if "stale" in (headers.get("x-cache") or "").lower():
        reasons.append(f"X-Cache: {headers.get('x-cache').strip()[:40]}")
    return "; ".join(reasons)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3);
    None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if re.fullmatch(r"\d{1,7}(\.\d+)?", value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    # A date names a whole second, and the API's own deadline may fall anywhere inside it:
    # waiting the exact difference (1.1-1.8 s for "in 2 s") came back before it was ready.
    return max(0.0, (when - datetime.now(UTC)).total_seconds() + 1)


class ToolExecutor:
    """Validates and runs the tool calls of one agent run."""

    def __init__(
        self,
        *,
        tools: dict[str, ToolSnapshot],
        http_client: httpx.AsyncClient,
        max_response_bytes: int,
        max_redirects: int,
    ) -> None:
        self.tools = tools
        self.http_client = http_client
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects

    def validate(self, name: str, arguments: Any) -> ValidatedCall | ValidationFailure:
        """Whitelist, suspension, then JSON Schema (with adapters repairing what they can)."""
        tool = self.tools.get(name)
        if tool is None:
            allowed = ", ".join(sorted(self.tools)) or "(none)"
            return ValidationFailure(
                ExecutorCode.TOOL_NOT_ALLOWED,
                f"tool {name!r} is not on this agent's whitelist; allowed: {allowed}",
            )
        if tool.suspended:
            return ValidationFailure(
                ExecutorCode.TOOL_SUSPENDED,
                f"tool {name!r} is suspended after repeated timeouts; use another way",
            )
        if not isinstance(arguments, dict):
            return ValidationFailure(
                ExecutorCode.SCHEMA_VIOLATION, "validator=type path=(root): expected an object"
            )
        # Unknown names (a typo in admin) are ignored rather than failing every call.
        enabled = [name for name in tool.adapters if name in ADAPTERS]
        adapted, firings, issues = adapt_arguments(
            schema=tool.params_schema, arguments=arguments, enabled=enabled
        )
        fired = [
            {"adapter": f.adapter, "path": f.path, "before": f.before, "after": f.after}
            for f in firings
        ]
        if issues:
            detail = "; ".join(
                f"validator={issue.validator} path={issue.path or '(root)'}: {issue.message}"
                for issue in issues
            )
            return ValidationFailure(ExecutorCode.SCHEMA_VIOLATION, detail, fired)
        return ValidatedCall(tool=tool, arguments=adapted, adapters_fired=fired)

    async def execute(self, call: ValidatedCall, *, idempotency_key: str = "") -> ToolCallResult:
        """Run the call. ``idempotency_key``: sent as ``Idempotency-Key`` with a method that
        changes something (POST, PUT, PATCH, DELETE), so that an API which honours it runs
        a call repeated after a crash or a retry only once."""
        if call.tool.kind == "python":
            return await self._execute_python(call)
        return await self._execute_http(call, idempotency_key)

    async def _execute_python(self, call: ValidatedCall) -> ToolCallResult:
        definition = registered_python_tool(call.tool.name)
        started = time.perf_counter()
        payload = redact(call.arguments)
        if definition is None or definition.func is None:
            return self._result(
                ExecutorCode.TOOL_ERROR,
                started,
                f"python:{call.tool.name}",
                payload,
                None,
                "",
                detail="no registered function for this tool",
            )
        func = definition.func
        try:
            if inspect.iscoroutinefunction(func):
                value = await asyncio.wait_for(func(**call.arguments), call.tool.timeout_seconds)
            else:
                value = await asyncio.wait_for(
                    asyncio.to_thread(func, **call.arguments), call.tool.timeout_seconds
                )
        except TimeoutError:
            return self._result(
                ExecutorCode.TIMEOUT,
                started,
                f"python:{call.tool.name}",
                payload,
                None,
                "",
                detail=f"no result within {call.tool.timeout_seconds:g}s",
            )
        except Exception as exc:  # a tool's own bug must not kill the run
            return self._result(
                ExecutorCode.TOOL_ERROR,
                started,
                f"python:{call.tool.name}",
                payload,
                None,
                "",
                detail=f"{type(exc).__name__}: {exc}",
            )
        body = json.dumps(value, default=str, ensure_ascii=False)
        return self._result(
            ExecutorCode.OK, started, f"python:{call.tool.name}", payload, 200, body
        )

    async def _execute_http(self, call: ValidatedCall, idempotency_key: str = "") -> ToolCallResult:
        tool = call.tool
        started = time.perf_counter()
        try:
            url, rest = endpoint_render(tool.endpoint_template, call.arguments)
        except EndpointTemplateError as exc:
            return self._result(
                ExecutorCode.INVALID_ENDPOINT,
                started,
                tool.endpoint_template,
                redact(call.arguments),
                None,
                "",
                detail=str(exc),
            )
        payload = redact(call.arguments)
        refusal = endpoint_refusal(url)
        if refusal is not None:
            return self._result(
                ExecutorCode.INVALID_ENDPOINT, started, url, payload, None, "", detail=refusal
            )
        headers: dict[str, str] = {}
        credential_params: dict[str, str] = {}
        auth_error = tool.auth_error
        secret = ""
        if not auth_error and tool.auth is not None:
            try:
                secret = credential_resolve(tool.auth)
            except CredentialMissing as exc:
                auth_error = str(exc)
        if auth_error:
            return self._result(
                ExecutorCode.CREDENTIAL_MISSING,
                started,
                url,
                payload,
                None,
                "",
                detail=f"tool {tool.name!r} cannot authenticate: {auth_error}",
            )
        if tool.auth is not None:
            headers, credential_params = credential_request_parts(tool.auth, secret)
        request_kwargs: dict[str, Any] = {"timeout": tool.timeout_seconds}
        sent_headers = dict(headers)
        if idempotency_key and tool.method.upper() not in SAFE_METHODS:
            sent_headers.setdefault(IDEMPOTENCY_HEADER, idempotency_key)
        if sent_headers:
            request_kwargs["headers"] = sent_headers
        locations = dict(tool.param_locations)
        if call.param_locations:
            if not locations:
                # The default placement made explicit, so a repair can move one argument.
                default = "query" if tool.method == "GET" else "body"
                locations = {name: default for name in rest}
            locations.update(call.param_locations)
        if locations:
            # Imported tools record where each argument goes; an unlisted one goes nowhere.
            query_args = {k: v for k, v in rest.items() if locations.get(k) == "query"}
            body_args = {k: v for k, v in rest.items() if locations.get(k) == "body"}
        elif tool.method == "GET":
            query_args, body_args = rest, {}
        else:
            query_args, body_args = {}, rest
        params = {
            **{
                tool.query_map.get(key, key): json.dumps(value)
                if isinstance(value, bool)
                else value
                for key, value in query_args.items()
            },
            # After the model's arguments: an argument can never replace the credential.
            **credential_params,
        }
        if params:
            request_kwargs["params"] = params
        if body_args or (tool.method in {"POST", "PUT", "PATCH"} and not tool.param_locations):
            request_kwargs["json"] = {
                tool.query_map.get(key, key): value for key, value in body_args.items()
            }
        try:
            response = await asyncio.wait_for(
                ssrf_safe_request(
                    self.http_client,
                    tool.method,
                    url,
                    exempt_hosts=frozenset({sandbox_host()}),
                    is_allowed_url=endpoint_allowed,
                    max_redirects=self.max_redirects,
                    max_bytes=self.max_response_bytes,
                    credential_headers=frozenset(name.lower() for name in headers),
                    **request_kwargs,
                ),
                # The per-operation httpx timeout doesn't bound a slow drip; this does.
                timeout=tool.timeout_seconds,
            )
        except (TimeoutError, httpx.TimeoutException):
            return self._result(
                ExecutorCode.TIMEOUT,
                started,
                url,
                payload,
                None,
                "",
                detail=f"no response within {tool.timeout_seconds:g}s",
            )
        except SSRFBlocked as exc:
            return self._result(
                ExecutorCode.SSRF_BLOCKED, started, url, payload, None, "", detail=exc.reason
            )
        except (EndpointNotAllowed, TooManyRedirects, UnparseableURL) as exc:
            return self._result(
                ExecutorCode.INVALID_ENDPOINT, started, url, payload, None, "", detail=str(exc)
            )
        except httpx.InvalidURL as exc:
            # httpx refusing a URL the checks above let through is still a bad endpoint,
            # never a crash of the run.
            return self._result(
                ExecutorCode.INVALID_ENDPOINT,
                started,
                url,
                payload,
                None,
                "",
                detail=f"unparseable URL: {exc}",
            )
        except ResponseTooLarge as exc:
            return self._result(
                ExecutorCode.RESPONSE_TOO_LARGE, started, url, payload, None, "", detail=str(exc)
            )
        except httpx.DecodingError as exc:
            # The server answered, with a body its Content-Encoding does not decode (a bad
            # gzip stream): a broken response, not a lost connection.
            return self._result(
                ExecutorCode.BAD_RESPONSE,
                started,
                url,
                payload,
                None,
                "",
                detail=f"the API sent a body that does not decode as its Content-Encoding: {exc}",
            )
        except httpx.HTTPError as exc:
            return self._result(
                ExecutorCode.CONNECTION_ERROR,
                started,
                url,
                payload,
                None,
                "",
                detail=f"{type(exc).__name__}: "
                + (str(exc) or "the connection closed before the response was complete"),
            )
        content_type = response.headers.get("content-type", "")
        # The charset the response declares (latin-1 APIs exist), and no NUL: the body goes
        # to the model, the Step and the result cache, and PostgreSQL stores no NUL.
        body = storable_text(response_text(response.body, content_type))
        code = ExecutorCode.OK if 200 <= response.status_code < 300 else ExecutorCode.HTTP_ERROR
        detail = ""
        if code == ExecutorCode.OK:
            problem = (
                response_body_problem(body, content_type)
                or response_fields_problem(
                    body, content_type, call.tool.key_fields, status=response.status_code
                )
                or response_identity_problem(call.arguments, body)
            )
            if problem:
                code = ExecutorCode.BAD_RESPONSE
                detail = f"the API answered {response.status_code} with {problem}"
        return self._result(
            code,
            started,
            url,
            payload,
            response.status_code,
            body,
            detail=detail,
            content_type=content_type,
            size=len(response.body),
            retry_after_s=retry_after_seconds(response.headers.get("retry-after")),
            stale=response_staleness(response.headers) if code == ExecutorCode.OK else "",
        )

    @staticmethod
    def _result(
        code: str,
        started: float,
        endpoint: str,
        payload: dict[str, Any],
        status_code: int | None,
        body: str,
        *,
        detail: str = "",
        content_type: str = "application/json",
        size: int | None = None,
        retry_after_s: float | None = None,
        stale: str = "",
    ) -> ToolCallResult:
        # A tool credential echoed in a body or an error must reach neither the model
        # (the observation) nor the trace store.
        return ToolCallResult(
            code=code,
            ok=code == ExecutorCode.OK,
            status_code=status_code,
            endpoint=endpoint,
            request_payload=payload,
            body=redact_known_secrets(body),
            response_size=len(body.encode()) if size is None else size,
            latency_ms=int((time.perf_counter() - started) * 1000),
            content_type=content_type,
            detail=redact_text(detail),
            retry_after_s=retry_after_s,
            stale=stale,
        )
