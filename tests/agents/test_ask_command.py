"""`manage.py ask` prints every step as it happens and a grounded final answer."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from sandbox.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def test_ask_prints_steps_and_grounded_answer(
    live_sandbox: str, small_shop: Any, support_agent: Any, error_rules: Any, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}
    order = Order.objects.first()
    assert order is not None
    out = StringIO()
    call_command("ask", f"Where is my order {order.order_id}?", stdout=out)
    text = out.getvalue()
    assert "SIMULATED" in text
    assert "reasoning" in text and "action" in text and "reflection" in text
    assert "get_order -> 200" in text
    assert "status: finished" in text
    assert "answer: " in text and order.order_id in text.split("answer:")[1]


def test_ask_explains_a_missing_setup(db: None) -> None:
    with pytest.raises(CommandError, match="demo_seed"):
        call_command("ask", "Where is my order #W1234567?")


def test_ask_refuses_an_empty_question(support_agent: Any) -> None:
    with pytest.raises(CommandError, match="empty"):
        call_command("ask", "   ")


def test_ask_refuses_a_question_over_the_limit(support_agent: Any, settings: Any) -> None:
    from traces.models import Trace

    settings.AGENT_QUERY_MAX_CHARS = 10

    with pytest.raises(CommandError, match="11 characters long; the limit is 10"):
        call_command("ask", "x" * 11)
    assert not Trace.objects.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # What Python makes of the bytes \xff\xfe from a terminal that is not UTF-8.
        (["order \udcff\udcfe please"], "not valid UTF-8"),
        (["order\x00 please"], "NUL"),
        (["Where is my order #W1234567?", "--customer-id", "x" * 65], "--customer-id"),
        (["Where is my order #W1234567?", "--customer-id", "bob smith"], "--customer-id"),
    ],
)
def test_ask_refuses_input_the_database_cannot_store_with_a_message(
    support_agent: Any, argv: list[str], message: str
) -> None:
    from traces.models import Trace

    with pytest.raises(CommandError, match=message):
        call_command("ask", *argv)
    assert not Trace.objects.exists()
