"""The role groups: what the migration creates and what roles_sync re-asserts."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from reviews.roles import roles_sync

pytestmark = pytest.mark.django_db

MEMORY = {"agents.view_customerfact", "agents.delete_customerfact"}
SUPPORT = {"agents.start_run", *MEMORY}
OPS = {
    "agents.start_run",
    *MEMORY,
    "traces.view_all_traces",
    "reviews.review_strategies",
    "sandbox.inject_faults",
    "policies.view_policyversion",
    "traces.view_job",
    "policies.run_experiments",
    "policies.manage_rollouts",
    "traces.ingest_traces",
}


def _held(role: str) -> set[str]:
    return {
        f"{app_label}.{codename}"
        for app_label, codename in Group.objects.get(name=role).permissions.values_list(
            "content_type__app_label", "codename"
        )
    }


def _assert_roles() -> None:
    assert _held("support") == SUPPORT
    assert _held("ops") == OPS
    assert _held("admin") == {
        f"{app_label}.{codename}"
        for app_label, codename in Permission.objects.values_list(
            "content_type__app_label", "codename"
        )
    }


def test_roles_sync_creates_the_groups_with_least_privilege() -> None:
    Group.objects.all().delete()

    roles_sync()

    _assert_roles()


def test_roles_sync_takes_back_a_permission_granted_by_hand() -> None:
    roles_sync()
    Group.objects.get(name="support").permissions.add(
        Permission.objects.get(codename="inject_faults")
    )

    call_command("roles_sync", stdout=open("/dev/null", "w"))  # noqa: SIM115

    assert _held("support") == SUPPORT


def test_the_data_migrations_create_the_same_groups() -> None:
    Group.objects.all().delete()
    state = MigrationLoader(connection).project_state(
        [("reviews", "0010_customer_memory_roles"), ("traces", "0011_otel_ingest")]
    )
    roles = importlib.import_module("reviews.migrations.0003_roles")
    ops_views = importlib.import_module("reviews.migrations.0004_ops_view_policies_and_jobs")
    ops_experiments = importlib.import_module("reviews.migrations.0009_ops_run_experiments")

    roles.create_roles(state.apps, None)
    ops_views.grant_ops(state.apps, None)
    ops_experiments.grant_ops(state.apps, None)
    importlib.import_module("reviews.migrations.0007_ops_manage_rollouts").grant_ops(
        state.apps, None
    )
    importlib.import_module("traces.migrations.0011_otel_ingest").grant_ops_ingest(state.apps, None)
    importlib.import_module("reviews.migrations.0010_customer_memory_roles").grant_memory(
        state.apps, None
    )

    _assert_roles()


def test_the_admin_group_never_makes_anyone_staff(django_user_model: Any) -> None:
    roles_sync()
    user = django_user_model.objects.create_user("grp-admin", password="pw-grp-admin")
    user.groups.add(Group.objects.get(name="admin"))

    assert not user.is_staff
    assert user.has_perm("sandbox.inject_faults")
