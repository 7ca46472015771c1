"""The app works with no internet: no page, the API docs included, loads from another origin."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db

# Every attribute or CSS url() through which a browser fetches something or navigates.
REFERENCE = re.compile(
    r"""(?:\b(?:src|href|action|poster|data)\s*=\s*|url\()\s*["']?([^"')\s>]+)"""
)


def _references(page: str) -> list[str]:
    return REFERENCE.findall(page)


def _is_external(url: str) -> bool:
    # Protocol-relative and absolute URLs leave the server unless they name it.
    return re.match(r"(?i)^(?:[a-z][a-z0-9+.-]*:)?//", url) is not None and not re.match(
        r"(?i)^(?:https?:)?//testserver(?:[:/]|$)", url
    )


@pytest.fixture
def admin(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", password="pw-root-123")


@pytest.fixture
def admin_client(client: Client, admin: Any) -> Client:
    client.force_login(admin)
    return client


@pytest.fixture
def trace(admin: Any, support_agent: Any) -> Trace:
    return trace_create(
        agent_id=support_agent.pk, query="q", llm_backend="simulated", created_by_id=admin.pk
    )


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/traces/",
        "/traces/{trace}/",
        "/traces/{trace}/run/",
        "/reviews/",
        "/tools/",
        "/dashboards/",
        "/dashboards/failures/",
        "/admin/",
        "/admin/agents/tool/",
        "/api/docs/",
        "/api/traces/?format=api",
    ],
)
def test_pages_reference_only_this_server(admin_client: Client, trace: Trace, path: str) -> None:
    response = admin_client.get(path.format(trace=trace.pk))

    assert response.status_code == 200
    page = response.content.decode()
    assert [url for url in _references(page) if _is_external(url)] == []


def test_dashboards_load_chart_js_from_the_vendored_static_files(admin_client: Client) -> None:
    page = admin_client.get("/dashboards/failures/").content.decode()
    scripts = [url for url in _references(page) if url.endswith(".js")]

    assert "/static/vendor/chart.umd.js" in scripts
    assert "/static/js/charts.js" in scripts
    for url in scripts:
        assert admin_client.get(url).status_code == 200, url


def test_login_page_references_only_this_server(client: Client) -> None:
    response = client.get("/accounts/login/")

    assert response.status_code == 200
    assert [url for url in _references(response.content.decode()) if _is_external(url)] == []


def test_api_docs_load_swagger_ui_from_the_vendored_static_files(admin_client: Client) -> None:
    page = admin_client.get("/api/docs/").content.decode()
    assets = [url for url in _references(page) if url.startswith("/static/")]

    assert any(url.endswith("swagger-ui-bundle.js") for url in assets)
    assert any(url.endswith("swagger-ui.css") for url in assets)
    for url in assets:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert response.getvalue()


@pytest.mark.parametrize(
    ("url", "external"),
    [
        ("https://cdn.jsdelivr.net/npm/swagger-ui-dist@latest/swagger-ui.css", True),
        ("//unpkg.com/htmx.org", True),
        ("http://testserver.evil.net/x.js", True),
        ("http://testserver/static/app.css", False),
        ("/static/vendor/htmx.min.js", False),
        ("#main", False),
    ],
)
def test_the_external_reference_check_itself(url: str, external: bool) -> None:
    assert _is_external(url) is external
