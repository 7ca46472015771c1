"""Trace services redact what they store: the query, the final answer, an abort's detail."""

from __future__ import annotations

from typing import Any

import pytest

from traces.models import Trace
from traces.redaction import REDACTED
from traces.services import trace_abort, trace_create, trace_finish

pytestmark = pytest.mark.django_db

CARD = "5555 5555 5555 4444"


def test_a_card_number_in_the_query_is_not_stored(support_agent: Any) -> None:
    trace = trace_create(
        agent_id=support_agent.pk,
        query=f"Refund the charge on card {CARD} for order #W1001549",
        llm_backend="simulated",
    )
    stored = Trace.objects.get(pk=trace.pk).query
    assert stored == f"Refund the charge on card {REDACTED} for order #W1001549"


def test_the_final_answer_is_redacted(support_agent: Any) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    trace_finish(
        trace_id=str(trace.pk),
        status=Trace.Status.FINISHED,
        final_answer="Your reset password=Tmp-77aa, card 4111111111111111 on file.",
    )
    trace.refresh_from_db()
    assert trace.final_answer == f"Your reset password={REDACTED}, card {REDACTED} on file."


def test_an_abort_detail_is_redacted(support_agent: Any, settings: Any) -> None:
    settings.LLM_API_KEY = "configured-llm-key-3141592"
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    trace_abort(
        trace_id=str(trace.pk),
        error_type="UNKNOWN",
        detail="AuthenticationError: key configured-llm-key-3141592 rejected",
    )
    step = trace.steps.get()
    assert step.error_detail == f"AuthenticationError: key {REDACTED} rejected"
