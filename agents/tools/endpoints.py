"""Tool endpoint templates and the endpoint allow-list.

An allow-list entry (``TOOL_ENDPOINT_ALLOWLIST``, or the sandbox base URL) names an origin
and a path prefix. A URL matches an entry when its scheme, host and port are the entry's
exactly (host lower-cased and IDNA-encoded, default ports filled in, a trailing dot
dropped) and its path starts with the entry's path on a segment boundary: ``/v1`` admits
``/v1`` and ``/v1/orders`` but not ``/v10``. URLs with userinfo, dot segments (also
percent-encoded ones, and ``..;`` or ``..\\`` that Tomcat and IIS resolve), backslashes, control
characters or percent-encodings that are not UTF-8 never match, and a URL that
cannot be parsed is refused with the reason instead of raising.

A template must fix the scheme, host and port: a placeholder may only come after the
first ``/`` that ends the authority, so the model can choose path segments and query
values (each URL-quoted whole) but never where the request goes.
"""

from __future__ import annotations

import ipaddress
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote

import httpx
from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}
HOST_NAME = re.compile(r"^[a-z0-9_.-]+$")
PLACEHOLDER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Scheme, "://", an authority without placeholders, then what ends the authority.
FIXED_ORIGIN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#{}\\]+[/?#]")
# Stands in for every path argument when a template is checked at save time.
SAMPLE_ARGUMENT = "sample-argument"
# Rounds of percent-decoding when looking for dot segments: ``%252e%252e`` is ``..`` to a
# server that decodes twice.
DECODE_ROUNDS = 3


class EndpointTemplateError(ValueError):
    """The template names an argument the call did not supply."""


class EndpointURLInvalid(ValueError):
    """The URL cannot be parsed into scheme, host, port and path."""


@dataclass(frozen=True)
class EndpointLocation:
    """A URL reduced to what the allow-list compares."""

    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]


def sandbox_base_url() -> str:
    return settings.SANDBOX_BASE_URL.rstrip("/")


def sandbox_host() -> str:
    """``host:port`` of the sandbox: the only loopback/private host the SSRF guard exempts."""
    try:
        location = endpoint_parse(sandbox_base_url())
    except EndpointURLInvalid:
        return ""
    host = f"[{location.host}]" if ":" in location.host else location.host
    return f"{host}:{location.port}"


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
    try:
        names = endpoint_placeholders(template)
    except ValueError as exc:
        raise EndpointTemplateError(f"malformed endpoint template: {exc}") from exc
    for name in names:
        if name not in remaining:
            raise EndpointTemplateError(f"missing path argument {name!r}")
        if str(remaining[name]).strip() in {"", ".", ".."}:
            raise EndpointTemplateError(f"path argument {name!r} may not be empty, '.' or '..'")
        url = url.replace("{" + name + "}", quote(str(remaining.pop(name)), safe=""))
    return url, remaining


def endpoint_parse(url: str) -> EndpointLocation:
    """Scheme, normalised host, port and decoded path segments of ``url``.

    Raises ``EndpointURLInvalid`` for anything httpx (the client that sends the request)
    cannot parse, and for hosts no resolver would accept.
    """
    if not isinstance(url, str) or not url:
        raise EndpointURLInvalid("empty URL")
    if "\\" in url or any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        raise EndpointURLInvalid("the URL contains a backslash, a space or a control character")
    try:
        parsed = httpx.URL(url)
        scheme = parsed.scheme
        raw_host = parsed.raw_host.decode("ascii")
        explicit_port = parsed.port
        raw_path = parsed.raw_path.decode("ascii").split("?", 1)[0]
        userinfo = parsed.userinfo
    except (httpx.InvalidURL, TypeError, ValueError, UnicodeError) as exc:
        raise EndpointURLInvalid(f"unparseable URL: {exc}") from exc
    if userinfo:
        raise EndpointURLInvalid("credentials in the URL (user:pass@) are not allowed")
    host = raw_host.lower()
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    if not host:
        raise EndpointURLInvalid("the URL has no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(unquote(host).split("%", 1)[0])
        except ValueError as exc:
            raise EndpointURLInvalid(f"malformed IPv6 address {host!r}") from exc
    elif not HOST_NAME.match(host) or ".." in host:
        raise EndpointURLInvalid(f"host {host!r} is not a valid host name")
    port = explicit_port if explicit_port is not None else DEFAULT_PORTS.get(scheme, 0)
    if scheme in DEFAULT_PORTS and not 0 < port < 65536:
        raise EndpointURLInvalid(f"invalid port {port}")
    return EndpointLocation(scheme=scheme, host=host, port=port, segments=_path_segments(raw_path))


def endpoint_refusal(url: str) -> str | None:
    """Why ``url`` may not be fetched by a tool, or None when an allow-list entry admits it."""
    try:
        location = endpoint_parse(url)
    except EndpointURLInvalid as exc:
        return str(exc)
    if location.scheme not in DEFAULT_PORTS:
        return f"scheme {location.scheme or '(none)'!r} is not allowed; use http or https"
    decoded = location.segments
    for _ in range(DECODE_ROUNDS):
        if any(_dot_segment(segment) for segment in decoded):
            return "the path contains a '.' or '..' segment (percent-encoded or not)"
        try:
            decoded = tuple(
                part for segment in decoded for part in _utf8_unquote(segment).split("/")
            )
        except UnicodeDecodeError:
            return "the path has a percent-encoding that is not UTF-8"
    entries = _allowlist_entries((sandbox_base_url(), *settings.TOOL_ENDPOINT_ALLOWLIST))
    if any(_entry_admits(entry, location) for entry in entries):
        return None
    return "endpoint is not on the allow-list"


def endpoint_allowed(url: str) -> bool:
    """True when an allow-list entry (or the sandbox base) admits ``url``."""
    return endpoint_refusal(url) is None


def endpoint_template_problem(template: str) -> str | None:
    """Why a tool's endpoint template cannot be saved, or None when it is acceptable."""
    if not template:
        return "An HTTP tool needs an endpoint."
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"Malformed template ({exc}); use {{name}} for an argument."
    for literal, name, spec, conversion in parts:
        if "{" in literal or "}" in literal:
            return "Literal braces ({{ or }}) are not allowed in an endpoint."
        if name is None:
            continue
        if not PLACEHOLDER_NAME.match(name) or spec or conversion:
            return f"Placeholder {{{name}}} must be a plain argument name, like {{order_id}}."
    if "{sandbox}" in template and not template.startswith("{sandbox}"):
        return "{sandbox} may only stand at the start of the endpoint."
    expanded = endpoint_expand_base(template)
    first_placeholder = expanded.find("{")
    if first_placeholder != -1 and not FIXED_ORIGIN.match(expanded[: first_placeholder + 1]):
        return (
            "The scheme, host and port must be fixed: a placeholder may only follow the "
            "'/' after the host (e.g. https://api.example.com/orders/{order_id})."
        )
    sample: dict[str, object] = {name: SAMPLE_ARGUMENT for name in endpoint_placeholders(template)}
    url, _ = endpoint_render(template, sample)
    refusal = endpoint_refusal(url)
    if refusal == "endpoint is not on the allow-list":
        return "Endpoint is not on TOOL_ENDPOINT_ALLOWLIST (scheme, host, port and path prefix)."
    if refusal:
        return f"Endpoint is not a usable URL: {refusal}."
    return None


def _path_segments(raw_path: str) -> tuple[str, ...]:
    # Decoded once, so an encoded '/' separates segments as it does for most servers.
    try:
        return tuple(_utf8_unquote(raw_path).split("/")[1:]) if raw_path else ()
    except UnicodeDecodeError as exc:
        # An overlong %C0%AE is '.' to some decoders and U+FFFD to others: refuse it.
        raise EndpointURLInvalid("the path has a percent-encoding that is not UTF-8") from exc


def _utf8_unquote(text: str) -> str:
    return unquote(text, errors="strict")


def _dot_segment(segment: str) -> bool:
    """True for a segment some server resolves as '.' or '..': IIS also splits on a
    backslash, and Tomcat drops a ';' path parameter, so ``..;`` and ``..\\x`` climb too."""
    return any(part.split(";", 1)[0] in {".", ".."} for part in segment.split("\\"))


@lru_cache(maxsize=32)
def _allowlist_entries(entries: tuple[str, ...]) -> tuple[EndpointLocation, ...]:
    parsed = []
    for entry in entries:
        if not entry:
            continue
        try:
            location = endpoint_parse(entry.strip())
        except EndpointURLInvalid:
            # An unusable entry admits nothing rather than failing every call.
            continue
        segments = list(location.segments)
        while segments and segments[-1] == "":
            segments.pop()
        parsed.append(
            EndpointLocation(
                scheme=location.scheme,
                host=location.host,
                port=location.port,
                segments=tuple(segments),
            )
        )
    return tuple(parsed)


def _entry_admits(entry: EndpointLocation, location: EndpointLocation) -> bool:
    return (
        entry.scheme == location.scheme
        and entry.host == location.host
        and entry.port == location.port
        and location.segments[: len(entry.segments)] == entry.segments
    )
