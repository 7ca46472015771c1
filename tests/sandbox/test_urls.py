import pytest
from django.urls import resolve, reverse


@pytest.mark.parametrize(
    ("name", "args", "path"),
    [
        ("sandbox:orders", ["#W1234567"], "/sandbox/api/orders/%23W1234567"),
        ("sandbox:returns_create", [], "/sandbox/api/returns"),
        ("sandbox:fault_detail", ["orders"], "/sandbox/api/_faults/orders"),
    ],
)
def test_sandbox_is_mounted_under_sandbox_api_in_the_project(settings, name, args, path):
    # The other tests use a sandbox-only URLconf; this one checks the real project mount.
    settings.ROOT_URLCONF = "config.urls"

    assert reverse(name, args=args) == path
    assert resolve(path.replace("%23", "#")).view_name == name
