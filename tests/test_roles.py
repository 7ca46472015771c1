"""The roles as their users meet them: navigation, the fault API, the Django admin."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from sandbox.faults import fault_cache_clear
from sandbox.models import FaultRule, Product
from sandbox.services import faultrule_set

pytestmark = pytest.mark.django_db

FAULT_URL = "/sandbox/api/_faults/promotions"
BREAK_PROMOTIONS = {"enabled": True, "rate_500": 1.0}


def _nav_links(html: str) -> list[tuple[str, str]]:
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S)
    assert nav is not None
    return re.findall(r'<a href="([^"]+)">([^<]+)</a>', nav.group(1))


@pytest.mark.parametrize(
    ("role", "links"),
    [
        ("support_user", [("/", "Assistant"), ("/traces/", "My traces"), ("/api/docs/", "API")]),
        (
            "ops_user",
            [
                ("/", "Assistant"),
                ("/dashboards/", "Overview"),
                ("/dashboards/failures/", "Failures"),
                ("/traces/", "Traces"),
                ("/reviews/", "Reviews"),
                ("/policies/", "Policies"),
                ("/policies/experiments/", "Experiments"),
                ("/traces/jobs/", "Jobs"),
                ("/api/docs/", "API"),
            ],
        ),
        (
            "admin_role_user",
            [
                ("/", "Assistant"),
                ("/dashboards/", "Overview"),
                ("/dashboards/failures/", "Failures"),
                ("/traces/", "Traces"),
                ("/reviews/", "Reviews"),
                ("/tools/", "Tools"),
                ("/policies/", "Policies"),
                ("/policies/experiments/", "Experiments"),
                ("/traces/jobs/", "Jobs"),
                ("/reviews/audit/", "Audit log"),
                ("/admin/", "Admin"),
                ("/api/docs/", "API"),
            ],
        ),
    ],
)
def test_navigation_shows_each_role_only_what_it_may_use(
    client: Any, request: pytest.FixtureRequest, role: str, links: list[tuple[str, str]]
) -> None:
    user = request.getfixturevalue(role)
    client.force_login(user)

    shown = _nav_links(client.get("/traces/").content.decode())

    assert shown == links
    assert all(client.get(href).status_code == 200 for href, _ in shown)


def test_a_user_without_a_role_sees_only_their_traces_and_the_api_docs(
    client: Any, django_user_model: Any
) -> None:
    client.force_login(django_user_model.objects.create_user("norole", password="pw-norole-1"))

    shown = _nav_links(client.get("/traces/").content.decode())

    assert shown == [("/traces/", "My traces"), ("/api/docs/", "API")]
    assert client.get("/").status_code == 403


def test_support_cannot_break_the_shop_through_the_fault_api(
    client: Any, support_user: Any
) -> None:
    faultrule_set(endpoint="promotions", enabled=False)
    before = FaultRule.objects.values().get()
    client.force_login(support_user)

    response = client.put(FAULT_URL, json.dumps(BREAK_PROMOTIONS), content_type="application/json")

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert FaultRule.objects.values().get() == before


def test_support_with_basic_auth_cannot_inject_faults_either(
    client: Any, support_user: Any
) -> None:
    token = base64.b64encode(b"sam:pw-sam-123").decode()

    response = client.put(
        FAULT_URL,
        json.dumps(BREAK_PROMOTIONS),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Basic {token}",
    )

    assert response.status_code == 403
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize("role", ["ops_user", "admin_role_user"])
def test_ops_and_admins_inject_faults(
    client: Any, request: pytest.FixtureRequest, role: str, small_shop: Any
) -> None:
    fault_cache_clear()
    client.force_login(request.getfixturevalue(role))

    response = client.put(FAULT_URL, json.dumps(BREAK_PROMOTIONS), content_type="application/json")

    assert response.status_code == 200
    rule = FaultRule.objects.get(endpoint="promotions")
    assert rule.enabled and rule.rate_500 == 1.0
    fault_cache_clear()
    product = Product.objects.order_by("product_id").first()
    assert product is not None
    promotions = f"/sandbox/api/promotions?product_id={product.product_id}"
    assert client.get(promotions).status_code == 500
    fault_cache_clear()


@pytest.mark.parametrize("role", ["support_user", "ops_user"])
def test_only_admins_open_the_django_admin(
    client: Any, request: pytest.FixtureRequest, role: str
) -> None:
    client.force_login(request.getfixturevalue(role))

    response = client.get("/admin/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_admin_opens_the_django_admin(client: Any, admin_role_user: Any) -> None:
    client.force_login(admin_role_user)

    assert client.get("/admin/").status_code == 200
