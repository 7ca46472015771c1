"""Fixtures of the sandbox tests: a small generated shop, staff clients and a fresh fault cache."""

import base64

import pytest

from sandbox.faults import fault_cache_clear
from sandbox.generate import shop_generate

API = "/sandbox/api"


@pytest.fixture(autouse=True)
def _sandbox_urls(settings):
    settings.ROOT_URLCONF = "tests.sandbox.urls"


@pytest.fixture(autouse=True)
def _fresh_fault_cache():
    # Rules are cached per process for a second; one test's rules must not leak into the next.
    fault_cache_clear()
    yield
    fault_cache_clear()


@pytest.fixture
def shop(db) -> dict[str, int]:
    """A small generated shop (seed 7)."""
    return shop_generate(seed=7, users=20, orders=40, products=6)


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user(
        username="faults-admin", password="s3cret-pass", is_staff=True
    )


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def basic_auth_header(staff_user) -> dict[str, str]:
    token = base64.b64encode(b"faults-admin:s3cret-pass").decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}
