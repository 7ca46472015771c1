"""The wait a failed call's Retry-After asks for reaches the model and the customer.

During an hour's maintenance (503, ``Retry-After: 3600``, body ``{"detail": "down"}``) the
header lived only in the step's details: the model saw "down" and told the customer to
try again in a few minutes.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.runtime import wait_phrase
from agents.services import run_execute
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.models import Trace
from traces.services import trace_create


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.4, "1 s"), (20, "20 s"), (300, "5 min"), (3600, "1 h")]
)
def test_a_wait_reads_in_words(seconds: float, words: str) -> None:
    assert wait_phrase(seconds) == words


@pytest.mark.django_db(transaction=True)
def test_an_hours_maintenance_is_told_as_an_hour(
    support_agent: Any, error_rules: None, settings: Any
) -> None:
    settings.LLM_SIM_ERROR_RATES = {}

    def down(request: ApiRequest) -> tuple[Any, ...]:
        return 503, {"detail": "down"}, {"Retry-After": "3600"}

    with RecordingAPI(respond=down) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        trace = trace_create(
            agent_id=support_agent.pk,
            query="Where is my order #W1000001?",
            llm_backend="simulated",
        )
        async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()

    failed = trace.steps.filter(phase="action", ok=False).first()
    assert failed is not None and failed.status_code == 503
    assert "Retry-After: the API asks to wait 1 h before calling again." in (
        failed.response_summary
    )
    assert "try again in 1 h" in trace.final_answer, trace.final_answer
    assert "few minutes" not in trace.final_answer
    # Not worth retrying within the answer: one call, not two.
    assert len(api.requests) == 1
    assert trace.status != Trace.Status.FINISHED or trace.outcome != "answered_from_data"
