"""SSRF guard for every outbound HTTP call a tool makes.

A model chooses tool arguments, and tool endpoints interpolate them into URLs, so any URL
the runtime fetches is attacker-influenced. This module refuses URLs whose host is (or
resolves to) an address inside the machine, the private network or a cloud metadata
service, and performs requests that re-check every redirect hop and cap the body size.

The check before each request gives a clear early error; ``SSRFGuardedBackend`` makes it
hold at the moment of connecting too. A client built with it (``tool_http_client``)
resolves each host itself when it opens a connection, checks every address again, and
connects to the address it checked, so a DNS answer that changes between the check and the
connection (rebinding) cannot reach a blocked address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio.to_thread
import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Iterable[tuple[Any, ...]]]

ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

CLOUD_METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    }
)
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")
# NAT64 prefixes embed an IPv4 address in the low 32 bits; a gateway would forward to it.
NAT64_NETWORKS = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))

# After IDNA encoding a real host name is plain ASCII letters, digits, '-', '_' and '.';
# anything else (percent escapes, spaces, backslashes) is a parser-confusion attempt.
HOST_NAME_PATTERN = re.compile(r"^[a-z0-9_.-]+$")
IPV4_NUMBER_PATTERN = re.compile(r"^(0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")
# Headers that authenticate to the original host and must not follow a cross-origin hop.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
BODY_KWARGS = ("content", "data", "files", "json")
INVALID_LOCATION_PREFIX = "Invalid URL in location header"


class SSRFBlocked(Exception):
    """The URL targets an address the runtime must never reach."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EndpointNotAllowed(Exception):
    """The URL (usually a redirect target) is outside the endpoint allow-list."""

    def __init__(self, url: str) -> None:
        super().__init__(f"endpoint not in the allow-list: {url}")
        self.url = url


class UnparseableURL(Exception):
    """The URL (the first one or a redirect's Location) cannot be parsed."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"unparseable URL {url!r}: {reason}")
        self.url = url
        self.reason = reason


class TooManyRedirects(Exception):
    """The server redirected more often than the caller allows."""


class ResponseTooLarge(Exception):
    """The response body exceeded the caller's byte limit."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"response body larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


@dataclass(frozen=True)
class SafeResponse:
    """A fully read response, after any redirects were followed."""

    status_code: int
    headers: dict[str, str]
    body: bytes
    url: str
    redirects: int


def ssrf_check_url(
    url: str,
    *,
    exempt_hosts: frozenset[str] = frozenset(),
    resolver: Resolver = socket.getaddrinfo,
) -> None:
    """Raise ``SSRFBlocked`` unless ``url`` is an http(s) URL whose host is safe to fetch.

    ``exempt_hosts`` holds ``host:port`` or bare host entries (the sandbox) that are allowed
    without a lookup. Every other host is parsed as an IP literal in all the notations a
    resolver accepts, or else resolved with ``resolver``; any blocked address blocks the URL.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise SSRFBlocked(f"unparseable URL: {exc}") from exc
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise SSRFBlocked(f"scheme {parsed.scheme or '(none)'!r} is not allowed; use http or https")
    if parsed.userinfo:
        raise SSRFBlocked("credentials in the URL (user:pass@) are not allowed")
    host = parsed.raw_host.decode("ascii", errors="replace").lower()
    if not host:
        raise SSRFBlocked("the URL has no host")
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS[parsed.scheme]
    if not 0 < port < 65536:
        raise SSRFBlocked(f"invalid port {port}")

    normalised_exempt = {entry.strip().lower() for entry in exempt_hosts}
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if {host, netloc, f"{host}:{port}"} & normalised_exempt:
        return

    addresses, resolved = _host_addresses(host, port=port, resolver=resolver)
    for address in addresses:
        reason = ssrf_address_block_reason(address)
        if reason:
            verb = "resolves to" if resolved else "is"
            raise SSRFBlocked(f"host {host!r} {verb} {address}, {reason}")


def ssrf_address_block_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be contacted, or None when it is a public address."""
    if address in CLOUD_METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner_reason = ssrf_address_block_reason(embedded)
            if inner_reason:
                return f"an IPv6 address wrapping {embedded} ({inner_reason})"
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared address space (100.64.0.0/10)", address in SHARED_ADDRESS_SPACE),
        # Before "private": Python counts the reserved 240.0.0.0/4 as private too.
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
    )
    for label, matches in checks:
        if matches:
            article = "an" if label[0] in "aeiou" else "a"
            return f"{article} {label} address"
    if not address.is_global:
        # Catches the special-purpose ranges (documentation, benchmarking, ...) that the
        # named checks above do not cover.
        return "a non-global address"
    return None


async def ssrf_safe_request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    exempt_hosts: frozenset[str],
    is_allowed_url: Callable[[str], bool],
    max_redirects: int = 3,
    max_bytes: int,
    resolver: Resolver = socket.getaddrinfo,
    credential_headers: frozenset[str] = frozenset(),
    **request_kwargs: Any,
) -> SafeResponse:
    """Send a request, following redirects by hand so that every hop is checked.

    Each URL (the first and every redirect target) must parse (else ``UnparseableURL``),
    pass ``is_allowed_url`` (else ``EndpointNotAllowed``) and ``ssrf_check_url`` (else
    ``SSRFBlocked``). Authorization, cookies and the ``credential_headers`` (lower-case
    names) are dropped on a hop to another origin. The body is streamed and abandoned once
    it exceeds ``max_bytes`` (``ResponseTooLarge``). httpx transport errors and timeouts
    propagate unchanged.
    """
    current_url = _parse_url(url)
    current_method = method.upper()
    dropped_headers = (*CREDENTIAL_HEADERS, *sorted(credential_headers))
    kwargs = dict(request_kwargs)
    kwargs.pop("follow_redirects", None)
    original_origin: tuple[str, bytes, int | None] | None = None

    for redirects in range(max_redirects + 1):
        try:
            request = client.build_request(current_method, current_url, **kwargs)
        except (httpx.InvalidURL, TypeError, ValueError, UnicodeError) as exc:
            raise UnparseableURL(str(current_url), str(exc)) from exc
        # Check the URL actually sent: the client's base_url and params are merged in by now.
        await _check_hop(
            str(request.url),
            exempt_hosts=exempt_hosts,
            is_allowed_url=is_allowed_url,
            resolver=resolver,
        )
        if original_origin is None:
            original_origin = _origin(request.url)
        elif _origin(request.url) != original_origin:
            for header in dropped_headers:
                request.headers.pop(header, None)
        try:
            response = await client.send(request, stream=True, follow_redirects=False)
        except httpx.RemoteProtocolError as exc:
            # httpx parses the Location of every redirect even when not following it, and
            # reports a bad one as a protocol error; it is a bad endpoint, not a dead host.
            if str(exc).startswith(INVALID_LOCATION_PREFIX):
                raise UnparseableURL(str(request.url), str(exc)) from exc
            raise
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                if redirects == max_redirects:
                    raise TooManyRedirects(f"more than {max_redirects} redirects starting at {url}")
                current_url = _join_location(request.url, location)
                current_method = _redirect_method(current_method, response.status_code)
                # The Location URL is complete; re-applying the query params would corrupt it.
                kwargs.pop("params", None)
                if current_method == "GET":
                    for body_kwarg in BODY_KWARGS:
                        kwargs.pop(body_kwarg, None)
                continue
            body = await _read_body(response, max_bytes=max_bytes)
            return SafeResponse(
                status_code=response.status_code,
                headers=dict(response.headers),
                body=body,
                url=str(request.url),
                redirects=redirects,
            )
        finally:
            await response.aclose()
    # The loop either returns or raises on its last iteration.
    raise AssertionError("unreachable")


def _parse_url(url: str) -> httpx.URL:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError, UnicodeError) as exc:
        raise UnparseableURL(url, str(exc)) from exc


def _join_location(base: httpx.URL, location: str) -> httpx.URL:
    try:
        joined = base.join(location)
        # Touching the host and port validates them, as sending would.
        joined.raw_host.decode("ascii")
        _ = joined.port
    except (httpx.InvalidURL, TypeError, ValueError, UnicodeError) as exc:
        raise UnparseableURL(location, str(exc)) from exc
    return joined


async def _check_hop(
    url: str,
    *,
    exempt_hosts: frozenset[str],
    is_allowed_url: Callable[[str], bool],
    resolver: Resolver,
) -> None:
    # The allow-list goes first so that a host outside it is never even looked up.
    if not is_allowed_url(url):
        raise EndpointNotAllowed(url)
    # getaddrinfo blocks; keep it off the event loop.
    await anyio.to_thread.run_sync(
        lambda: ssrf_check_url(url, exempt_hosts=exempt_hosts, resolver=resolver)
    )


async def _read_body(response: httpx.Response, *, max_bytes: int) -> bytes:
    """The body, at most ``max_bytes``. Past it, a result is refused (``ResponseTooLarge``);
    an error's body (a 4xx or 5xx: a proxy's HTML page) is cut at the limit instead, so
    that the failure keeps its status and is classified by it."""
    cut = response.status_code >= 400
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes and not cut:
        raise ResponseTooLarge(max_bytes)
    chunks: list[bytes] = []
    received = 0
    # aiter_bytes yields decoded bytes, so the limit also bounds a compressed body's expansion.
    async for chunk in response.aiter_bytes():
        received += len(chunk)
        if received > max_bytes:
            if not cut:
                raise ResponseTooLarge(max_bytes)
            chunks.append(chunk[: max_bytes - (received - len(chunk))])
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _redirect_method(method: str, status_code: int) -> str:
    # Same rules as browsers and httpx: 303 always becomes GET, and 301/302 turn a POST
    # into a GET; 307/308 keep the method and body.
    if status_code == 303 and method != "HEAD":
        return "GET"
    if status_code in (301, 302) and method == "POST":
        return "GET"
    return method


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return (url.scheme, url.raw_host, url.port or DEFAULT_PORTS.get(url.scheme))


def _host_addresses(host: str, *, port: int, resolver: Resolver) -> tuple[list[IPAddress], bool]:
    """The addresses ``host`` stands for, and whether they came from a DNS lookup."""
    if ":" in host:
        return [_parse_ipv6_literal(host)], False
    if not HOST_NAME_PATTERN.match(host):
        raise SSRFBlocked(f"host {host!r} contains characters not allowed in a host name")
    literal = _parse_ipv4_literal(host)
    if literal is not None:
        return [literal], False
    try:
        results = list(resolver(host, port))
    except (OSError, UnicodeError) as exc:
        raise SSRFBlocked(f"DNS lookup for {host!r} failed: {exc}") from exc
    addresses: list[IPAddress] = []
    for result in results:
        raw_address = str(result[4][0]).split("%", 1)[0]
        try:
            addresses.append(ipaddress.ip_address(raw_address))
        except ValueError as exc:
            raise SSRFBlocked(f"DNS lookup for {host!r} returned {raw_address!r}") from exc
    if not addresses:
        raise SSRFBlocked(f"DNS lookup for {host!r} returned no addresses")
    return addresses, True


def _parse_ipv6_literal(host: str) -> ipaddress.IPv6Address:
    # RFC 6874 writes the zone separator as %25; the zone never changes what is reached
    # for the purpose of this check, so it is dropped.
    address_text = unquote(host).split("%", 1)[0]
    try:
        return ipaddress.IPv6Address(address_text)
    except ValueError as exc:
        raise SSRFBlocked(f"malformed IPv6 address {host!r}") from exc


def _parse_ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """Parse ``host`` the way the WHATWG URL standard and ``inet_aton`` do.

    Accepts one to four dot-separated parts, each decimal, ``0x`` hex or ``0``-prefixed
    octal, with the last part filling the remaining bytes (``127.1``, ``2130706433``).
    Returns None for a host name; raises ``SSRFBlocked`` for a malformed number.
    """
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot is allowed
    last = parts[-1]
    if not (last.isdigit() or last.lower().startswith("0x")):
        return None
    if len(parts) > 4 or not all(IPV4_NUMBER_PATTERN.match(part) for part in parts):
        raise SSRFBlocked(f"host {host!r} is a malformed IPv4 address")
    numbers = [_parse_ipv4_number(part) for part in parts]
    *leading, final = numbers
    if any(number > 255 for number in leading) or final >= 256 ** (5 - len(numbers)):
        raise SSRFBlocked(f"host {host!r} is an out-of-range IPv4 address")
    value = final
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _parse_ipv4_number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        # The client address is the one a relay would deliver to.
        return address.teredo[1]
    if any(address in network for network in NAT64_NETWORKS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:
        # Deprecated IPv4-compatible form ``::a.b.c.d``.
        return ipaddress.IPv4Address(int(address))
    return None


class SSRFGuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, with the SSRF check at connect time.

    Each TCP connection resolves its host here, blocks it (``SSRFBlocked``) if any address
    is internal, and connects to a checked address: the name is not resolved again
    between the check and the connection. Hosts ``exempt_hosts()`` names (the sandbox)
    connect as they are. TLS is unchanged: the certificate is checked against the URL's
    host name, whatever address the connection went to.
    """

    def __init__(
        self,
        *,
        exempt_hosts: Callable[[], Iterable[str]] = frozenset,
        resolver: Resolver = socket.getaddrinfo,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.exempt_hosts = exempt_hosts
        self.resolver = resolver
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        name = host.lower().strip("[]")
        exempt = {entry.strip().lower() for entry in self.exempt_hosts()}
        if {name, f"{name}:{port}", f"[{name}]:{port}"} & exempt:
            targets = [host]
        else:
            found, resolved = await anyio.to_thread.run_sync(
                lambda: _host_addresses(name, port=port, resolver=self.resolver)
            )
            for address in found:
                reason = ssrf_address_block_reason(address)
                if reason:
                    verb = "resolves to" if resolved else "is"
                    raise SSRFBlocked(f"host {name!r} {verb} {address}, {reason} (at connect)")
            targets = [str(address) for address in dict.fromkeys(found)]
        error: Exception | None = None
        for target in targets:
            try:
                return await self.inner.connect_tcp(
                    target,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc  # the next checked address, as a resolver's order suggests
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise SSRFBlocked("a Unix socket is not a tool endpoint")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
