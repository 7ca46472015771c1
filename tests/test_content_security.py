"""The Content-Security-Policy: sent with every HTML page, never with JSON; a view's own
directives win over the defaults, the rest still apply; empty turns it off."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse, JsonResponse
from django.test import RequestFactory

from config.content_security import content_security_policy, directives

pytestmark = pytest.mark.django_db


def test_html_pages_carry_the_policy_and_the_api_does_not(client: Any, support_user: Any) -> None:
    client.force_login(support_user)
    page = client.get("/")
    assert page.status_code == 200
    policy = directives(page["Content-Security-Policy"])
    assert policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    api = client.get("/api/traces/", HTTP_ACCEPT="application/json")
    assert api.status_code == 200 and "Content-Security-Policy" not in api


def test_no_page_has_an_inline_script_or_handler(client: Any, admin_role_user: Any) -> None:
    """What the policy would refuse, read off the pages themselves."""
    client.force_login(admin_role_user)
    for path in (
        "/",
        "/dashboards/",
        "/traces/",
        "/reviews/",
        "/tools/",
        "/policies/",
        "/api/docs/",
    ):
        page = client.get(path)
        assert page.status_code == 200, path
        html = page.content.decode()
        for tag in html.split("<script")[1:]:
            opening = tag.split(">", 1)[0]
            assert "src=" in opening or 'type="application/json"' in opening, (path, opening)
        assert " onchange=" not in html and " onclick=" not in html, path


def test_a_views_own_directives_win_and_the_rest_still_apply(settings: Any) -> None:
    settings.CONTENT_SECURITY_POLICY = "default-src 'self'; script-src 'self'"

    def view(request: Any) -> HttpResponse:
        response = HttpResponse("<p>framed</p>")
        response["Content-Security-Policy"] = "frame-ancestors https://a.example"
        return response

    response = content_security_policy(view)(RequestFactory().get("/"))
    assert directives(response["Content-Security-Policy"]) == {
        "default-src": "'self'",
        "script-src": "'self'",
        "frame-ancestors": "https://a.example",
    }
    json_response = content_security_policy(lambda request: JsonResponse({}))(
        RequestFactory().get("/")
    )
    assert "Content-Security-Policy" not in json_response


def test_an_empty_setting_sends_none(settings: Any) -> None:
    settings.CONTENT_SECURITY_POLICY = ""
    response = content_security_policy(lambda request: HttpResponse("<p>x</p>"))(
        RequestFactory().get("/")
    )
    assert "Content-Security-Policy" not in response


def test_the_async_path_sets_it_too(settings: Any) -> None:
    settings.CONTENT_SECURITY_POLICY = "script-src 'self'"

    async def view(request: Any) -> HttpResponse:
        return HttpResponse("<p>x</p>")

    middleware = content_security_policy(view)
    assert inspect.iscoroutinefunction(middleware)
    response = async_to_sync(middleware)(RequestFactory().get("/"))
    assert response["Content-Security-Policy"] == "script-src 'self'"
