"""A thumbs-down on an answer opens a review item for the run; thumbs up does not."""

from __future__ import annotations

from typing import Any

import pytest

from reviews.models import AuditLog, ReviewItem
from reviews.services import feedback_submit, review_item_approve
from traces.models import Feedback, Trace

pytestmark = pytest.mark.django_db


def test_a_thumbs_down_opens_one_review_item_naming_the_run(
    run: Trace, support_user: Any, support_user2: Any
) -> None:
    colleague = support_user2
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down", comment="wrong price")
    feedback_submit(trace_id=str(run.pk), user=colleague, rating="down")
    item = ReviewItem.objects.get()
    assert item.reason == ReviewItem.Reason.THUMBS_DOWN
    assert item.trace == run and item.status == ReviewItem.Status.OPEN
    assert item.detail == "wrong price"
    assert Feedback.objects.filter(trace=run, rating="down").count() == 2
    assert AuditLog.objects.filter(action="review.open").count() == 1


def test_a_thumbs_down_reopens_only_a_thumbs_down_item_waiting_for_evidence(
    run: Trace, support_user: Any
) -> None:
    # An item of another kind about the same run waits for evidence: a vote is not that.
    other = ReviewItem.objects.create(
        trace=run,
        reason=ReviewItem.Reason.NEGATIVE_FEEDBACK,
        status=ReviewItem.Status.NEEDS_EVIDENCE,
    )

    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")

    other.refresh_from_db()
    assert other.status == ReviewItem.Status.NEEDS_EVIDENCE
    opened = ReviewItem.objects.get(reason=ReviewItem.Reason.THUMBS_DOWN)
    assert opened.status == ReviewItem.Status.OPEN


def test_a_thumbs_up_opens_nothing(run: Trace, support_user: Any) -> None:
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="up")
    assert not ReviewItem.objects.exists()
    assert Feedback.objects.get().rating == "up"


def test_a_new_thumbs_down_after_a_decided_item_opens_a_new_one(
    run: Trace, support_user: Any
) -> None:
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    review_item_approve(item_id=ReviewItem.objects.get().pk, user=support_user, note="confirmed")
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="up")
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    assert list(ReviewItem.objects.order_by("created_at").values_list("status", flat=True)) == [
        "approved",
        "open",
    ]


def test_the_queue_shows_the_thumbs_down_with_a_link_to_its_trace(
    client: Any, run: Trace, support_user: Any, ops_user: Any
) -> None:
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    client.force_login(ops_user)
    page = client.get("/reviews/").content.decode()
    assert "Answer marked wrong" in page
    assert run.get_absolute_url() in page and "It costs 3 EUR." in page


@pytest.mark.parametrize("htmx", [True, False])
def test_the_feedback_button_stores_the_vote_and_answers_the_page(
    client: Any, run: Trace, support_user: Any, htmx: bool
) -> None:
    client.force_login(support_user)
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(
        f"/reviews/feedback/{run.pk}/", {"rating": "down", "next": "/"}, headers=headers
    )
    assert Feedback.objects.get().rating == "down"
    assert ReviewItem.objects.filter(trace=run).exists()
    if htmx:
        assert response.status_code == 200
        assert 'class="secondary thumb chosen"' in response.content.decode()
    else:
        assert response.status_code == 302
        assert response["Location"] == f"/#run-{run.pk}"


def test_nobody_votes_on_a_run_they_cannot_see(
    client: Any, run: Trace, django_user_model: Any
) -> None:
    stranger = django_user_model.objects.create_user(username="s", password="pw-12345678")
    client.force_login(stranger)
    response = client.post(f"/reviews/feedback/{run.pk}/", {"rating": "down"})
    assert response.status_code == 404
    assert not Feedback.objects.exists() and not ReviewItem.objects.exists()


def test_a_next_pointing_elsewhere_is_not_followed(
    client: Any, run: Trace, support_user: Any
) -> None:
    client.force_login(support_user)
    response = client.post(
        f"/reviews/feedback/{run.pk}/", {"rating": "up", "next": "https://evil.example/"}
    )
    assert response["Location"] == f"/#run-{run.pk}"


def test_a_thumbs_down_without_a_comment_names_who_gave_it(run: Trace, support_user: Any) -> None:
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")

    item = ReviewItem.objects.get()
    assert item.detail == "Thumbs down from sam."
    audit = AuditLog.objects.get(action="review.open")
    assert (audit.actor, audit.target) == (support_user, f"review {item.pk}")
    assert audit.details == {"reason": "thumbs_down", "trace": str(run.pk)}


def test_a_card_number_in_a_thumbs_down_comment_is_not_stored(
    run: Trace, support_user: Any
) -> None:
    comment = "charged twice on 4111 1111 1111 1111, password=hunter2secret"
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down", comment=comment)
    stored = [Feedback.objects.get().comment, ReviewItem.objects.get().detail]
    assert stored == ["charged twice on [REDACTED], password=[REDACTED]"] * 2
