"""With DEBUG off, errors show the app's own pages: no settings, no URL list, a way home."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.config.urls_errors")]

# What Django's technical pages show and the app's pages must not.
LEAKS = ("DEBUG", "CELERY_BROKER_URL", "REDIS_URL", "CHANNEL_LAYERS", "urlpatterns", "api/schema/")


@pytest.fixture(autouse=True)
def debug_off(settings):
    settings.DEBUG = False


def assert_app_error_page(response, *, status: int, template: str, heading: str) -> None:
    body = response.content.decode()
    assert response.status_code == status
    assert template in [t.name for t in response.templates]
    assert heading in body
    assert 'href="/"' in body
    assert "/static/css/app" in body
    for leak in LEAKS:
        assert leak not in body


def test_an_unknown_page_shows_the_app_404_page(client):
    response = client.get("/no-such-page")

    assert_app_error_page(response, status=404, template="404.html", heading="Page not found")


def test_an_unknown_page_for_a_signed_in_user_shows_the_same_page(client, ops_user):
    client.force_login(ops_user)

    response = client.get("/no-such-page")

    assert_app_error_page(response, status=404, template="404.html", heading="Page not found")


def test_a_crash_shows_the_app_500_page_without_the_error():
    client = Client(raise_request_exception=False)

    response = client.get("/_test/crash/")

    assert_app_error_page(
        response, status=500, template="500.html", heading="Something went wrong on our side"
    )
    assert "boom" not in response.content.decode()


def test_a_forbidden_page_shows_the_app_403_page_with_a_login_link(client):
    response = client.get("/_test/forbidden/")

    assert_app_error_page(response, status=403, template="403.html", heading="have access")
    assert 'href="/accounts/login/"' in response.content.decode()


def test_a_bad_request_shows_the_app_400_page(client):
    response = client.get("/_test/bad-request/")

    assert_app_error_page(response, status=400, template="400.html", heading="Bad request")


def test_a_form_without_its_csrf_token_shows_the_app_page():
    client = Client(enforce_csrf_checks=True)

    response = client.post("/accounts/login/", {"username": "x", "password": "y"})

    assert_app_error_page(
        response, status=403, template="403_csrf.html", heading="This form has expired"
    )


@pytest.mark.parametrize("path", ["/api/no-such-endpoint/", "/api/traces/not-a-trace/"])
def test_api_not_found_stays_json(client, ops_user, path):
    client.force_login(ops_user)

    response = client.get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"detail"}


def test_api_crash_is_json_without_the_error():
    client = Client(raise_request_exception=False)

    response = client.get("/api/_test/crash/")

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "A server error occurred."}


def test_api_permission_errors_stay_json(client):
    response = client.get("/api/traces/")

    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"detail"}
