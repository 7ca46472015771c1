"""Print a user's API token key, for `Authorization: Token <key>`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.api.tokens import api_token_get_or_create, api_token_rotate


class Command(BaseCommand):
    help = (
        "Print USERNAME's API token key on stdout (created if missing); --rotate replaces it. "
        'Use it as `curl -H "Authorization: Token $(manage.py api_token USERNAME)" ...`.'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--rotate", action="store_true", help="Replace the token; the old key stops working."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(options["username"])
        except user_model.DoesNotExist as exc:
            raise CommandError(f"No user {options['username']!r}.") from exc
        if not user.is_active:
            raise CommandError(f"User {options['username']!r} is inactive; a token would not work.")
        rotate = api_token_rotate if options["rotate"] else api_token_get_or_create
        # Only the key on stdout, so that TOKEN=$(manage.py api_token USERNAME) works.
        self.stdout.write(rotate(user=user).key)
