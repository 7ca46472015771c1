"""Fixtures shared by the review tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policies.conftest import failed_trace, make_strategy  # noqa: F401
from traces.models import Trace
from traces.services import trace_create


@pytest.fixture
def run(support_agent: Any, support_user: Any) -> Trace:
    """A support user's finished run, answered (the run that feedback is given on)."""
    trace = trace_create(
        agent_id=support_agent.pk,
        query="What does the Aurora jacket cost?",
        llm_backend="simulated",
        created_by_id=support_user.pk,
    )
    Trace.objects.filter(pk=trace.pk).update(status="finished", final_answer="It costs 3 EUR.")
    return trace
