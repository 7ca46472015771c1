"""The endpoint allow-list: exact origin, path prefix on a segment boundary, fixed templates."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agents.models import Tool
from agents.tools.endpoints import (
    endpoint_allowed,
    endpoint_refusal,
    endpoint_render,
    endpoint_template_problem,
    sandbox_host,
)
from agents.tools.registry import ToolDefinition

ALLOWLIST = [
    "https://api.example.com/v1",
    "http://shop.example.org:8080/",
    "https://bücher.example",
    "https://bare.example.com",
]


@pytest.fixture(autouse=True)
def allowlist(settings: Any) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = ALLOWLIST
    settings.SANDBOX_BASE_URL = "http://127.0.0.1:8000/sandbox/api"


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1",
        "https://api.example.com/v1/",
        "https://api.example.com/v1/orders/%23W1?expand=items",
        "https://API.Example.COM/v1/orders",
        "https://api.example.com:443/v1/orders",
        "https://api.example.com./v1/orders",
        "http://shop.example.org:8080/anything",
        "https://xn--bcher-kva.example/search",
        "https://BÜCHER.example/search",
        "http://127.0.0.1:8000/sandbox/api/orders/1",
        "https://bare.example.com/",
        "https://bare.example.com/anything/at/all",
        "https://api.example.com/v1/orders;v=2",
        "https://api.example.com/v1/search/%E2%82%AC%20and%20AC%5CDC",
        "https://api.example.com/v1/...",
    ],
)
def test_urls_inside_an_entry_are_allowed(url: str) -> None:
    assert endpoint_refusal(url) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://bare.example.com.evil.net/", "allow-list"),
        ("https://bare.example.com@evil.net/", "credentials"),
        ("https://bare.example.comevil.net/", "allow-list"),
        ("https://api.example.com.evil.net/v1/orders", "allow-list"),
        ("https://evil-api.example.com/v1/orders", "allow-list"),
        ("https://api.example.co/v1/orders", "allow-list"),
        ("https://api.example.com@evil.net/v1/orders", "credentials"),
        ("https://user:pw@api.example.com/v1/orders", "credentials"),
        ("https://api.example.com\\@evil.net/v1/orders", "backslash"),
        ("https://api.example.com:8443/v1/orders", "allow-list"),
        ("http://shop.example.org/anything", "allow-list"),
        ("http://shop.example.org:8081/anything", "allow-list"),
        ("http://api.example.com/v1/orders", "allow-list"),
        ("ftp://api.example.com/v1/orders", "scheme"),
        ("https://api.example.com/v10", "allow-list"),
        ("https://api.example.com/v1x/orders", "allow-list"),
        ("https://api.example.com/", "allow-list"),
        ("https://api.example.com/v2/orders", "allow-list"),
        ("http://127.0.0.1:8000/sandbox/apix/orders", "allow-list"),
        ("http://127.0.0.1:8000/sandbox/admin/", "allow-list"),
        ("https://api.example.com/v1/%2e%2e/admin", "'..'"),
        ("https://api.example.com/v1/%2E%2E/admin", "'..'"),
        ("https://api.example.com/v1/%252e%252e/admin", "'..'"),
        ("https://api.example.com/v1/..%2Fadmin", "'..'"),
        ("https://api.example.com/v1/orders/%2e/x", "'..'"),
        # Tomcat drops a ';' path parameter, IIS splits on '\': both climb out of /v1.
        ("https://api.example.com/v1/..;/admin", "'..'"),
        ("https://api.example.com/v1/..%3B/admin", "'..'"),
        ("https://api.example.com/v1/..;jsessionid=x/admin", "'..'"),
        ("https://api.example.com/v1/.;/orders", "'..'"),
        ("https://api.example.com/v1/..%5Cadmin", "'..'"),
        ("https://api.example.com/v1/x%5C..%5C..%5Cadmin", "'..'"),
        ("https://api.example.com/v1/..%255Cadmin", "'..'"),
        # Overlong UTF-8 for '.': some decoders read '..', others U+FFFD.
        ("https://api.example.com/v1/%C0%AE%C0%AE/admin", "not UTF-8"),
        ("https://api.example.com/v1/%25C0%25AE%25C0%25AE/admin", "not UTF-8"),
        ("https://api.example.com/v1/%FF", "not UTF-8"),
        ("https://api.example.com%2eevil.net/v1/orders", "host"),
        ("https://api.example.com/v1/a b", "space"),
    ],
)
def test_urls_outside_every_entry_are_refused_with_a_reason(url: str, reason: str) -> None:
    refusal = endpoint_refusal(url)
    assert refusal is not None
    assert reason in refusal
    assert not endpoint_allowed(url)


def test_dot_segments_that_httpx_resolves_are_matched_after_resolving() -> None:
    # httpx sends /admin for /v1/../admin, so that is what must match.
    assert endpoint_refusal("https://api.example.com/v1/../admin") is not None
    assert endpoint_refusal("https://api.example.com/v1/x/../orders") is None


@pytest.mark.parametrize(
    "url",
    [
        "http://0177.0.0.1/",
        "http://[::1/",
        "http://api.example.com:port/",
        "https://api.example.com:99999/v1",
        "http://",
        "",
        "https://exa\x00mple.com/v1",
        "http://a..b/",
    ],
)
def test_unparseable_urls_are_refused_not_raised(url: str) -> None:
    refusal = endpoint_refusal(url)
    assert refusal is not None


@pytest.mark.parametrize("entry", ["http://0177.0.0.1/", "https://u:p@api.example.com/v1", "::"])
def test_an_unusable_allow_list_entry_admits_nothing(settings: Any, entry: str) -> None:
    settings.TOOL_ENDPOINT_ALLOWLIST = [entry]
    assert endpoint_refusal("https://api.example.com/v1/orders") is not None


def test_sandbox_host_carries_the_default_port(settings: Any) -> None:
    settings.SANDBOX_BASE_URL = "https://Shop.Example.org/api"
    assert sandbox_host() == "shop.example.org:443"


@pytest.mark.parametrize(
    "template",
    [
        "{sandbox}/orders/{order_id}",
        "https://api.example.com/v1/orders/{order_id}",
        "https://api.example.com/v1/search?q={query}",
        "http://shop.example.org:8080/{section}/{item}",
        "https://api.example.com/v1/status",
    ],
)
def test_templates_with_a_fixed_origin_are_accepted(template: str) -> None:
    assert endpoint_template_problem(template) is None


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("https://api.example.com{suffix}/v1/orders", "must be fixed"),
        ("https://{host}/v1/orders", "must be fixed"),
        ("https://api.example.com:{port}/v1/orders", "must be fixed"),
        ("{scheme}://api.example.com/v1/orders", "must be fixed"),
        ("https://{sub}.example.com/v1/orders", "must be fixed"),
        ("https://api.example.com", "ALLOWLIST"),
        ("https://api.example.com/v1{suffix}", "ALLOWLIST"),
        ("https://api.example.com/{version}/orders", "ALLOWLIST"),
        ("https://evil.example.net/v1/{x}", "ALLOWLIST"),
        ("https://api.example.com/v1/{order_id!r}", "plain argument name"),
        ("https://api.example.com/v1/{order_id:>10}", "plain argument name"),
        ("https://api.example.com/v1/{order.id}", "plain argument name"),
        ("https://api.example.com/v1/{{literal}}", "Literal braces"),
        ("https://api.example.com/v1/{unclosed", "Malformed"),
        ("https://api.example.com/v1/{sandbox}", "{sandbox}"),
        ("http://0177.0.0.1/v1/{x}", "not a usable URL"),
        ("", "needs an endpoint"),
    ],
)
def test_templates_that_let_the_model_steer_are_refused(template: str, message: str) -> None:
    problem = endpoint_template_problem(template)
    assert problem is not None
    assert message in problem


@pytest.mark.parametrize(
    "value",
    ["../../admin", ".evil.net", "@evil.net", "x/../../y", "a?b=c#d", "%2e%2e"],
)
def test_rendered_arguments_never_leave_the_entry(value: str) -> None:
    url, _ = endpoint_render("https://api.example.com/v1/orders/{order_id}", {"order_id": value})
    refusal = endpoint_refusal(url)
    assert refusal is None or "'..'" in refusal
    assert url.startswith("https://api.example.com/v1/orders/")


def tool_row(**overrides: Any) -> Tool:
    values: dict[str, Any] = {
        "name": "lookup",
        "description": "d",
        "params_schema": {"type": "object"},
        "endpoint_template": "https://api.example.com/v1/orders/{order_id}",
    }
    values.update(overrides)
    return Tool(**values)


def test_tool_clean_accepts_a_fixed_template() -> None:
    tool_row().clean()


@pytest.mark.parametrize(
    "template",
    [
        "https://api.example.com{suffix}",
        "https://api.example.com{suffix}/v1/orders",
        "https://{host}/v1/orders",
        "https://api.example.com.evil.net/v1/orders",
    ],
)
def test_tool_clean_refuses_a_template_whose_host_is_not_fixed(template: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        tool_row(endpoint_template=template).clean()
    assert "endpoint_template" in excinfo.value.message_dict


@pytest.mark.django_db
def test_tools_sync_refuses_a_code_declared_tool_with_a_steerable_host(
    monkeypatch: Any,
) -> None:
    from agents import services

    bad = ToolDefinition(
        name="steerable",
        description="d",
        params_schema={"type": "object"},
        endpoint="https://api.example.com{suffix}",
    )
    monkeypatch.setattr(services, "SANDBOX_TOOLS", [bad])
    with pytest.raises(ValidationError, match="steerable: The scheme, host and port must be fixed"):
        services.tools_sync()
    assert not Tool.objects.filter(name="steerable").exists()
