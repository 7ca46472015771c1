from io import StringIO

import pytest
from django.core.management import call_command

from sandbox.models import Order, ShopUser


@pytest.mark.django_db
def test_sandbox_seed_command_generates_and_prints_counts():
    out = StringIO()

    call_command(
        "sandbox_seed",
        "--seed",
        "3",
        "--users",
        "8",
        "--orders",
        "12",
        "--products",
        "4",
        stdout=out,
    )

    output = out.getvalue()
    assert "users: 8" in output
    assert "orders: 12" in output
    assert "products: 4" in output
    assert "articles: 25" in output
    assert ShopUser.objects.count() == 8
    assert Order.objects.count() == 12
