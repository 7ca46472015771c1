"""demo_seed: the demo logins and their roles; only the admin is staff."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("username", "password", "group", "admin"),
    [
        ("support", "support-demo", "support", False),
        ("ops", "ops-demo", "ops", False),
        ("admin", "admin-demo", "admin", True),
    ],
)
def test_demo_users_get_their_role_and_only_the_admin_is_staff(
    small_shop: Any, username: str, password: str, group: str, admin: bool
) -> None:
    call_command("demo_seed", stdout=StringIO())

    user = authenticate(username=username, password=password)

    assert user is not None
    assert list(user.groups.values_list("name", flat=True)) == [group]
    assert (user.is_staff, user.is_superuser) == (admin, admin)


def test_reseeding_takes_staff_away_from_an_older_seeds_support_user(
    small_shop: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("support", password="support-demo", is_staff=True)

    call_command("demo_seed", stdout=StringIO())

    support = django_user_model.objects.get(username="support")
    assert not support.is_staff
    assert not support.has_perm("sandbox.inject_faults")
    assert support.has_perm("agents.start_run")
