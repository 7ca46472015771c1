"""Seed the demo: sandbox shop data, tools, the support agent, roles and demo users."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from agents.services import agent_ensure_default, tools_sync
from traces.classifier import errorrules_seed_defaults

# The groups are defined (and their permissions set) by the reviews app's roles_sync
# command: the runtime sits below reviews and must not import it.
DEMO_USERS = [
    # username, password, group, is_staff and is_superuser (only admins use /admin/)
    ("support", "support-demo", "support", False),
    ("ops", "ops-demo", "ops", False),
    ("admin", "admin-demo", "admin", True),
]


class Command(BaseCommand):
    help = "Seed sandbox data (if empty), tools, the support agent and demo users per role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--reset-shop", action="store_true", help="Regenerate shop data.")
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="Do nothing when the installation already has users (bin/serve's first start).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django.contrib.auth import get_user_model

        from sandbox.models import Order

        if options["if_empty"] and get_user_model().objects.exists():
            return

        if options["reset_shop"] or not Order.objects.exists():
            call_command("sandbox_seed", seed=options["seed"], stdout=self.stdout)
        call_command("kb_sync", stdout=self.stdout)
        with transaction.atomic():
            errorrules_seed_defaults()
            agent = agent_ensure_default()
            tools = tools_sync(agents=[agent])
            call_command("roles_sync", stdout=self.stdout)
            self._users()
        self.stdout.write(f"agent {agent.slug!r} with {len(tools)} tools")
        self.stdout.write("demo logins:")
        for username, password, role, _ in DEMO_USERS:
            self.stdout.write(f"  {username:<8} / {password:<13} ({role})")
        sample = Order.objects.order_by("order_id").values_list("order_id", flat=True).first()
        if sample:
            self.stdout.write(f'try: python manage.py ask "Where is my order {sample}?"')

    def _users(self) -> None:
        user_model = get_user_model()
        for username, password, role, admin in DEMO_USERS:
            user, created = user_model.objects.get_or_create(username=username)
            if created:
                user.set_password(password)
            # Re-asserted on every seed: older seeds made every demo user staff.
            user.is_staff = user.is_superuser = admin
            user.save()
            user.groups.set([Group.objects.get(name=role)])
