"""A Content-Security-Policy on every HTML page: scripts only from this origin.

Templates escape what they show (a customer's words, a model's reply, an ingested span's
names), and no page has an inline script; the policy is the second line should a template
ever slip. It is sent with ``text/html`` responses only (the API, OTLP and the sandbox's
JSON have nothing to run). A view that sets its own policy keeps its directives and gets
the rest from ``CONTENT_SECURITY_POLICY`` (the embeddable chat sets ``frame-ancestors``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from inspect import iscoroutinefunction
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

HEADER = "Content-Security-Policy"


def directives(policy: str) -> dict[str, str]:
    """``"a x; b y z"`` -> ``{"a": "x", "b": "y z"}`` (names lower-cased, order kept)."""
    parsed: dict[str, str] = {}
    for part in policy.split(";"):
        name, _, value = part.strip().partition(" ")
        if name:
            parsed.setdefault(name.lower(), value.strip())
    return parsed


def policy_applied(response: HttpResponseBase) -> HttpResponseBase:
    policy = settings.CONTENT_SECURITY_POLICY
    if not policy or not response.get("Content-Type", "").startswith("text/html"):
        return response
    merged = directives(policy)
    if HEADER in response:
        merged.update(directives(response[HEADER]))
    response[HEADER] = "; ".join(f"{name} {value}".strip() for name, value in merged.items())
    return response


@sync_and_async_middleware
def content_security_policy(get_response: Callable[[HttpRequest], Any]) -> Any:
    if iscoroutinefunction(get_response):
        respond: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = get_response

        async def middleware(request: HttpRequest) -> HttpResponseBase:
            return policy_applied(await respond(request))

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponseBase:
        return policy_applied(get_response(request))

    return sync_middleware
