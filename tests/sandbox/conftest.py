"""Sandbox test fixtures: a small generated shop, fault-injecting clients, a fresh fault cache."""

import base64

import pytest
from django.contrib.auth.models import Permission

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
def fault_injector(django_user_model):
    """A user holding the sandbox's own permission; the project's roles are not needed."""
    user = django_user_model.objects.create_user(username="faults-admin", password="s3cret-pass")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="sandbox", codename="inject_faults")
    )
    return user


@pytest.fixture
def injector_client(client, fault_injector):
    client.force_login(fault_injector)
    return client


@pytest.fixture
def basic_auth_header(fault_injector) -> dict[str, str]:
    token = base64.b64encode(b"faults-admin:s3cret-pass").decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}
