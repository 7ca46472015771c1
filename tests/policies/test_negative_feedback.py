"""The negative-feedback guard on its own rows, independent of any model's script.

Two strategies for one error signature that failed their replay or were deprecated stop
the engine for that signature and open one ``negative_feedback`` review item; a person
closing that item resets the count.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies.models import ReflexionProposal, Strategy
from policies.reflexion import (
    failures_of_trace,
    negative_feedback_stop,
    reflexion_for_failure,
)
from reviews.models import AuditLog, ReviewItem
from reviews.services import review_item_approve
from tests.agents.runtime_helpers import use_fake_llm
from tests.fakes.openai_server import FakeOpenAIServer
from traces.models import Job, Trace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def publish_at_once(settings: Any) -> None:
    """Approvals here publish the active version at once; the canary path has its own
    tests (tests/policies/test_rollouts.py)."""
    settings.POLICY_PUBLISH = "at_once"


SIGNATURE = "UNAUTHORIZED|get_order"


@pytest.fixture
def trace(failed_trace: Any) -> Trace:
    return failed_trace(status_code=401, error_type="UNAUTHORIZED")


@pytest.fixture
def facts(trace: Trace) -> Any:
    [found] = failures_of_trace(trace)
    assert found.signature == SIGNATURE
    return found


def _failed_replay(trace: Trace, *, signature: str = SIGNATURE, reason: str = "") -> None:
    ReflexionProposal.objects.create(
        trace=trace,
        step_number=1,
        error_type=signature.split("|")[0],
        error_signature=signature,
        outcome=ReflexionProposal.Outcome.REJECTED,
        reason=reason or "replay failed: get_order -> 401",
        payload={},
    )


def _deprecated(make_strategy: Any, *, tool: str = "get_order", text: str = "a") -> Strategy:
    return make_strategy(
        kind="prompt_hint",
        branch={"text": f"Refresh the token {text}.", "tool": tool},
        tool_name=tool,
        error_type="UNAUTHORIZED",
        status=Strategy.Status.DEPRECATED,
    )


def test_one_failed_replay_does_not_stop_the_engine(trace: Trace, facts: Any) -> None:
    _failed_replay(trace)

    assert negative_feedback_stop(facts) == ""
    assert not ReviewItem.objects.exists() and not AuditLog.objects.exists()


def test_two_failed_replays_stop_the_signature_and_ask_a_person(trace: Trace, facts: Any) -> None:
    _failed_replay(trace)
    _failed_replay(trace)

    stop = negative_feedback_stop(facts)

    assert stop == f"2 earlier strategies for {SIGNATURE} failed; sent to review"
    item = ReviewItem.objects.get()
    assert (item.reason, item.status, item.error_signature) == (
        "negative_feedback",
        "open",
        SIGNATURE,
    )
    assert item.strategy is None
    assert item.detail.startswith(f"For {SIGNATURE}, 2 proposals failed their replay;")
    audit = AuditLog.objects.get(action="reflexion.stop")
    assert (audit.target, audit.details, audit.actor_kind) == (SIGNATURE, {"failed": 2}, "system")
    # while that item is open the signature stays stopped, with no second item
    assert negative_feedback_stop(facts) == "an open review already holds this error signature"
    assert ReviewItem.objects.count() == 1


def test_a_failed_replay_and_a_deprecated_strategy_add_up(
    trace: Trace, facts: Any, make_strategy: Any
) -> None:
    _failed_replay(trace)
    _deprecated(make_strategy)

    assert negative_feedback_stop(facts).startswith("2 earlier strategies")
    # The item counts what it counted: one refuted proposal and one retired strategy (a
    # trial's item said "2 strategies" where one strategy existed).
    assert ReviewItem.objects.get().detail.startswith(
        f"For {SIGNATURE}, 1 proposal failed its replay and 1 strategy was deprecated;"
    )


def test_two_deprecated_strategies_stop_the_signature(facts: Any, make_strategy: Any) -> None:
    _deprecated(make_strategy, text="a")
    _deprecated(make_strategy, text="b")

    assert negative_feedback_stop(facts).startswith("2 earlier strategies")


def test_only_this_signatures_failed_replays_and_deprecations_count(
    trace: Trace, facts: Any, make_strategy: Any
) -> None:
    # another signature, a gate rejection, a stop, and another tool's deprecated strategy
    _failed_replay(trace, signature="UNAUTHORIZED|get_return_status")
    _failed_replay(trace, reason="actionable: names unknown tools: x")
    ReflexionProposal.objects.create(
        trace=trace,
        step_number=1,
        error_type="UNAUTHORIZED",
        error_signature=SIGNATURE,
        outcome=ReflexionProposal.Outcome.STOPPED,
        reason="replay failed earlier",
        payload={},
    )
    _deprecated(make_strategy, tool="get_return_status")
    make_strategy(
        kind="prompt_hint",
        branch={"text": "Refresh the token.", "tool": "get_order"},
        error_type="UNAUTHORIZED",
        status=Strategy.Status.ACTIVE,
    )
    _failed_replay(trace)

    assert negative_feedback_stop(facts) == ""
    assert not ReviewItem.objects.exists()


def test_a_person_closing_the_stop_resets_the_count(
    trace: Trace, facts: Any, make_strategy: Any, ops_user: Any
) -> None:
    _failed_replay(trace)
    _deprecated(make_strategy, text="old")
    negative_feedback_stop(facts)
    first = ReviewItem.objects.get()

    review_item_approve(item_id=first.pk, user=ops_user, note="upstream fixed")

    # what failed before the decision is forgiven: one new failure is not enough
    assert negative_feedback_stop(facts) == ""
    _failed_replay(trace)
    assert negative_feedback_stop(facts) == ""
    _deprecated(make_strategy, text="new")
    assert negative_feedback_stop(facts).startswith("2 earlier strategies")
    assert list(ReviewItem.objects.order_by("created_at").values_list("status", flat=True)) == [
        "approved",
        "open",
    ]


def test_a_stopped_signature_is_recorded_without_asking_the_model_or_replaying(
    trace: Trace, facts: Any, settings: Any, openai_server: FakeOpenAIServer
) -> None:
    use_fake_llm(settings, openai_server)
    _failed_replay(trace)
    _failed_replay(trace)

    record = reflexion_for_failure(facts, auto_approve=True)

    assert record.outcome == ReflexionProposal.Outcome.STOPPED
    assert record.reason == f"2 earlier strategies for {SIGNATURE} failed; sent to review"
    assert (record.origin, record.payload) == ("none", {})
    assert not openai_server.requests
    assert not Job.objects.filter(kind=Job.Kind.REPLAY).exists()
    assert not Strategy.objects.exists()
