# ruff: noqa: F811  (the agent fixture is imported from the repairs tests)
"""The wait_retry error handler: it honours the API's Retry-After, within the handler's cap
and the run's time budget, against a real HTTP API on loopback."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.services import run_execute
from policies.branches import branch_errors
from tests.agents.runtime_helpers import answer, reason, reflect
from tests.agents.test_runtime_policy import publish
from tests.agents.test_runtime_repairs import agent, partner_search  # noqa: F401
from tests.fakes.recording_api import ApiRequest, RecordingAPI
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)


class BusyThenFine:
    """Answers 429 with ``Retry-After`` to the first ``busy`` requests, then 200."""

    def __init__(self, *, retry_after: str, busy: int = 1) -> None:
        self.retry_after, self.busy = retry_after, busy
        self.arrived: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, request: ApiRequest) -> tuple[Any, ...]:
        with self._lock:
            self.arrived.append(time.monotonic())
            if len(self.arrived) <= self.busy:
                return 429, {"detail": "slow down"}, {"Retry-After": self.retry_after}
        return 200, {"results": [{"sku": "CAP-0001", "name": "cap"}]}


def _run(agent: Any, openai_server: Any, settings: Any, api_respond: BusyThenFine) -> Trace:
    with RecordingAPI(respond=api_respond) as api:
        settings.SANDBOX_BASE_URL = api.base_url
        partner_search(agent)
        openai_server.enqueue(
            reason("partner_search", {"term": "cap"}), reflect(True), answer("We have CAP-0001.")
        )
        trace = trace_create(agent_id=agent.pk, query="Do you sell a cap?", llm_backend="openai")
        async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    return trace


def _handled(trace: Trace) -> Any:
    """The action step whose call the handler took over (its result is the observation)."""
    return trace.steps.get(phase="action", details__handler="wait_retry")


def _handler(**bounds: Any) -> Any:
    return publish(
        "error_handler",
        {"tool": "partner_search", "on": "RATE_LIMITED", "action": "wait_retry", **bounds},
    )


def test_it_waits_as_long_as_retry_after_asks_then_the_retry_answers(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    handler = _handler(max_retries=1, max_wait_s=5)
    api = BusyThenFine(retry_after="1")

    trace = _run(agent, openai_server, settings, api)

    assert len(api.arrived) == 2
    # The second request came no sooner than the API asked (a lower bound, not a timing goal).
    assert api.arrived[1] - api.arrived[0] >= 1.0
    failed, retried = trace.steps.filter(phase="action").order_by("step_number")
    assert failed.status_code == 429 and failed.error_type == "RATE_LIMITED"
    assert failed.details["handled_by"] == handler.pk
    assert retried.ok and retried.status_code == 200
    assert retried.details["handler"] == "wait_retry" and retried.details["waited_s"] == 1.0
    assert trace.status == Trace.Status.FINISHED


def test_a_wait_longer_than_the_run_time_budget_allows_is_not_taken(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    settings.AGENT_RUN_SOFT_TIME_LIMIT = 20  # the run's budget: well under the 50 s asked
    _handler(max_retries=1, max_wait_s=60)
    api = BusyThenFine(retry_after="50")

    trace = _run(agent, openai_server, settings, api)

    assert len(api.arrived) == 1
    handled = _handled(trace)
    assert handled.details["gave_up"] == "run_time_budget"
    assert handled.details["asked_s"] == 50.0
    assert trace.status != Trace.Status.RUNNING


def test_a_wait_that_leaves_no_time_to_answer_after_it_is_not_taken(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    # 16 s fit in the run's 20 s, but not with the margin an answer needs after the wait
    # (runtime.RETRY_ANSWER_MARGIN_S, 5 s)
    settings.AGENT_RUN_SOFT_TIME_LIMIT = 20
    _handler(max_retries=1, max_wait_s=60)
    api = BusyThenFine(retry_after="16")

    trace = _run(agent, openai_server, settings, api)

    assert len(api.arrived) == 1
    assert _handled(trace).details["gave_up"] == "run_time_budget"


def test_a_wait_exactly_at_the_handlers_cap_is_taken(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    _handler(max_retries=1, max_wait_s=1)
    api = BusyThenFine(retry_after="1")

    trace = _run(agent, openai_server, settings, api)

    assert len(api.arrived) == 2
    assert _handled(trace).details["waited_s"] == 1.0
    assert trace.status == Trace.Status.FINISHED


def test_a_wait_over_the_handlers_cap_is_not_taken(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    _handler(max_retries=2, max_wait_s=2)
    api = BusyThenFine(retry_after="5")

    trace = _run(agent, openai_server, settings, api)

    assert len(api.arrived) == 1
    assert _handled(trace).details["gave_up"] == "wait_over_cap"


def test_without_retry_after_it_backs_off_and_stops_after_its_retries(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    _handler(max_retries=2, max_wait_s=5)
    api = BusyThenFine(retry_after="", busy=10)  # an empty header: no usable Retry-After

    trace = _run(agent, openai_server, settings, api)

    # the first call and two retries, 1 s then 2 s apart (a doubling backoff)
    assert len(api.arrived) == 3
    assert api.arrived[1] - api.arrived[0] >= 1.0 and api.arrived[2] - api.arrived[1] >= 2.0
    handled = _handled(trace)
    assert handled.status_code == 429 and handled.error_type == "RATE_LIMITED"
    assert handled.details["retries"] == 2 and handled.details["waited_s"] == 3.0


@pytest.mark.parametrize(
    ("branch", "error"),
    [
        ({"action": "wait_retry", "max_retries": 4}, "max_retries must be between 1 and 3"),
        ({"action": "wait_retry", "max_wait_s": 0}, "max_wait_s must be above 0 and at most 60"),
        ({"action": "wait_retry", "max_wait_s": 61}, "max_wait_s must be above 0 and at most 60"),
        ({"action": "retry_once", "max_retries": 2}, "at most 1 retry is allowed"),
        ({"action": "wait_retry", "max_retries": "many"}, "max_retries must be an integer"),
        ({"action": "wait_retry", "max_wait_s": "long"}, "max_wait_s must be a number"),
    ],
)
def test_retry_bounds_are_validated(branch: dict[str, Any], error: str) -> None:
    errors = branch_errors("error_handler", {"tool": "t", "on": "RATE_LIMITED", **branch})
    assert any(error in e for e in errors), errors
