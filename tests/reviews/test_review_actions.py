"""Every action of the review item page through the real views, and the edit service's
refusals: reject, ask for evidence, reopen and assign as a reviewer posts them, what a
conflict or an invalid form leaves untouched, and why an edit that cannot be replayed is
refused. Each test asserts on the rows written (or not written), not just a status."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from policies.models import PolicyVersion, Strategy
from reviews.models import AuditLog, ReviewItem
from reviews.services import (
    ReviewConflict,
    StrategyEdit,
    StrategyEditInvalid,
    feedback_submit,
    review_item_approve,
    review_item_edit_approve,
    review_item_reject,
    review_item_request_evidence,
    strategy_edit_replay,
)
from traces.models import Feedback, Trace

pytestmark = pytest.mark.django_db

from tests.reviews.test_review_item import RULE, STRICTER  # noqa: E402

# Accepts the recorded input ({"limit": 3}), so it would not have prevented the failure.
TOO_LOOSE_YAML = "tool: search_products\nschema:\n  properties:\n    query: {type: string}\n"
MISSING_QUERY = json.dumps({"field": "query", "error": "query is required"})


@pytest.fixture(autouse=True)
def publish_at_once(settings: Any) -> None:
    settings.POLICY_PUBLISH = "at_once"


@pytest.fixture
def recorded_failure(failed_trace: Any) -> Trace:
    return failed_trace(
        tool="search_products",
        action_input={"limit": 3},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body=MISSING_QUERY,
    )


def _proposal(make_strategy: Any, *sources: Trace) -> ReviewItem:
    strategy = make_strategy(
        kind="validation_rule",
        branch=RULE,
        error_type="MISSING_REQUIRED_FIELD",
        root_cause="search_products called without required query",
        strategy_update="Validate that query is present before calling search_products",
        status=Strategy.Status.IN_REVIEW,
        replay_status=Strategy.Replay.PASSED,
    )
    strategy.source_traces.add(*sources)
    return ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)


@pytest.fixture
def proposal(make_strategy: Any, recorded_failure: Trace) -> ReviewItem:
    return _proposal(make_strategy, recorded_failure)


@pytest.fixture
def reviewer2(roles: None, django_user_model: Any) -> Any:
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("piet", password="pw-piet-123")
    user.groups.add(Group.objects.get(name="ops"))
    return user


@pytest.fixture
def ops_client(client: Client, ops_user: Any) -> Client:
    client.force_login(ops_user)
    return client


def _strategy(item: ReviewItem) -> Strategy:
    assert item.strategy_id is not None
    return Strategy.objects.get(pk=item.strategy_id)


def _actions() -> list[str]:
    return list(AuditLog.objects.order_by("pk").values_list("action", flat=True))


# --- pages --------------------------------------------------------------------------------


def test_an_item_that_does_not_exist_is_a_404_to_open_and_to_act_on(
    ops_client: Client, proposal: ReviewItem
) -> None:
    missing = proposal.pk + 1000

    assert ops_client.get(f"/reviews/{missing}/").status_code == 404
    assert ops_client.post(f"/reviews/{missing}/approve/", {"note": ""}).status_code == 404
    assert ops_client.post(f"/reviews/{missing}/reject/", {"reject-note": "no"}).status_code == (
        404
    )
    assert not AuditLog.objects.exists() and not PolicyVersion.objects.exists()


def test_an_approval_note_over_the_limit_is_refused_and_publishes_nothing(
    ops_client: Client, proposal: ReviewItem
) -> None:
    response = ops_client.post(f"/reviews/{proposal.pk}/approve/", {"note": "x" * 501})

    assert response.status_code == 400
    assert "at most 500 characters" in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN
    assert _strategy(proposal).status == Strategy.Status.IN_REVIEW
    assert not PolicyVersion.objects.exists() and not AuditLog.objects.exists()


def test_rejecting_through_the_page_stops_the_strategy_and_keeps_the_reason(
    ops_client: Client, proposal: ReviewItem, ops_user: Any
) -> None:
    response = ops_client.post(
        f"/reviews/{proposal.pk}/reject/", {"reject-note": " too broad ", "next": "1"}
    )

    # Nothing else waits in the queue, so "and next" lands on the queue.
    assert response.status_code == 302 and response["Location"] == "/reviews/"
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.REJECTED
    assert proposal.decided_by == ops_user and proposal.decision_note == "too broad"
    assert _strategy(proposal).status == Strategy.Status.REJECTED
    row = AuditLog.objects.get(action="review.reject")
    assert row.actor == ops_user
    assert row.details == {"reason": "low_confidence", "note": "too broad"}
    assert not PolicyVersion.objects.exists()


def test_evidence_then_reopen_through_the_page_and_a_second_reopen_is_a_conflict(
    ops_client: Client, proposal: ReviewItem
) -> None:
    response = ops_client.post(
        f"/reviews/{proposal.pk}/evidence/", {"evidence-note": "one run is not enough"}
    )
    assert response.status_code == 302 and response["Location"] == f"/reviews/{proposal.pk}/"
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.NEEDS_EVIDENCE
    assert proposal.evidence_request == "one run is not enough" and proposal.locked_by is None

    response = ops_client.post(f"/reviews/{proposal.pk}/reopen/", follow=True)
    assert f"Review {proposal.pk} reopened." in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN

    response = ops_client.post(f"/reviews/{proposal.pk}/reopen/", follow=True)
    page = response.content.decode()
    assert f"review {proposal.pk} is open, not waiting for evidence" in page
    assert _actions() == ["review.request_evidence", "review.reopen"]
    asked = AuditLog.objects.get(action="review.request_evidence")
    assert asked.details == {"reason": "low_confidence", "note": "one run is not enough"}


def test_assigning_through_the_page_sets_and_clears_the_assignee(
    ops_client: Client, proposal: ReviewItem, reviewer2: Any, support_user: Any
) -> None:
    response = ops_client.post(f"/reviews/{proposal.pk}/assign/", {"assignee": reviewer2.pk})
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.assigned_to == reviewer2

    # The item page offers the reviewers, with the current assignee chosen.
    page = ops_client.get(f"/reviews/{proposal.pk}/").content.decode()
    assert f'<option value="{reviewer2.pk}" selected>piet</option>' in page

    # Support does not review: the form does not offer them, so the post is refused.
    response = ops_client.post(f"/reviews/{proposal.pk}/assign/", {"assignee": support_user.pk})
    assert response.status_code == 400
    assert "Select a valid choice." in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.assigned_to == reviewer2

    response = ops_client.post(f"/reviews/{proposal.pk}/assign/", {"assignee": ""}, follow=True)
    assert f"Review {proposal.pk} assigned to nobody." in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.assigned_to is None
    assert list(AuditLog.objects.order_by("pk").values_list("details", flat=True)) == [
        {"assignee": "piet", "previous": None},
        {"assignee": None, "previous": "piet"},
    ]


def test_a_decided_item_cannot_be_assigned_or_decided_again_through_the_page(
    ops_client: Client, proposal: ReviewItem, ops_user: Any, reviewer2: Any
) -> None:
    review_item_approve(item_id=proposal.pk, user=ops_user, note="fine")
    published = PolicyVersion.objects.count()
    audited = _actions()
    assert audited[-1] == "review.approve"

    response = ops_client.post(
        f"/reviews/{proposal.pk}/assign/", {"assignee": reviewer2.pk}, follow=True
    )
    assert f"review {proposal.pk} was already approved" in response.content.decode()

    response = ops_client.post(
        f"/reviews/{proposal.pk}/reject/", {"reject-note": "changed my mind"}, follow=True
    )
    assert f"review {proposal.pk} was already approved" in response.content.decode()

    response = ops_client.post(
        f"/reviews/{proposal.pk}/decide/", {"decision": "approve", "note": ""}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/reviews/"
    assert f"review {proposal.pk} was already approved" in response.content.decode()

    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.APPROVED and proposal.assigned_to is None
    assert _strategy(proposal).status == Strategy.Status.ACTIVE
    assert PolicyVersion.objects.count() == published
    assert _actions() == audited


def test_a_thumbs_down_item_has_no_strategy_to_edit(
    ops_client: Client, support_agent: Any, support_user: Any
) -> None:
    run = Trace.objects.create(
        agent=support_agent, query="Price of the Aurora?", status="finished", final_answer="3"
    )
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    item = ReviewItem.objects.get()
    before = _actions()

    response = ops_client.post(
        f"/reviews/{item.pk}/edit/",
        {"root_cause": "a", "strategy_update": "b", "branch": "tool: x", "note": ""},
        follow=True,
    )

    assert response.redirect_chain[-1][0] == f"/reviews/{item.pk}/"
    assert f"review {item.pk} has no strategy to edit" in response.content.decode()
    item.refresh_from_db()
    assert item.status == ReviewItem.Status.OPEN
    assert _actions() == before and not Strategy.objects.exists()


def test_an_edit_whose_replay_fails_is_shown_on_the_page_and_changes_nothing(
    ops_client: Client, proposal: ReviewItem
) -> None:
    response = ops_client.post(
        f"/reviews/{proposal.pk}/edit/",
        {
            "root_cause": "search_products called without a query",
            "strategy_update": "Check the query",
            "branch": TOO_LOOSE_YAML,
            "note": "",
        },
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert "the edited strategy failed its replay" in page
    assert "the rule accepts the recorded input" in page
    strategy = _strategy(proposal)
    assert strategy.branch == RULE and strategy.status == Strategy.Status.IN_REVIEW
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN
    assert not AuditLog.objects.exists() and not PolicyVersion.objects.exists()


def test_a_rating_other_than_up_or_down_is_refused(
    client: Client, run: Trace, support_user: Any
) -> None:
    client.force_login(support_user)

    response = client.post(f"/reviews/feedback/{run.pk}/", {"rating": "sideways"})

    assert response.status_code == 400
    assert not Feedback.objects.exists() and not ReviewItem.objects.exists()


def test_an_audit_date_that_reads_as_a_date_but_is_not_one_is_ignored(
    client: Client, admin_role_user: Any
) -> None:
    AuditLog.objects.create(action="strategy.activate", target="S1", actor_kind="system")
    client.force_login(admin_role_user)

    # Month 13 matches the date pattern, so parse_datetime raises instead of answering None.
    response = client.get("/reviews/audit/?since=2026-13-45T10:00&until=")

    assert response.status_code == 200
    page = response.content.decode()
    assert 'href="?target=S1"' in page


# --- the edit service's refusals ------------------------------------------------------------


def test_an_edit_with_empty_or_overlong_words_is_refused_before_any_replay(
    proposal: ReviewItem, ops_user: Any
) -> None:
    edit = StrategyEdit(root_cause="  ", strategy_update="u" * 251, branch=STRICTER)

    with pytest.raises(StrategyEditInvalid) as caught:
        review_item_edit_approve(item_id=proposal.pk, user=ops_user, edit=edit)

    assert caught.value.errors == [
        "root cause: say it in a few words",
        "update: at most 250 characters",
    ]
    assert _strategy(proposal).branch == RULE and not AuditLog.objects.exists()


def test_an_edit_with_no_matching_recorded_failure_cannot_be_replayed(
    make_strategy: Any, failed_trace: Any, ops_user: Any
) -> None:
    # Learned from two runs, neither of which recorded the failure the edit is about: one
    # failed another way on the same tool, the other failed the same way on another tool.
    other_error = failed_trace(
        tool="search_products", action_input={"query": 3}, error_type="TYPE_MISMATCH"
    )
    other_tool = failed_trace(
        tool="get_order",
        action_input={},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body=MISSING_QUERY,
    )
    item = _proposal(make_strategy, other_error, other_tool)
    edit = StrategyEdit(root_cause="no query", strategy_update="require it", branch=STRICTER)

    with pytest.raises(StrategyEditInvalid) as caught:
        review_item_edit_approve(item_id=item.pk, user=ops_user, edit=edit)

    assert caught.value.errors == [
        "the edited strategy failed its replay: no recorded MISSING_REQUIRED_FIELD of "
        "search_products among the runs it was learned from, so the edit cannot be replayed"
    ]
    assert _strategy(item).branch == RULE
    item.refresh_from_db()
    assert item.status == ReviewItem.Status.OPEN and not AuditLog.objects.exists()


def test_a_rule_learned_from_no_recorded_failure_names_what_is_missing_in_general_words(
    make_strategy: Any,
) -> None:
    # No error type on the strategy, no tool in the edited branch, no source runs.
    strategy = make_strategy(kind="prompt_hint", branch={"text": "Ask first."}, error_type="")
    edit = StrategyEdit(root_cause="vague", strategy_update="ask", branch={"text": "Ask."})

    assert strategy_edit_replay(strategy=strategy, edit=edit) == (
        False,
        "no recorded failure of its tool among the runs it was learned from, "
        "so the edit cannot be replayed",
    )


def test_a_rejection_without_a_reason_is_refused(proposal: ReviewItem, ops_user: Any) -> None:
    with pytest.raises(ValueError, match="a rejection needs a reason"):
        review_item_reject(item_id=proposal.pk, user=ops_user)

    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN and not AuditLog.objects.exists()


def test_only_a_proposed_strategy_can_be_edited(make_strategy: Any, ops_user: Any) -> None:
    strategy = make_strategy(consecutive_failures=2, needs_review=True)
    item = ReviewItem.objects.create(
        strategy=strategy, reason=ReviewItem.Reason.CONSECUTIVE_FAILURES
    )
    edit = StrategyEdit(
        root_cause="x", strategy_update="y", branch={"tool": "get_order", "field": "order_id"}
    )

    with pytest.raises(ReviewConflict, match="has no proposed strategy to edit"):
        review_item_edit_approve(item_id=item.pk, user=ops_user, edit=edit)

    strategy.refresh_from_db()
    assert strategy.root_cause == "get_order now requires integer order_id"
    assert strategy.needs_review and strategy.consecutive_failures == 2
    item.refresh_from_db()
    assert item.status == ReviewItem.Status.OPEN and not AuditLog.objects.exists()


def test_asking_for_evidence_needs_a_reason(proposal: ReviewItem, ops_user: Any) -> None:
    with pytest.raises(ValueError, match="say what evidence is missing"):
        review_item_request_evidence(item_id=proposal.pk, user=ops_user, note=" ")

    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN and proposal.evidence_request == ""
    assert not AuditLog.objects.exists()


def test_an_edited_rule_is_redacted_before_it_is_checked_replayed_or_stored(
    proposal: ReviewItem, ops_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reviews import services

    seen: list[dict[str, Any]] = []

    def replay(*, strategy: Any, edit: StrategyEdit) -> tuple[bool, str]:
        seen.append(edit.branch)
        return False, "not replayed here"

    monkeypatch.setattr(services, "strategy_edit_replay", replay)
    query = {"type": "string", "minLength": 2, "description": "from the log: api_key=abcdef123456"}
    pasted = {
        "tool": "search_products",
        "schema": {"required": ["query"], "properties": {"query": query}},
    }
    edit = StrategyEdit(root_cause="no query", strategy_update="require it", branch=pasted)

    with pytest.raises(StrategyEditInvalid):
        review_item_edit_approve(item_id=proposal.pk, user=ops_user, edit=edit)

    assert "abcdef123456" not in json.dumps(seen)
    assert [b["schema"]["properties"]["query"]["description"] for b in seen] == [
        "from the log: api_key=[REDACTED]"
    ]
