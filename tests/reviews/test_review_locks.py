"""Review locks expire, and what approving each kind of item does to the policy tree."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from policies.models import PolicyVersion, Strategy
from policies.reflexion import FailureFacts, negative_feedback_stop
from policies.services import strategy_activate, strategy_outcome_record
from reviews.models import AuditLog, ReviewItem
from reviews.services import (
    ReviewConflict,
    review_item_approve,
    review_item_lock,
    review_item_reject,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def publish_at_once(settings: Any) -> None:
    """Approvals here publish the active version at once; the canary path has its own
    tests (tests/policies/test_rollouts.py)."""
    settings.POLICY_PUBLISH = "at_once"


# The lock's documented lifetime (reviews.services.review_item_lock): 15 minutes.
LOCK = timedelta(minutes=15)


@pytest.fixture
def item(make_strategy: Any) -> ReviewItem:
    strategy = make_strategy(status=Strategy.Status.IN_REVIEW)
    return ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)


@pytest.fixture
def other(django_user_model: Any, roles: None) -> Any:
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("piet", password="pw-piet-123")
    user.groups.add(Group.objects.get(name="ops"))
    return user


def _locked(item: ReviewItem, user: Any, *, age: timedelta) -> None:
    review_item_lock(item_id=item.pk, user=user)
    ReviewItem.objects.filter(pk=item.pk).update(locked_at=timezone.now() - age)


def test_the_item_page_says_until_when_the_lock_holds(
    item: ReviewItem, ops_user: Any, other: Any, client: Any
) -> None:
    _locked(item, ops_user, age=timedelta(minutes=5))
    item.refresh_from_db()
    until = timezone.localtime(item.locked_at + LOCK).strftime("%H:%M")

    client.force_login(other)
    page = client.get(f"/reviews/{item.pk}/").content.decode()
    assert f"once they leave it for 15 minutes (after {until})." in page

    client.force_login(ops_user)
    page = client.get(f"/reviews/{item.pk}/").content.decode()
    # Opening it again renews the holder's lock: 15 minutes from now.
    item.refresh_from_db()
    renewed = timezone.localtime(item.locked_at + LOCK).strftime("%H:%M")
    assert f"You hold this item's lock until {renewed}:" in page


def test_the_item_page_links_the_open_neighbours_except_ones_others_hold(
    make_strategy: Any, ops_user: Any, other: Any, client: Any
) -> None:
    first, held, middle, last = (
        ReviewItem.objects.create(
            strategy=make_strategy(status=Strategy.Status.IN_REVIEW),
            reason=ReviewItem.Reason.LOW_CONFIDENCE,
        )
        for _ in range(4)
    )
    client.force_login(ops_user)
    # The reviewer opened the first item (and holds its lock); a colleague holds another.
    client.get(f"/reviews/{first.pk}/")
    _locked(held, other, age=timedelta(minutes=1))

    page = client.get(f"/reviews/{middle.pk}/").content.decode()

    assert f'<a href="/reviews/{first.pk}/" rel="prev">' in page
    assert f'<a href="/reviews/{last.pk}/" rel="next">' in page
    assert f"/reviews/{held.pk}/" not in page


@pytest.mark.parametrize("decide", [review_item_approve, review_item_reject])
def test_a_fresh_lock_keeps_others_out_until_it_expires(
    item: ReviewItem, ops_user: Any, other: Any, decide: Any
) -> None:
    _locked(item, ops_user, age=LOCK - timedelta(seconds=30))

    with pytest.raises(ReviewConflict, match="being decided by olga"):
        decide(item_id=item.pk, user=other, note="mine now")
    with pytest.raises(ReviewConflict, match="being decided by olga"):
        review_item_lock(item_id=item.pk, user=other)
    item.refresh_from_db()
    assert (item.status, item.locked_by) == ("open", ops_user)


@pytest.mark.parametrize("decide", [review_item_approve, review_item_reject])
def test_an_expired_lock_lets_another_reviewer_decide(
    item: ReviewItem, ops_user: Any, other: Any, decide: Any
) -> None:
    _locked(item, ops_user, age=LOCK + timedelta(seconds=30))

    decide(item_id=item.pk, user=other, note="olga went home")

    item.refresh_from_db()
    assert item.status != "open" and item.decided_by == other


def test_an_expired_lock_can_be_taken_over(item: ReviewItem, ops_user: Any, other: Any) -> None:
    _locked(item, ops_user, age=LOCK + timedelta(seconds=30))

    review_item_lock(item_id=item.pk, user=other)

    item.refresh_from_db()
    assert item.locked_by == other
    assert timezone.now() - item.locked_at < timedelta(minutes=1)


def test_the_lock_holder_decides_and_so_does_the_automation(
    item: ReviewItem, make_strategy: Any, ops_user: Any
) -> None:
    _locked(item, ops_user, age=timedelta(0))
    review_item_approve(item_id=item.pk, user=ops_user)
    item.refresh_from_db()
    assert item.status == "approved"
    # a decision without a person (the learning benchmark's stand-in) is not held by locks
    second = ReviewItem.objects.create(
        strategy=make_strategy(
            branch={"tool": "get_return_status", "field": "order_id", "transform": "strip"},
            status=Strategy.Status.IN_REVIEW,
        ),
        reason=ReviewItem.Reason.LOW_CONFIDENCE,
    )
    _locked(second, ops_user, age=timedelta(0))
    review_item_approve(item_id=second.pk)
    second.refresh_from_db()
    assert (second.status, second.decided_by) == ("approved", None)


def test_a_decided_item_cannot_be_locked(item: ReviewItem, ops_user: Any) -> None:
    review_item_reject(item_id=item.pk, user=ops_user, note="no")
    with pytest.raises(ReviewConflict, match="already rejected"):
        review_item_lock(item_id=item.pk, user=ops_user)


# --- approving each kind of item ---------------------------------------------------------
@pytest.fixture
def failing(make_strategy: Any) -> Strategy:
    """An active, published strategy that failed twice in a row (the real bookkeeping),
    confident enough to stay above deprecation for two more failures."""
    strategy = make_strategy(status=Strategy.Status.PROPOSED, confidence=1.0)
    strategy_activate(strategy=strategy, author_kind="auto_merge")
    for _ in range(2):
        strategy_outcome_record(strategy_id=strategy.pk, success=False)
    strategy.refresh_from_db()
    assert strategy.needs_review and strategy.consecutive_failures == 2
    return strategy


def test_approving_a_consecutive_failures_item_keeps_the_strategy_and_resets_its_streak(
    failing: Strategy, ops_user: Any
) -> None:
    item = ReviewItem.objects.get(reason=ReviewItem.Reason.CONSECUTIVE_FAILURES)
    versions = PolicyVersion.objects.count()

    review_item_approve(item_id=item.pk, user=ops_user, note="flaky upstream, keep it")

    failing.refresh_from_db()
    assert (failing.status, failing.needs_review, failing.consecutive_failures) == (
        "active",
        False,
        0,
    )
    # kept as it is: no new version, still in the active one
    assert PolicyVersion.objects.count() == versions
    assert failing in PolicyVersion.objects.get(is_active=True).strategies.all()
    assert AuditLog.objects.filter(action="review.approve", actor=ops_user).exists()
    # and two more failures in a row ask a person again
    strategy_outcome_record(strategy_id=failing.pk, success=False)
    assert ReviewItem.objects.filter(status="open").count() == 0
    strategy_outcome_record(strategy_id=failing.pk, success=False)
    assert ReviewItem.objects.filter(status="open", reason="consecutive_failures").count() == 1


def test_rejecting_a_consecutive_failures_item_stops_the_strategy(
    failing: Strategy, ops_user: Any
) -> None:
    item = ReviewItem.objects.get(reason=ReviewItem.Reason.CONSECUTIVE_FAILURES)

    review_item_reject(item_id=item.pk, user=ops_user, note="it makes things worse")

    failing.refresh_from_db()
    assert failing.status == "rejected"
    audit = AuditLog.objects.get(action="strategy.reject")
    assert audit.details == {"reason": "it makes things worse"}


SIGNATURE = "UNAUTHORIZED|get_order"


def _facts(trace_id: str) -> FailureFacts:
    return FailureFacts(
        trace_id=trace_id,
        query="Where is my order?",
        agent_id=1,
        step_number=1,
        tool="get_order",
        action_input={"order_id": "#W1000001"},
        endpoint="",
        status_code=401,
        error_type="UNAUTHORIZED",
        response_summary="",
        error_detail="",
    )


@pytest.mark.parametrize("decide", [review_item_approve, review_item_reject])
def test_closing_a_negative_feedback_item_resumes_automation_for_its_signature(
    failed_trace: Any, ops_user: Any, decide: Any
) -> None:
    from policies.models import ReflexionProposal

    trace = failed_trace(status_code=401, error_type="UNAUTHORIZED")
    for _ in range(2):
        ReflexionProposal.objects.create(
            trace=trace,
            step_number=1,
            error_type="UNAUTHORIZED",
            error_signature=SIGNATURE,
            outcome=ReflexionProposal.Outcome.REJECTED,
            reason="replay failed: get_order -> 401",
            payload={},
        )
    facts = _facts(str(trace.pk))
    assert negative_feedback_stop(facts).startswith("2 earlier strategies")
    item = ReviewItem.objects.get(reason=ReviewItem.Reason.NEGATIVE_FEEDBACK)
    assert negative_feedback_stop(facts) == "an open review already holds this error signature"

    decide(item_id=item.pk, user=ops_user, note="token fixed upstream")

    item.refresh_from_db()
    assert item.status in ("approved", "rejected") and item.decided_by == ops_user
    # nothing else to change: the item names a signature, not a strategy
    assert not Strategy.objects.exists() and not PolicyVersion.objects.exists()
    # the failures before the decision no longer count
    assert negative_feedback_stop(facts) == ""
    assert ReviewItem.objects.filter(reason="negative_feedback").count() == 1


def test_approving_a_thumbs_down_item_closes_it_and_touches_no_strategy(
    failed_trace: Any, ops_user: Any
) -> None:
    trace = failed_trace()
    item = ReviewItem.objects.create(trace=trace, reason=ReviewItem.Reason.THUMBS_DOWN)

    review_item_approve(item_id=item.pk, user=ops_user, note="the answer was wrong")

    item.refresh_from_db()
    assert (item.status, item.decided_by, item.trace) == ("approved", ops_user, trace)
    assert not Strategy.objects.exists()


def test_a_rejection_needs_a_reason_and_changes_nothing_without_one(
    item: ReviewItem, ops_user: Any
) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        review_item_reject(item_id=item.pk, user=ops_user, note="  ")

    assert not AuditLog.objects.filter(action="strategy.reject").exists()
    item.refresh_from_db()
    assert item.status == "open"
