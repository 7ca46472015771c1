"""Declarative contract drifts (``ContractDrift`` rows) in front of the sandbox views.

A drift changes what an endpoint accepts or answers without changing its view: a request
in the old contract is refused with the error body a real API would give (in the row's
layout: the sandbox's flat shape, ``{"detail"}``, ``{"errors": [...]}``, RFC 7807
problem+json, a FastAPI/pydantic 422 list, or plain text); a request in the new contract is
translated back to the old one for the view; the answer is rewritten where the drift
changes the response (a renamed field, renamed enum values, dates in another layout).

``unavailable`` and ``rate_limited`` model an upstream that asks to be retried: the first
request of each distinct call gets a 503 (or 429) with ``Retry-After``; the same call
repeated once that wait has passed is answered. The memory of asked waits is per process
and bounded (``MAX_REMEMBERED_CALLS``): the sandbox runs in one process per installation.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from sandbox.models import ContractDrift

MAX_REMEMBERED_CALLS = 10_000
# A repeat that comes later than this after the asked wait counts as a new call.
RETRY_WINDOW_S = 60.0
DRIFT_HEADER = "X-Sandbox-Drift"
_ISO_DATE = re.compile(
    r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?$"
)


@dataclass(frozen=True)
class DriftPlan:
    """An immutable snapshot of an enabled ContractDrift, safe to share between threads."""

    id: int
    endpoint: str
    kind: str
    param: str
    old: str
    new: str
    values: Any
    pattern: str
    layout: str
    retry_after_s: float

    @classmethod
    def from_row(cls, row: ContractDrift) -> DriftPlan:
        values = row.values
        if isinstance(values, list):
            values = tuple(values)
        elif isinstance(values, dict):
            values = tuple(sorted(values.items()))
        return cls(
            id=row.pk,
            endpoint=row.endpoint,
            kind=row.kind,
            param=row.param,
            old=row.old,
            new=row.new,
            values=values,
            pattern=row.pattern,
            layout=row.layout,
            retry_after_s=row.retry_after_s,
        )

    @property
    def mapping(self) -> dict[str, str]:
        return dict(self.values) if self.kind == ContractDrift.Kind.ENUM_RENAMED else {}


class Refused(Exception):
    """The request is in the old contract: answer with ``response``."""

    def __init__(self, response: HttpResponse) -> None:
        self.response = response


# --- error bodies ----------------------------------------------------------------------
_TITLES = {
    400: "Bad Request",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def drift_error(
    plan: DriftPlan,
    *,
    status: int,
    code: str,
    message: str,
    field: str | None,
    location: str | None,
) -> HttpResponse:
    """The error a real API would answer, in the drift's layout."""
    layout = plan.layout
    if layout == ContractDrift.Layout.PYDANTIC and status == 400:
        status = 422  # FastAPI answers request validation errors with 422
    if layout == ContractDrift.Layout.DETAIL:
        response: HttpResponse = JsonResponse({"detail": message}, status=status)
    elif layout == ContractDrift.Layout.ERRORS:
        response = JsonResponse(
            {"errors": [{"field": field, "message": message, "code": code}]}, status=status
        )
    elif layout == ContractDrift.Layout.PROBLEM:
        body: dict[str, Any] = {
            "type": f"https://sandbox.agent-ops.invalid/problems/{code}",
            "title": _TITLES.get(status, "Error"),
            "status": status,
            "detail": message,
        }
        if field:
            body["invalid-params"] = [{"name": field, "reason": message}]
        response = HttpResponse(
            json.dumps(body), status=status, content_type="application/problem+json"
        )
    elif layout == ContractDrift.Layout.PYDANTIC:
        loc: list[Any] = [location or "query", field] if field else [location or "query"]
        response = JsonResponse(
            {"detail": [{"loc": loc, "msg": message, "type": code}]}, status=status
        )
    elif layout == ContractDrift.Layout.TEXT:
        response = HttpResponse(
            f"{status} {_TITLES.get(status, 'Error')}: {message}\n",
            status=status,
            content_type="text/plain; charset=utf-8",
        )
    else:
        extra = {"field": field} if field else {}
        response = JsonResponse({"error": code, "detail": message, **extra}, status=status)
    response[DRIFT_HEADER] = plan.kind
    return response


def _refuse(
    plan: DriftPlan,
    message: str,
    *,
    field: str | None,
    location: str | None,
    code: str = "invalid_parameter",
) -> Refused:
    return Refused(
        drift_error(plan, status=400, code=code, message=message, field=field, location=location)
    )


def _with_pattern(plan: DriftPlan, message: str) -> str:
    if plan.pattern:
        return f"{message}; it must match the pattern '{plan.pattern}'"
    return message


# --- the request -------------------------------------------------------------------------
class _Call:
    """The arguments of one request, wherever they live, editable in place."""

    def __init__(self, request: HttpRequest, kwargs: dict[str, Any]) -> None:
        self.request = request
        self.kwargs = kwargs
        self.query = request.GET.copy()
        self.body: dict[str, Any] | None = None
        self.body_changed = False
        if request.method == "POST" and request.content_type == "application/json":
            try:
                parsed = json.loads(request.body or b"null")
            except ValueError:
                parsed = None
            self.body = parsed if isinstance(parsed, dict) else None

    def location(self, name: str) -> str:
        if name in self.kwargs:
            return "path"
        return "body" if self.request.method == "POST" else "query"

    def get(self, name: str) -> tuple[bool, Any]:
        where = self.location(name)
        if where == "path":
            return True, self.kwargs[name]
        if where == "query":
            return (name in self.query), self.query.get(name)
        if self.body is not None and name in self.body:
            return True, self.body[name]
        return False, None

    def set(self, name: str, value: Any) -> None:
        where = self.location(name)
        if where == "path":
            self.kwargs[name] = value
        elif where == "query":
            self.query[name] = str(value)
        elif self.body is not None:
            self.body[name] = value
            self.body_changed = True

    def pop(self, name: str) -> Any:
        where = self.location(name)
        if where == "query":
            value = self.query.get(name)
            self.query.pop(name, None)
            return value
        if where == "body" and self.body is not None:
            self.body_changed = True
            return self.body.pop(name, None)
        return None

    def commit(self) -> None:
        self.query._mutable = False
        self.request.GET = self.query  # type: ignore[assignment]
        if self.body_changed and self.body is not None:
            # The view reads request.body; a drift translated the body it will read.
            self.request._body = json.dumps(self.body).encode()

    def signature(self) -> str:
        return json.dumps(
            [
                self.request.path,
                sorted(self.request.GET.lists()),
                self.request.body.decode("utf-8", "replace")[:2000]
                if self.request.method == "POST"
                else "",
            ],
            sort_keys=True,
        )


def _text_value(plan: DriftPlan, call: _Call) -> str | None:
    present, value = call.get(plan.param)
    if not present or value is None:
        return None
    return value if isinstance(value, str) else None


def _request_value_format(plan: DriftPlan, call: _Call) -> None:
    kind, Kind = plan.kind, ContractDrift.Kind
    value = _text_value(plan, call)
    if value is None:
        return
    field, where = plan.param, call.location(plan.param)
    if kind == Kind.PREFIX_DROPPED:
        if value.startswith(plan.old):
            raise _refuse(
                plan,
                _with_pattern(plan, f"{field} must not start with '{plan.old}'"),
                field=field,
                location=where,
            )
        call.set(field, plan.old + value)
    elif kind == Kind.PREFIX_CHANGED:
        if value.startswith(plan.old) or not value.startswith(plan.new):
            raise _refuse(
                plan,
                _with_pattern(plan, f"{field} must start with '{plan.new}'"),
                field=field,
                location=where,
            )
        call.set(field, plan.old + value[len(plan.new) :])
    elif kind == Kind.PREFIX_ADDED:
        if not value.startswith(plan.new):
            raise _refuse(
                plan,
                _with_pattern(plan, f"{field} must start with '{plan.new}'"),
                field=field,
                location=where,
            )
        call.set(field, value[len(plan.new) :])
    elif kind == Kind.CASE:
        wanted = value.lower() if plan.new == "lower" else value.upper()
        if value != wanted:
            raise _refuse(
                plan,
                _with_pattern(plan, f"{field} must be {plan.new}case"),
                field=field,
                location=where,
            )
        call.set(field, value.lower() if plan.old == "lower" else value.upper())
    elif kind == Kind.SEPARATOR:
        if plan.old in value:
            message = (
                _with_pattern(plan, f"{field} has an invalid format")
                if plan.pattern
                else f"{field} must use '{plan.new}' as its separator, not '{plan.old}'"
            )
            raise _refuse(plan, message, field=field, location=where)
        call.set(field, value.replace(plan.new, plan.old))


def _request_integer(plan: DriftPlan, call: _Call) -> None:
    present, value = call.get(plan.param)
    if not present or value is None:
        return
    where = call.location(plan.param)
    digits: str | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        digits = str(value)
    elif isinstance(value, str) and value.isdigit() and where != "body":
        digits = value  # a path or a query string carries digits, not a JSON type
    if digits is None:
        raise Refused(
            drift_error(
                plan,
                status=400,
                code="type_error",
                message=f"{plan.param} must be an integer, got {value!r}",
                field=plan.param,
                location=where,
            )
        )
    # The view still takes the old, prefixed form (``old``, e.g. "#W").
    call.set(plan.param, plan.old + digits)


def _request_param_renamed(plan: DriftPlan, call: _Call) -> None:
    where = call.location(plan.old)
    old_present, _ = call.get(plan.old)
    new_present, new_value = call.get(plan.new)
    if old_present:
        raise _refuse(
            plan,
            f"unknown {'query ' if where == 'query' else ''}parameter '{plan.old}': "
            f"it was renamed to '{plan.new}'",
            field=plan.old,
            location=where,
            code="unknown_parameter",
        )
    if new_present:
        call.pop(plan.new)
        call.set(plan.old, new_value)


def _request_param_required(plan: DriftPlan, call: _Call) -> None:
    present, value = call.get(plan.new)
    where = call.location(plan.new)
    accepted = [str(v) for v in plan.values]
    listing = ", ".join(accepted)
    if not present or value in (None, ""):
        raise _refuse(
            plan,
            f"{plan.new} is required; allowed values are {listing}.",
            field=plan.new,
            location=where,
            code="missing",
        )
    if str(value) not in accepted:
        raise _refuse(plan, f"{plan.new} must be one of {listing}.", field=plan.new, location=where)
    call.pop(plan.new)


def _request_enum(plan: DriftPlan, call: _Call) -> None:
    value = _text_value(plan, call)
    if value is None:
        return
    mapping = plan.mapping
    if value in mapping:
        allowed = ", ".join(sorted(mapping.values()))
        raise _refuse(
            plan,
            f"{plan.param} must be one of {allowed}.",
            field=plan.param,
            location=call.location(plan.param),
        )
    back = {new: old for old, new in mapping.items()}
    if value in back:
        call.set(plan.param, back[value])


def _request_date(plan: DriftPlan, call: _Call) -> None:
    if not plan.param:
        return
    value = _text_value(plan, call)
    if value is None:
        return
    try:
        parsed = datetime.strptime(value, plan.new)
    except ValueError:
        example = datetime(2026, 11, 3).strftime(plan.new)
        raise _refuse(
            plan,
            f"{plan.param} must be a date formatted as '{plan.new}' (e.g. {example})",
            field=plan.param,
            location=call.location(plan.param),
        ) from None
    call.set(plan.param, parsed.date().isoformat())


class _RetryMemory:
    """When each call was last asked to wait, per drift; bounded, oldest forgotten first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: OrderedDict[tuple[int, str], float] = OrderedDict()

    def clear(self) -> None:
        with self._lock:
            self._asked.clear()

    def answer_now(self, key: tuple[int, str], wait: float) -> tuple[bool, float]:
        """(answer the call now, seconds still to wait)."""
        now = time.monotonic()
        with self._lock:
            asked = self._asked.get(key)
            if asked is not None and now - asked <= wait + RETRY_WINDOW_S:
                remaining = wait - (now - asked)
                if remaining <= 0:
                    del self._asked[key]
                    return True, 0.0
                return False, remaining
            self._asked[key] = now
            self._asked.move_to_end(key)
            while len(self._asked) > MAX_REMEMBERED_CALLS:
                self._asked.popitem(last=False)
            return False, wait


_retries = _RetryMemory()


def drift_memory_clear() -> None:
    """Forget every asked wait (tests and benchmarks start from a clean upstream)."""
    _retries.clear()


def _request_retry(plan: DriftPlan, call: _Call) -> None:
    answer, wait = _retries.answer_now((plan.id, call.signature()), plan.retry_after_s)
    if answer:
        return
    seconds = max(1, round(wait + 0.499))  # Retry-After is whole seconds
    if plan.kind == ContractDrift.Kind.RATE_LIMITED:
        status, code, message = 429, "rate_limited", f"rate limit exceeded, retry after {seconds} s"
    else:
        status, code, message = (
            503,
            "service_unavailable",
            f"the service is temporarily unavailable, retry after {seconds} s",
        )
    response = drift_error(
        plan, status=status, code=code, message=message, field=None, location=None
    )
    response["Retry-After"] = str(seconds)
    raise Refused(response)


_REQUEST_SIDE = {
    ContractDrift.Kind.PREFIX_DROPPED: _request_value_format,
    ContractDrift.Kind.PREFIX_CHANGED: _request_value_format,
    ContractDrift.Kind.PREFIX_ADDED: _request_value_format,
    ContractDrift.Kind.CASE: _request_value_format,
    ContractDrift.Kind.SEPARATOR: _request_value_format,
    ContractDrift.Kind.INTEGER: _request_integer,
    ContractDrift.Kind.PARAM_RENAMED: _request_param_renamed,
    ContractDrift.Kind.PARAM_REQUIRED: _request_param_required,
    ContractDrift.Kind.ENUM_RENAMED: _request_enum,
    ContractDrift.Kind.DATE_FORMAT: _request_date,
    ContractDrift.Kind.UNAVAILABLE: _request_retry,
    ContractDrift.Kind.RATE_LIMITED: _request_retry,
}


def drifts_apply_request(
    plans: tuple[DriftPlan, ...], request: HttpRequest, kwargs: dict[str, Any]
) -> HttpResponse | None:
    """Translate ``request`` (and the view's ``kwargs``) from the drifted contract to the
    view's; the error response when the request is in the old contract."""
    call = _Call(request, kwargs)
    try:
        for plan in plans:
            handler = _REQUEST_SIDE.get(plan.kind)  # type: ignore[call-overload]
            if handler is not None:
                handler(plan, call)
    except Refused as refused:
        return refused.response
    call.commit()
    return None


# --- the response ------------------------------------------------------------------------
def _walk(data: Any, visit: Any) -> Any:
    if isinstance(data, dict):
        return {key: _walk(visit(key, value), visit) for key, value in data.items()}
    if isinstance(data, list):
        return [_walk(item, visit) for item in data]
    return data


def _rewrite_body(plan: DriftPlan, body: Any) -> Any:
    kind = plan.kind
    if kind == ContractDrift.Kind.FIELD_RENAMED and isinstance(body, dict) and plan.old in body:
        return {(plan.new if key == plan.old else key): value for key, value in body.items()}
    if kind == ContractDrift.Kind.ENUM_RENAMED:
        mapping = plan.mapping

        def rename(key: str, value: Any) -> Any:
            if key == plan.param and isinstance(value, str):
                return mapping.get(value, value)
            return value

        return _walk(body, rename)
    if kind == ContractDrift.Kind.DATE_FORMAT:

        def reformat(key: str, value: Any) -> Any:
            if isinstance(value, str) and _ISO_DATE.match(value):
                try:
                    return datetime.fromisoformat(value.replace("Z", "+00:00")).strftime(plan.new)
                except ValueError:
                    return value
            return value

        return _walk(body, reformat)
    return body


def drifts_apply_response(plans: tuple[DriftPlan, ...], response: HttpResponse) -> HttpResponse:
    """Rewrite a successful JSON answer as the drifted contract returns it."""
    shaping = [
        p
        for p in plans
        if p.kind
        in (
            ContractDrift.Kind.FIELD_RENAMED,
            ContractDrift.Kind.ENUM_RENAMED,
            ContractDrift.Kind.DATE_FORMAT,
        )
    ]
    if plans:
        response[DRIFT_HEADER] = ",".join(sorted({p.kind for p in plans}))
    if (
        not shaping
        or not 200 <= response.status_code < 300
        or response.get("Content-Type") != "application/json"
    ):
        return response
    body = json.loads(response.content)
    for plan in shaping:
        body = _rewrite_body(plan, body)
    drifted = JsonResponse(body, status=response.status_code, safe=False)
    for header, value in response.items():
        if header.lower() not in ("content-type", "content-length"):
            drifted[header] = value
    return drifted
