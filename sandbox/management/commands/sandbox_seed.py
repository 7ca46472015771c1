"""Regenerate the sandbox shop from a seed."""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sandbox.generate import shop_generate


class Command(BaseCommand):
    help = "Replace the sandbox shop data (not fault rules) with a world generated from a seed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--users", type=int, default=500)
        parser.add_argument("--orders", type=int, default=1000)
        parser.add_argument("--products", type=int, default=50)

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        counts = shop_generate(
            seed=options["seed"],
            users=options["users"],
            orders=options["orders"],
            products=options["products"],
        )
        for name, count in counts.items():
            self.stdout.write(f"{name}: {count}")
        elapsed = time.monotonic() - started
        message = f"sandbox shop generated with seed {options['seed']} in {elapsed:.1f} s"
        self.stdout.write(self.style.SUCCESS(message))
