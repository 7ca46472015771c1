"""The three roles as Django groups, and the permissions each one holds.

Each app declares the permissions it owns in its models' ``Meta`` and checks them with
``user.has_perm``; this module, in the top layer, is the one place that hands them out.
Only admins are ``is_staff`` (the Django admin): the groups never grant admin access.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db import transaction

from agents.services import START_RUN
from policies.experiments import RUN_EXPERIMENTS
from policies.selectors import MANAGE_ROLLOUTS, VIEW_POLICIES
from reviews.selectors import REVIEW_STRATEGIES
from traces.selectors import INGEST_TRACES, VIEW_ALL_TRACES, VIEW_JOBS

ROLE_SUPPORT = "support"
ROLE_OPS = "ops"
ROLE_ADMIN = "admin"

# The sandbox is imported by nothing of the project; its permission is named, not imported.
INJECT_FAULTS = "sandbox.inject_faults"

# Least privilege: support chats and sees its own runs; ops add the fleet-wide tools.
# Admins hold every permission (see roles_sync) and are made staff and superuser per user.
# Customer memory: support agents and ops see a customer's remembered facts and delete them.
CUSTOMER_MEMORY = ("agents.view_customerfact", "agents.delete_customerfact")

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    ROLE_SUPPORT: (START_RUN, *CUSTOMER_MEMORY),
    ROLE_OPS: (
        START_RUN,
        *CUSTOMER_MEMORY,
        VIEW_ALL_TRACES,
        REVIEW_STRATEGIES,
        INJECT_FAULTS,
        VIEW_POLICIES,
        VIEW_JOBS,
        MANAGE_ROLLOUTS,
        RUN_EXPERIMENTS,
        INGEST_TRACES,
    ),
}


def _permissions(names: tuple[str, ...]) -> list[Permission]:
    found = []
    for name in names:
        app_label, codename = name.split(".", 1)
        # A typo or a missing migration must fail loudly rather than grant nothing.
        found.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return found


def roles_sync() -> dict[str, int]:
    """Create the role groups and set their permissions to exactly what this module says.

    Returns the number of permissions each group holds.
    """
    counts: dict[str, int] = {}
    with transaction.atomic():
        for role, names in ROLE_PERMISSIONS.items():
            group, _ = Group.objects.get_or_create(name=role)
            group.permissions.set(_permissions(names))
            counts[role] = len(names)
        admin, _ = Group.objects.get_or_create(name=ROLE_ADMIN)
        everything = list(Permission.objects.all())
        admin.permissions.set(everything)
        counts[ROLE_ADMIN] = len(everything)
    return counts
