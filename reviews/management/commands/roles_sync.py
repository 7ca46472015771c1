"""Re-assert the role groups and their permissions (idempotent)."""

from typing import Any

from django.core.management.base import BaseCommand

from reviews.roles import roles_sync


class Command(BaseCommand):
    help = "Create the support, ops and admin groups and set their permissions."

    def handle(self, *args: Any, **options: Any) -> None:
        for role, count in roles_sync().items():
            self.stdout.write(f"role {role!r}: {count} permissions")
