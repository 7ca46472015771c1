"""The review queue: decisions publish or reject strategies, with locks and an audit trail."""

from __future__ import annotations

from typing import Any

import pytest

from policies.models import PolicyVersion, Rollout, Strategy
from reviews.models import AuditLog, ReviewItem
from reviews.services import (
    ReviewConflict,
    review_item_approve,
    review_item_lock,
    review_item_reject,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposed(make_strategy: Any) -> ReviewItem:
    strategy = make_strategy(status=Strategy.Status.IN_REVIEW)
    return ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)


def test_approving_a_proposal_starts_a_canary_version_by_the_reviewer(
    proposed: ReviewItem, ops_user: Any
) -> None:
    review_item_approve(item_id=proposed.pk, user=ops_user, note="looks right")
    proposed.refresh_from_db()
    assert proposed.status == "approved" and proposed.decided_by == ops_user
    # the new version is a canary: nothing is active until the rollout reaches 100%
    assert not PolicyVersion.objects.filter(is_active=True).exists()
    version = PolicyVersion.objects.get()
    assert version.author == ops_user and version.author_kind == "reviewer"
    assert proposed.strategy is not None
    assert list(version.source_strategies.all()) == [proposed.strategy]
    rollout = Rollout.objects.get()
    assert (rollout.version, rollout.percent, rollout.state) == (version, 1, "running")
    assert AuditLog.objects.filter(action="review.approve", actor=ops_user).exists()


def test_approving_with_publish_at_once_activates_the_version(
    proposed: ReviewItem, ops_user: Any, settings: Any
) -> None:
    settings.POLICY_PUBLISH = "at_once"
    review_item_approve(item_id=proposed.pk, user=ops_user, note="looks right")
    version = PolicyVersion.objects.get(is_active=True)
    assert version.author == ops_user and version.author_kind == "reviewer"
    assert not Rollout.objects.exists()


def test_rejecting_stops_the_strategy(proposed: ReviewItem, ops_user: Any) -> None:
    review_item_reject(item_id=proposed.pk, user=ops_user, note="too broad")
    assert Strategy.objects.get().status == "rejected"
    assert not PolicyVersion.objects.exists()


def test_a_decided_item_cannot_be_decided_again(proposed: ReviewItem, ops_user: Any) -> None:
    review_item_approve(item_id=proposed.pk, user=ops_user)
    with pytest.raises(ReviewConflict, match="already approved"):
        review_item_reject(item_id=proposed.pk, user=ops_user, note="x")


def test_a_lock_keeps_a_second_reviewer_out(
    proposed: ReviewItem, ops_user: Any, django_user_model: Any
) -> None:
    other = django_user_model.objects.create_user("piet", password="pw-piet-123")
    review_item_lock(item_id=proposed.pk, user=ops_user)
    with pytest.raises(ReviewConflict, match="being decided"):
        review_item_approve(item_id=proposed.pk, user=other)


def test_versions_are_immutable(proposed: ReviewItem, ops_user: Any) -> None:
    review_item_approve(item_id=proposed.pk, user=ops_user)
    version = PolicyVersion.objects.get()
    version.note = "rewritten history"
    with pytest.raises(ValueError, match="immutable"):
        version.save()


def test_queue_page_is_for_ops_and_decisions_need_a_reason_to_reject(
    client: Any, proposed: ReviewItem, ops_user: Any, support_user: Any
) -> None:
    client.force_login(support_user)
    refused = client.get("/reviews/")
    assert refused.status_code == 403
    # The page says why, in the view's words.
    assert (
        "<p>Only ops staff and admins review strategies. If you need it, ask an admin.</p>"
        in refused.content.decode()
    )
    client.force_login(ops_user)
    page = client.get("/reviews/").content.decode()
    assert proposed.strategy is not None
    assert proposed.strategy.strategy_update in page
    response = client.post(f"/reviews/{proposed.pk}/decide/", {"decision": "reject"}, follow=True)
    assert "Say why you reject it" in response.content.decode()
    proposed.refresh_from_db()
    assert proposed.status == "open"
    client.post(f"/reviews/{proposed.pk}/decide/", {"decision": "approve"})
    proposed.refresh_from_db()
    assert proposed.status == "approved"


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_support_cannot_decide_a_review(
    client: Any, proposed: ReviewItem, support_user: Any, decision: str
) -> None:
    client.force_login(support_user)

    response = client.post(
        f"/reviews/{proposed.pk}/decide/", {"decision": decision, "note": "looks fine to me"}
    )

    assert response.status_code == 403
    proposed.refresh_from_db()
    assert proposed.status == "open" and proposed.decided_by is None
    assert Strategy.objects.get().status == Strategy.Status.IN_REVIEW
    assert not PolicyVersion.objects.exists()
    assert not AuditLog.objects.exists()


@pytest.mark.parametrize("item_id", ["999999", "99999999999999999999999"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_deciding_a_review_that_does_not_exist_is_a_404(
    client: Any, ops_user: Any, item_id: str, decision: str
) -> None:
    client.force_login(ops_user)

    response = client.post(f"/reviews/{item_id}/decide/", {"decision": decision, "note": "gone"})

    assert response.status_code == 404


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"decision": "reject", "note": "a\x00b"}, "Null characters are not allowed"),
        ({"decision": "approve", "note": "x" * 501}, "at most 500 characters"),
        ({"decision": "maybe", "note": "x"}, "Select a valid choice"),
    ],
)
def test_a_bad_decision_form_is_refused_with_a_message_and_decides_nothing(
    client: Any, proposed: ReviewItem, ops_user: Any, fields: dict[str, str], message: str
) -> None:
    client.force_login(ops_user)

    response = client.post(f"/reviews/{proposed.pk}/decide/", fields, follow=True)

    assert response.status_code == 200
    assert message in response.content.decode()
    proposed.refresh_from_db()
    assert proposed.status == "open"


@pytest.mark.parametrize("decide", [review_item_approve, review_item_reject])
def test_a_secret_pasted_into_a_review_note_is_redacted_in_the_item_and_the_audit_log(
    proposed: ReviewItem, ops_user: Any, decide: Any
) -> None:
    secret = "sk-proj-Zq8V3xN1pL5mR7tY9wB2cD4f"

    decide(item_id=proposed.pk, user=ops_user, note=f"the proxy echoed {secret}")

    proposed.refresh_from_db()
    assert secret not in proposed.decision_note
    assert "[REDACTED]" in proposed.decision_note
    audit = AuditLog.objects.get(action__startswith="review.")
    assert secret not in str(audit.details)
    assert audit.details["note"] == "the proxy echoed [REDACTED]"
