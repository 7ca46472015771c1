"""Tool endpoint templates and the endpoint allow-list."""

from __future__ import annotations

import string
from urllib.parse import quote, urlsplit

from django.conf import settings


class EndpointTemplateError(ValueError):
    """The template names an argument the call did not supply."""


def sandbox_base_url() -> str:
    return settings.SANDBOX_BASE_URL.rstrip("/")


def sandbox_host() -> str:
    """``host:port`` of the sandbox: the only loopback/private host the SSRF guard exempts."""
    parts = urlsplit(sandbox_base_url())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{(parts.hostname or '').lower()}:{port}"


def endpoint_expand_base(template: str) -> str:
    return template.replace("{sandbox}", sandbox_base_url())


def endpoint_placeholders(template: str) -> list[str]:
    return [
        name
        for _, name, _, _ in string.Formatter().parse(template.replace("{sandbox}", ""))
        if name
    ]


def endpoint_render(template: str, arguments: dict[str, object]) -> tuple[str, dict[str, object]]:
    """Fill path placeholders (each value URL-quoted, so no path traversal); return the rest."""
    url = endpoint_expand_base(template)
    remaining = dict(arguments)
    for name in endpoint_placeholders(template):
        if name not in remaining:
            raise EndpointTemplateError(f"missing path argument {name!r}")
        if str(remaining[name]).strip() in {"", ".", ".."}:
            raise EndpointTemplateError(f"path argument {name!r} may not be empty, '.' or '..'")
        url = url.replace("{" + name + "}", quote(str(remaining.pop(name)), safe=""))
    return url, remaining


def endpoint_allowed(url: str) -> bool:
    """True when ``url`` starts with the sandbox base or an allow-listed prefix."""
    prefixes = [sandbox_base_url() + "/", *settings.TOOL_ENDPOINT_ALLOWLIST]
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or parts.username or parts.password:
        return False
    return any(url.startswith(prefix) for prefix in prefixes if prefix)
