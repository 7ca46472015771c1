"""Tests of the SSRF guard: address checks and the redirect-checking request helper."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agents.tools.ssrf import (
    EndpointNotAllowed,
    ResponseTooLarge,
    SafeResponse,
    SSRFBlocked,
    TooManyRedirects,
    UnparseableURL,
    ssrf_check_url,
    ssrf_safe_request,
)

PUBLIC_IP = "93.184.216.34"


def fake_resolver(*addresses: str) -> Callable[[str, int], list[tuple[Any, ...]]]:
    """A resolver answering every name with ``addresses``, shaped like getaddrinfo."""

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        results: list[tuple[Any, ...]] = []
        for address in addresses:
            if ":" in address:
                results.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                results.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return results

    return resolve


def failing_resolver(host: str, port: int) -> list[tuple[Any, ...]]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def unexpected_resolver(host: str, port: int) -> list[tuple[Any, ...]]:
    raise AssertionError(f"resolver must not be called for {host!r}")


LOOPBACK = "a loopback address"
WRAPS_LOOPBACK = "an IPv6 address wrapping 127.0.0.1 (a loopback address)"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", f"host '127.0.0.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://127.0.0.1./", f"host '127.0.0.1.' is 127.0.0.1, {LOOPBACK}"),
        ("http://2130706433/", f"host '2130706433' is 127.0.0.1, {LOOPBACK}"),
        # one number and a trailing dot is still a literal, never a name to look up
        ("http://2130706433./", f"host '2130706433.' is 127.0.0.1, {LOOPBACK}"),
        ("http://0x7f000001/", f"host '0x7f000001' is 127.0.0.1, {LOOPBACK}"),
        ("http://0X7F.0.0.1/", f"host '0x7f.0.0.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://0x7f.1/", f"host '0x7f.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://0x7f.0x0.0x0.0x1./", f"host '0x7f.0x0.0x0.0x1.' is 127.0.0.1, {LOOPBACK}"),
        # octal parts, as inet_aton reads them (httpx itself refuses a dotted-quad octal)
        ("http://0177.1/", f"host '0177.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://0177.0.1/", f"host '0177.0.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://017700000001/", f"host '017700000001' is 127.0.0.1, {LOOPBACK}"),
        ("http://0177.0.0.1/", "unparseable URL: Invalid IPv4 address: '0177.0.0.1'"),
        ("http://127.1/", f"host '127.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://127.0.1/", f"host '127.0.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://127。0。0。1/", f"host '127.0.0.1' is 127.0.0.1, {LOOPBACK}"),
        ("http://0/", "host '0' is 0.0.0.0, an unspecified address"),
        ("http://0x/", "host '0x' is 0.0.0.0, an unspecified address"),
        ("http://0.0.0.0/", "host '0.0.0.0' is 0.0.0.0, an unspecified address"),
        ("http://10.0.0.5/", "host '10.0.0.5' is 10.0.0.5, a private address"),
        ("http://172.16.3.4/", "host '172.16.3.4' is 172.16.3.4, a private address"),
        ("http://192.168.1.1:8080/admin", "host '192.168.1.1' is 192.168.1.1, a private address"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "host '169.254.169.254' is 169.254.169.254, a cloud metadata address",
        ),
        (
            "http://100.64.0.1/",
            "host '100.64.0.1' is 100.64.0.1, a shared address space (100.64.0.0/10) address",
        ),
        (
            "http://100.100.100.200/",
            "host '100.100.100.200' is 100.100.100.200, a cloud metadata address",
        ),
        ("http://224.0.0.1/", "host '224.0.0.1' is 224.0.0.1, a multicast address"),
        ("http://240.0.0.1/", "host '240.0.0.1' is 240.0.0.1, a reserved address"),
        (
            "http://255.255.255.255/",
            "host '255.255.255.255' is 255.255.255.255, a reserved address",
        ),
        ("http://192.0.2.1/", "host '192.0.2.1' is 192.0.2.1, a private address"),
        ("http://198.18.0.1/", "host '198.18.0.1' is 198.18.0.1, a private address"),
        ("http://[::1]/", f"host '::1' is ::1, {LOOPBACK}"),
        ("http://[::]/", "host '::' is ::, an unspecified address"),
        (
            "http://[::ffff:127.0.0.1]/",
            f"host '::ffff:127.0.0.1' is ::ffff:7f00:1, {WRAPS_LOOPBACK}",
        ),
        ("http://[::ffff:7f00:1]/", f"host '::ffff:7f00:1' is ::ffff:7f00:1, {WRAPS_LOOPBACK}"),
        (
            "http://[::ffff:169.254.169.254]/",
            "host '::ffff:169.254.169.254' is ::ffff:a9fe:a9fe, an IPv6 address wrapping "
            "169.254.169.254 (a cloud metadata address)",
        ),
        (
            "http://[0:0:0:0:0:ffff:10.0.0.1]/",
            "host '0:0:0:0:0:ffff:10.0.0.1' is ::ffff:a00:1, an IPv6 address wrapping 10.0.0.1 "
            "(a private address)",
        ),
        ("http://[fe80::1%25eth0]/", "host 'fe80::1%25eth0' is fe80::1, a link-local address"),
        ("http://[fe80::1]/", "host 'fe80::1' is fe80::1, a link-local address"),
        ("http://[fc00::1]/", "host 'fc00::1' is fc00::1, a private address"),
        ("http://[fec0::1]/", "host 'fec0::1' is fec0::1, a site-local address"),
        (
            "http://[fd00:ec2::254]/",
            "host 'fd00:ec2::254' is fd00:ec2::254, a cloud metadata address",
        ),
        ("http://[ff02::1]/", "host 'ff02::1' is ff02::1, a multicast address"),
        ("http://[2002:7f00:1::]/", f"host '2002:7f00:1::' is 2002:7f00:1::, {WRAPS_LOOPBACK}"),
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
            "host '2001:0:4136:e378:8000:63bf:80ff:fffe' is 2001:0:4136:e378:8000:63bf:80ff:fffe,"
            f" {WRAPS_LOOPBACK}",
        ),
        (
            "http://[64:ff9b::7f00:1]/",
            f"host '64:ff9b::7f00:1' is 64:ff9b::7f00:1, {WRAPS_LOOPBACK}",
        ),
        ("http://[::127.0.0.1]/", f"host '::127.0.0.1' is ::7f00:1, {WRAPS_LOOPBACK}"),
        # The IPv4-compatible form starts right after :: and ::1 (unspecified, loopback).
        (
            "http://[::2]/",
            "host '::2' is ::2, an IPv6 address wrapping 0.0.0.2 (a private address)",
        ),
        ("https://127.0.0.1:443/", f"host '127.0.0.1' is 127.0.0.1, {LOOPBACK}"),
    ],
)
def test_ip_literals_of_internal_addresses_are_blocked(url: str, reason: str) -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url(url, resolver=unexpected_resolver)
    assert blocked.value.reason == reason


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://1.2.3.4.5/", "host '1.2.3.4.5' is a malformed IPv4 address"),
        ("http://256.0.0.1/", "unparseable URL: Invalid IPv4 address: '256.0.0.1'"),
        ("http://0x1g.0.0.1/", "host '0x1g.0.0.1' is a malformed IPv4 address"),
        ("http://08.1/", "host '08.1' is a malformed IPv4 address"),
        ("http://example.123/", "host 'example.123' is a malformed IPv4 address"),
        ("http://4294967296/", "host '4294967296' is an out-of-range IPv4 address"),
        ("http://0x100000000/", "host '0x100000000' is an out-of-range IPv4 address"),
        ("http://1.16777216/", "host '1.16777216' is an out-of-range IPv4 address"),
        ("http://1.2.65536/", "host '1.2.65536' is an out-of-range IPv4 address"),
        ("http://256.1/", "host '256.1' is an out-of-range IPv4 address"),
        (
            "http://%31%32%37.0.0.1/",
            "host '%31%32%37.0.0.1' contains characters not allowed in a host name",
        ),
        ("http://[::zz]/", "unparseable URL: Invalid IPv6 address: '[::zz]'"),
        ("http://ⓛocalhost/", "unparseable URL: Invalid IDNA hostname: 'ⓛocalhost'"),
        ("http://127.0.0.1:0/", "invalid port 0"),
        ("http://93.184.216.34:65536/", "invalid port 65536"),
        ("http://127.0.0.1:abc/", "unparseable URL: Invalid port: 'abc'"),
    ],
)
def test_malformed_hosts_are_blocked(url: str, reason: str) -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url(url, resolver=unexpected_resolver)
    assert blocked.value.reason == reason


def test_an_internationalised_name_is_looked_up_in_its_ascii_form() -> None:
    looked_up: list[str] = []

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        looked_up.append(host)
        return fake_resolver("10.0.0.9")(host, port)

    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url("https://BÜCHER.example/", resolver=resolve)
    assert looked_up == ["xn--bcher-kva.example"]
    assert blocked.value.reason == (
        "host 'xn--bcher-kva.example' resolves to 10.0.0.9, a private address"
    )


def test_a_dns_answer_that_is_not_an_address_is_blocked() -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url("https://api.example.com/", resolver=fake_resolver("not-an-address"))
    assert blocked.value.reason == "DNS lookup for 'api.example.com' returned 'not-an-address'"


def test_public_ip_literal_is_allowed() -> None:
    ssrf_check_url(f"https://{PUBLIC_IP}/path", resolver=unexpected_resolver)


def test_public_ipv6_literal_is_allowed() -> None:
    ssrf_check_url("https://[2606:4700:4700::1111]/", resolver=unexpected_resolver)


def test_host_resolving_to_public_address_is_allowed() -> None:
    ssrf_check_url("https://api.example.com/v1", resolver=fake_resolver(PUBLIC_IP))


@pytest.mark.parametrize(
    "addresses",
    [
        ("127.0.0.1",),
        ("10.1.2.3",),
        ("::1",),
        ("fe80::1%eth0",),
        ("169.254.169.254",),
        (PUBLIC_IP, "192.168.0.10"),
    ],
)
def test_host_resolving_to_any_internal_address_is_blocked(addresses: tuple[str, ...]) -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url("https://api.example.com/", resolver=fake_resolver(*addresses))
    internal = addresses[-1].split("%")[0]
    assert blocked.value.reason.startswith(f"host 'api.example.com' resolves to {internal}, ")


def test_dns_failure_is_blocked_with_reason() -> None:
    with pytest.raises(SSRFBlocked) as excinfo:
        ssrf_check_url("https://no-such-host.example/", resolver=failing_resolver)

    assert excinfo.value.reason == (
        "DNS lookup for 'no-such-host.example' failed: [Errno -2] Name or service not known"
    )


def test_empty_dns_answer_is_blocked() -> None:
    with pytest.raises(SSRFBlocked, match="no addresses"):
        ssrf_check_url("https://api.example.com/", resolver=fake_resolver())


@pytest.mark.parametrize(
    ("url", "exempt"),
    [
        ("http://localhost:8001/api/orders", "localhost:8001"),
        ("http://LOCALHOST:8001/api/orders", "localhost:8001"),
        ("http://127.0.0.1/api", "127.0.0.1:80"),
        ("https://127.0.0.1/api", "127.0.0.1:443"),
        ("http://sandbox/api", "sandbox"),
        # An IPv6 host with a port is written in brackets, as in the URL.
        ("http://[::1]:8001/api", "[::1]:8001"),
    ],
)
def test_exempt_host_is_allowed_without_lookup(url: str, exempt: str) -> None:
    ssrf_check_url(url, exempt_hosts=frozenset({exempt}), resolver=unexpected_resolver)


def test_exempt_host_on_other_port_is_still_checked() -> None:
    with pytest.raises(SSRFBlocked, match=r"^host 'localhost' resolves to 127\.0\.0\.1, a loop"):
        ssrf_check_url(
            "http://localhost:6379/",
            exempt_hosts=frozenset({"localhost:8001"}),
            resolver=fake_resolver("127.0.0.1"),
        )


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "ftp://example.com/file",
        "javascript:alert(1)",
        "//example.com/path",
    ],
)
def test_non_http_schemes_are_blocked(url: str) -> None:
    with pytest.raises(SSRFBlocked, match="scheme"):
        ssrf_check_url(url, resolver=fake_resolver(PUBLIC_IP))


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@example.com/",
        "http://user@example.com/",
        "http://example.com\\@127.0.0.1/",
    ],
)
def test_userinfo_is_blocked(url: str) -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url(url, resolver=fake_resolver(PUBLIC_IP))
    assert blocked.value.reason == "credentials in the URL (user:pass@) are not allowed"


def test_missing_host_is_blocked() -> None:
    with pytest.raises(SSRFBlocked) as blocked:
        ssrf_check_url("http:///path", resolver=unexpected_resolver)
    assert blocked.value.reason == "the URL has no host"


# --- ssrf_safe_request -------------------------------------------------------------------

START_URL = f"http://{PUBLIC_IP}/start"


def allow_everything(url: str) -> bool:
    return True


def run_request(
    handler: Callable[[httpx.Request], httpx.Response],
    *,
    url: str = START_URL,
    method: str = "GET",
    is_allowed_url: Callable[[str], bool] = allow_everything,
    max_redirects: int = 3,
    max_bytes: int = 10_000,
    client_follows: bool = False,
    **request_kwargs: Any,
) -> SafeResponse:
    async def send() -> SafeResponse:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(handler), follow_redirects=client_follows
        ) as client:
            return await ssrf_safe_request(
                client,
                method,
                url,
                exempt_hosts=frozenset(),
                is_allowed_url=is_allowed_url,
                max_redirects=max_redirects,
                max_bytes=max_bytes,
                resolver=fake_resolver(PUBLIC_IP),
                **request_kwargs,
            )

    return asyncio.run(send())


def redirect_to(location: str, status_code: int = 302) -> httpx.Response:
    return httpx.Response(status_code, headers={"Location": location})


def test_plain_response_is_returned() -> None:
    response = run_request(lambda request: httpx.Response(200, json={"ok": True}))

    assert response.status_code == 200
    assert response.body == b'{"ok":true}'
    assert response.headers["content-type"] == "application/json"
    assert response.url == START_URL
    assert response.redirects == 0


def test_relative_redirect_is_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            return redirect_to("/next?page=2")
        return httpx.Response(200, text=f"at {request.url.path}")

    response = run_request(handler)

    assert response.body == b"at /next"
    assert response.url == f"http://{PUBLIC_IP}/next?page=2"
    assert response.redirects == 1


def test_303_redirect_switches_to_get_and_drops_body() -> None:
    seen: list[tuple[str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.content))
        if request.url.path == "/start":
            return redirect_to("/done", status_code=303)
        return httpx.Response(200)

    run_request(handler, method="POST", json={"a": 1})

    assert seen == [("POST", b'{"a":1}'), ("GET", b"")]


@pytest.mark.parametrize("status_code", [301, 302])
def test_301_and_302_turn_a_post_into_a_get_without_body(status_code: int) -> None:
    seen: list[tuple[str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.content))
        if request.url.path == "/start":
            return redirect_to("/done", status_code=status_code)
        return httpx.Response(200)

    run_request(handler, method="POST", json={"a": 1})

    assert seen == [("POST", b'{"a":1}'), ("GET", b"")]


@pytest.mark.parametrize(("method", "status_code"), [("PUT", 301), ("HEAD", 303)])
def test_other_methods_keep_their_method_on_a_redirect(method: str, status_code: int) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if request.url.path == "/start":
            return redirect_to("/done", status_code=status_code)
        return httpx.Response(200)

    run_request(handler, method=method)

    assert seen == [method, method]


def test_307_redirect_keeps_method_and_body() -> None:
    seen: list[tuple[str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.content))
        if request.url.path == "/start":
            return redirect_to("/done", status_code=307)
        return httpx.Response(200)

    run_request(handler, method="POST", content=b"payload")

    assert seen == [("POST", b"payload"), ("POST", b"payload")]


def test_cross_origin_redirect_drops_credentials() -> None:
    seen_auth: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_auth.append(request.headers.get("authorization"))
        if request.url.path == "/start":
            return redirect_to("https://api.example.com/landing")
        return httpx.Response(200)

    run_request(handler, headers={"Authorization": "Bearer secret"})

    assert seen_auth == ["Bearer secret", None]


def test_cross_origin_redirect_drops_the_named_credential_headers() -> None:
    seen: list[tuple[str | None, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("x-api-key"), request.headers.get("x-trace")))
        if request.url.path == "/start":
            return redirect_to("https://api.example.com/landing")
        return httpx.Response(200)

    run_request(
        handler,
        headers={"X-Api-Key": "k-123456", "X-Trace": "t1"},
        credential_headers=frozenset({"x-api-key"}),
    )

    assert seen == [("k-123456", "t1"), (None, "t1")]


def test_same_origin_redirect_keeps_the_named_credential_headers() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-api-key"))
        if request.url.path == "/start":
            return redirect_to("/next")
        return httpx.Response(200)

    run_request(
        handler, headers={"X-Api-Key": "k-123456"}, credential_headers=frozenset({"x-api-key"})
    )

    assert seen == ["k-123456", "k-123456"]


@pytest.mark.parametrize("url", ["http://0177.0.0.1/", "http://[::1/", "http://h:port/"])
def test_unparseable_first_url_raises_unparseable_url(url: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    with pytest.raises(UnparseableURL):
        run_request(handler, url=url)


@pytest.mark.parametrize("location", ["http://0177.0.0.1/", "http://[::1/x", "http://h:port/"])
def test_unparseable_redirect_location_raises_unparseable_url(location: str) -> None:
    requested: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        return redirect_to(location)

    with pytest.raises(UnparseableURL):
        run_request(handler)

    assert requested == [START_URL]


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1/admin",
        "http://[::1]:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",
        "file:///etc/passwd",
    ],
)
def test_redirect_to_internal_address_is_blocked(location: str) -> None:
    requested: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        return redirect_to(location)

    with pytest.raises(SSRFBlocked):
        run_request(handler)

    assert requested == [START_URL]


def test_a_client_that_follows_redirects_itself_still_has_every_hop_checked() -> None:
    requested: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        return redirect_to("http://127.0.0.1/admin")

    with pytest.raises(SSRFBlocked) as blocked:
        run_request(handler, client_follows=True)

    assert blocked.value.reason == f"host '127.0.0.1' is 127.0.0.1, {LOOPBACK}"
    assert requested == [START_URL]


def test_redirect_outside_allow_list_raises_endpoint_not_allowed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return redirect_to("https://evil.example.net/steal")

    with pytest.raises(EndpointNotAllowed) as excinfo:
        run_request(handler, is_allowed_url=lambda url: url.startswith(f"http://{PUBLIC_IP}/"))

    assert excinfo.value.url == "https://evil.example.net/steal"


def test_first_url_outside_allow_list_is_not_requested() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    with pytest.raises(EndpointNotAllowed):
        run_request(handler, is_allowed_url=lambda url: False)


def test_redirect_chain_longer_than_limit_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        hop = int(request.url.params.get("hop", "0"))
        return redirect_to(f"/loop?hop={hop + 1}")

    with pytest.raises(TooManyRedirects):
        run_request(handler, max_redirects=2)


def test_redirect_chain_at_limit_succeeds() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        hop = int(request.url.params.get("hop", "0"))
        if hop == 2:
            return httpx.Response(200, text="arrived")
        return redirect_to(f"/loop?hop={hop + 1}")

    response = run_request(handler, max_redirects=2)

    assert response.body == b"arrived"
    assert response.redirects == 2


def test_body_over_limit_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 2048)

    with pytest.raises(ResponseTooLarge):
        run_request(handler, max_bytes=1024)


def test_streamed_body_without_length_over_limit_raises() -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b"y" * 300

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks())

    with pytest.raises(ResponseTooLarge):
        run_request(handler, max_bytes=1024)


@pytest.mark.parametrize("length", [True, False])
def test_an_error_body_over_the_limit_is_cut_and_keeps_its_status(length: bool) -> None:
    """A 500 with a proxy's 6 MB HTML page is a 500 (classified as one, so a degrade
    handler can be learned), not a RESPONSE_TOO_LARGE with no status."""
    pulled: list[int] = []

    async def chunks() -> Any:
        for number in range(10_000):
            pulled.append(number)
            yield b"<p>" + b"z" * 1021

    def handler(request: httpx.Request) -> httpx.Response:
        if length:
            return httpx.Response(500, content=b"<p>" * 4000)
        return httpx.Response(502, content=chunks())

    response = run_request(handler, max_bytes=1024)

    assert response.status_code == (500 if length else 502)
    assert len(response.body) == 1024 and response.body.startswith(b"<p>")
    assert len(pulled) <= 3


def test_an_endless_body_is_read_only_up_to_the_limit() -> None:
    # The body is streamed: reading stops at the limit instead of buffering what the
    # upstream sends (here 10 MB; a hostile one need never stop).
    pulled: list[int] = []

    async def chunks() -> Any:
        for number in range(10_000):
            pulled.append(number)
            yield b"y" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=chunks())

    with pytest.raises(ResponseTooLarge):
        run_request(handler, max_bytes=4096)

    assert len(pulled) <= 8


def test_a_request_the_client_cannot_build_names_its_url_and_reason() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    with pytest.raises(UnparseableURL) as refused:
        run_request(handler, method="POST", json={"when": object()})

    assert refused.value.url == START_URL
    assert "not JSON serializable" in refused.value.reason


def test_body_exactly_at_limit_is_returned() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"z" * 1024)

    response = run_request(handler, max_bytes=1024)

    assert response.body == b"z" * 1024


def test_a_callers_follow_redirects_is_ignored_every_hop_is_still_checked() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            return redirect_to("/next")
        return httpx.Response(200, text="there")

    response = run_request(handler, follow_redirects=True)

    assert (response.body, response.redirects) == (b"there", 1)


def test_three_redirects_are_followed_by_default_and_a_fourth_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        hop = int(request.url.path.strip("/") or 0)
        return redirect_to(f"/{hop + 1}") if hop < 4 else httpx.Response(200)

    async def send(url: str) -> SafeResponse:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await ssrf_safe_request(
                client,
                "GET",
                url,
                exempt_hosts=frozenset(),
                is_allowed_url=allow_everything,
                max_bytes=100,
                resolver=fake_resolver(PUBLIC_IP),
            )

    assert asyncio.run(send(f"http://{PUBLIC_IP}/1")).redirects == 3
    with pytest.raises(TooManyRedirects):
        asyncio.run(send(f"http://{PUBLIC_IP}/0"))


# --- the check again at connect time (DNS rebinding) ----------------------------------------


@pytest.fixture
def loopback_server() -> Any:
    """A plain HTTP server on 127.0.0.1 that counts the requests it answers."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


def _fetch(url: str, *, check_resolver: Any, connect_resolver: Any) -> SafeResponse:
    from agents.http_clients import tool_http_client
    from agents.tools.endpoints import sandbox_host

    async def send() -> SafeResponse:
        async with tool_http_client(resolver=connect_resolver) as client:
            return await ssrf_safe_request(
                client,
                "GET",
                url,
                exempt_hosts=frozenset({sandbox_host()}),  # as the executor passes them
                is_allowed_url=allow_everything,
                max_bytes=100,
                resolver=check_resolver,
            )

    return asyncio.run(send())


def test_a_name_that_rebinds_to_loopback_after_the_check_is_blocked_at_connect(
    loopback_server: Any, settings: Any
) -> None:
    """The check sees a public address; by the time the connection opens, the name points
    at this machine. The connection is refused, and the server hears nothing."""
    settings.SANDBOX_BASE_URL = "http://sandbox.invalid:1"  # nothing local is exempt
    port, hits = loopback_server
    with pytest.raises(SSRFBlocked, match=r"127\.0\.0\.1.*at connect"):
        _fetch(
            f"http://rebind.example:{port}/x",
            check_resolver=fake_resolver(PUBLIC_IP),
            connect_resolver=fake_resolver("127.0.0.1"),
        )
    assert hits == []


def test_the_guarded_client_connects_to_the_address_it_checked(
    loopback_server: Any, settings: Any
) -> None:
    """Through the real transport: the sandbox host is exempt and answers; any other name
    is connected to at the address the guard resolved, not looked up again."""
    port, hits = loopback_server
    settings.SANDBOX_BASE_URL = f"http://127.0.0.1:{port}"
    response = _fetch(
        f"http://127.0.0.1:{port}/sandbox",
        check_resolver=unexpected_resolver,
        connect_resolver=unexpected_resolver,
    )
    assert (response.status_code, response.body, hits) == (200, b"ok", ["/sandbox"])

    from agents.tools.ssrf import SSRFGuardedBackend

    connected: list[tuple[str, int]] = []

    class Recorder:
        async def connect_tcp(self, host: str, port: int, **kwargs: Any) -> Any:
            connected.append((host, port))
            return "stream"

    backend = SSRFGuardedBackend(
        resolver=fake_resolver(PUBLIC_IP, "2606:4700:4700::1111"),
        inner=Recorder(),  # type: ignore[arg-type]
    )
    assert asyncio.run(backend.connect_tcp("api.example.com", 443)) == "stream"
    assert connected == [(PUBLIC_IP, 443)]
    with pytest.raises(SSRFBlocked):
        asyncio.run(backend.connect_unix_socket("/var/run/docker.sock"))
