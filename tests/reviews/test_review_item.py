"""The review item page and its actions: what approving publishes, edit-then-approve with a
fresh replay, reject with a reason, asking for evidence, assignment, auto-merge, and who
may do each of them."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from policies.models import PolicyVersion, Strategy, StrategyConfidenceEvent
from policies.reflexion import reflexion_run
from policies.services import policy_members_with, strategy_activate, strategy_outcome_record
from reviews.models import AuditLog, ReviewItem
from reviews.services import (
    ReviewConflict,
    StrategyEdit,
    StrategyEditInvalid,
    feedback_submit,
    published_label,
    review_item_approve,
    review_item_assign,
    review_item_edit_approve,
    review_item_reject,
    review_item_reopen,
    review_item_request_evidence,
)
from sandbox.models import Product
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db

RULE = {"tool": "search_products", "schema": {"required": ["query"]}}
STRICTER = {
    "tool": "search_products",
    "schema": {"required": ["query"], "properties": {"query": {"type": "string", "minLength": 2}}},
}
STRICTER_YAML = (
    "tool: search_products\n"
    "schema:\n"
    "  required: [query]\n"
    "  properties:\n"
    "    query: {type: string, minLength: 2}\n"
)
# Accepts the recorded input ({"limit": 3}), so it would not have prevented the failure.
TOO_LOOSE = {"tool": "search_products", "schema": {"properties": {"query": {"type": "string"}}}}
MISSING_QUERY = json.dumps({"field": "query", "error": "query is required"})


@pytest.fixture(autouse=True)
def publish_at_once(settings: Any) -> None:
    """These tests are about the review flow: an approval publishes the active version at
    once. The canary path (POLICY_PUBLISH=canary, the default) has its own test below and
    tests/policies/test_rollouts.py."""
    settings.POLICY_PUBLISH = "at_once"


@pytest.fixture
def replay_shop(live_sandbox: str, small_shop: Any, error_rules: Any, settings: Any) -> str:
    """For the tests that replay: a replay runs the recorded request again against the
    sandbox (over HTTP, so those tests commit their data), with a model making no mistakes."""
    settings.LLM_SIM_ERROR_RATES = {}
    return live_sandbox


@pytest.fixture
def recorded_failure(failed_trace: Any) -> Trace:
    """A call of search_products without its query, as a run recorded it, in a request
    about a product of the shop (when one is there: ``replay_shop``)."""
    product = Product.objects.order_by("product_id").first()
    return failed_trace(
        tool="search_products",
        action_input={"limit": 3},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body=MISSING_QUERY,
        query=f"Is the {product.name if product else 'Aurora speaker'} in stock?",
    )


@pytest.fixture
def proposal(make_strategy: Any, recorded_failure: Trace) -> ReviewItem:
    """A validation rule learned from that failure, waiting for a reviewer."""
    strategy = make_strategy(
        kind="validation_rule",
        branch=RULE,
        error_type="MISSING_REQUIRED_FIELD",
        root_cause="search_products called without required query",
        strategy_update="Validate that query is present before calling search_products",
        status=Strategy.Status.IN_REVIEW,
        replay_status=Strategy.Replay.PASSED,
    )
    strategy.source_traces.add(recorded_failure)
    return ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)


@pytest.fixture
def reviewer2(roles: None, django_user_model: Any) -> Any:
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("piet", password="pw-piet-123")
    user.groups.add(Group.objects.get(name="ops"))
    return user


def _strategy(item: ReviewItem) -> Strategy:
    assert item.strategy_id is not None
    return Strategy.objects.get(pk=item.strategy_id)


def _edit_form(**overrides: str) -> dict[str, str]:
    return {
        "root_cause": "search_products called without a usable query",
        "strategy_update": "Require a query of two characters or more",
        "branch": STRICTER_YAML,
        "note": "tightened",
        **overrides,
    }


# --- services -----------------------------------------------------------------------------


def test_policy_members_with_puts_the_strategy_in_place_of_its_rival(make_strategy: Any) -> None:
    kept = make_strategy(branch={"tool": "get_sku", "field": "sku", "transform": "upper"})
    rival = make_strategy(branch={"tool": "get_order", "field": "order_id", "transform": "strip"})
    current = strategy_activate(strategy=kept, author_kind="reviewer", at_once=True)
    current = strategy_activate(strategy=rival, author_kind="reviewer", at_once=True)
    newcomer = make_strategy(status=Strategy.Status.IN_REVIEW)

    members, replaced = policy_members_with(current=current, strategy=newcomer)

    assert replaced == [rival]
    assert members == [kept, newcomer]
    assert policy_members_with(current=None, strategy=newcomer) == ([newcomer], [])


def test_approving_records_what_was_published(proposal: ReviewItem, ops_user: Any) -> None:
    item = review_item_approve(item_id=proposal.pk, user=ops_user, note="fine")

    version = PolicyVersion.objects.get(is_active=True)
    assert item.published == f"published as version v{version.number}"
    row = AuditLog.objects.get(action="review.approve")
    assert row.actor == ops_user and row.details["published"] == item.published


def test_approving_under_the_canary_default_says_what_the_canary_serves(
    proposal: ReviewItem, ops_user: Any, settings: Any
) -> None:
    settings.POLICY_PUBLISH = "canary"
    item = review_item_approve(item_id=proposal.pk, user=ops_user, note="fine")

    version = PolicyVersion.objects.get(rollout__isnull=False)
    assert not version.is_active
    assert item.published == (
        f"published as version v{version.number}, a canary on 1% (rollout {version.rollout.pk})"
    )
    assert _strategy(item).status == Strategy.Status.APPROVED


@pytest.mark.parametrize(
    ("result", "label"),
    [
        (None, "approved; not published yet: a rollout is already open"),
        (PolicyVersion(number=4), "published as version v4"),
        (
            SimpleNamespace(pk=7, percent=5, version=PolicyVersion(number=5)),
            "published as version v5, a canary on 5% (rollout 7)",
        ),
        # anything without a version number is quoted as it is
        ("as a draft", "published: as a draft"),
    ],
)
def test_what_strategy_activate_returns_reads_as_words(result: Any, label: str) -> None:
    assert published_label(result) == label


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("note", [{"note": "ok"}, {}], ids=["with a note", "without one"])
def test_an_edit_is_replayed_then_published_and_audited(
    replay_shop: str, proposal: ReviewItem, ops_user: Any, note: dict[str, str]
) -> None:
    edit = StrategyEdit(
        root_cause="search_products called without a usable query",
        strategy_update="Require a query of two characters or more",
        branch=STRICTER,
    )

    item = review_item_edit_approve(item_id=proposal.pk, user=ops_user, edit=edit, **note)
    item.refresh_from_db()
    assert item.decision_note == note.get("note", "")

    strategy = _strategy(item)
    assert strategy.branch == STRICTER and strategy.status == Strategy.Status.ACTIVE
    # the columns the policy selects by follow the edited branch
    assert strategy.tool_name == STRICTER["tool"] == "search_products"
    assert "rejects the recorded input" in strategy.replay_detail
    version = PolicyVersion.objects.get(is_active=True)
    assert "minLength: 2" in version.document
    approve = AuditLog.objects.get(action="review.approve")
    assert approve.details["note"] == note.get("note", "")
    assert approve.details["edited"] == ["branch", "root_cause", "strategy_update"]
    assert approve.details["changes"]["branch"] == [RULE, STRICTER]
    edited = AuditLog.objects.get(action="strategy.edit").details
    assert edited["review"] == proposal.pk
    assert sorted(edited["changed"]) == ["branch", "root_cause", "strategy_update"]
    assert edited["changed"]["branch"] == [RULE, STRICTER]


@pytest.mark.parametrize(
    ("branch", "error"),
    [
        ({"tool": "search_products", "schema": {"type": "objekt"}}, "schema is invalid"),
        ({"tool": "search_products"}, "either 'schema' or 'amend'"),
        (TOO_LOOSE, "failed its replay: the rule accepts the recorded input"),
    ],
)
def test_an_edit_that_does_not_validate_or_replay_changes_nothing(
    proposal: ReviewItem, ops_user: Any, branch: dict[str, Any], error: str
) -> None:
    edit = StrategyEdit(root_cause="x cause", strategy_update="y update", branch=branch)

    with pytest.raises(StrategyEditInvalid, match=error):
        review_item_edit_approve(item_id=proposal.pk, user=ops_user, edit=edit)

    strategy = _strategy(proposal)
    assert strategy.branch == RULE and strategy.status == Strategy.Status.IN_REVIEW
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN
    assert not PolicyVersion.objects.exists()
    assert not AuditLog.objects.exists()


def test_a_rejection_needs_a_reason(proposal: ReviewItem, ops_user: Any) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        review_item_reject(item_id=proposal.pk, user=ops_user, note="  ")
    review_item_reject(item_id=proposal.pk, user=ops_user, note="too broad")
    assert _strategy(proposal).status == Strategy.Status.REJECTED


def test_asking_for_evidence_parks_the_item_until_it_is_reopened(
    proposal: ReviewItem, ops_user: Any
) -> None:
    review_item_request_evidence(item_id=proposal.pk, user=ops_user, note="one run is not enough")
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.NEEDS_EVIDENCE
    assert proposal.locked_by is None and proposal.evidence_request == "one run is not enough"
    with pytest.raises(ReviewConflict, match="waits for more evidence"):
        review_item_approve(item_id=proposal.pk, user=ops_user)

    review_item_reopen(item_id=proposal.pk, user=ops_user)

    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN
    assert list(AuditLog.objects.order_by("pk").values_list("action", "details__why")) == [
        ("review.request_evidence", None),
        ("review.reopen", "manual"),
    ]


def test_new_evidence_for_the_strategy_reopens_the_item(
    proposal: ReviewItem, ops_user: Any, failed_trace: Any
) -> None:
    review_item_request_evidence(item_id=proposal.pk, user=ops_user, note="show it again")
    again = failed_trace(
        tool="search_products",
        action_input={"limit": 5},
        status_code=None,
        error_type="MISSING_REQUIRED_FIELD",
        body=MISSING_QUERY,
    )

    [record] = reflexion_run(trace_id=str(again.pk), auto_approve=False)

    assert record.outcome == "agreed" and record.strategy_id == proposal.strategy_id
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN
    assert again in _strategy(proposal).source_traces.all()
    reopen = AuditLog.objects.get(action="review.reopen")
    assert reopen.details == {"why": "new evidence", "trace": str(again.pk)}


def test_another_thumbs_down_reopens_a_thumbs_down_waiting_for_evidence(
    support_agent: Any, support_user: Any, support_user2: Any, ops_user: Any
) -> None:
    run = Trace.objects.create(
        agent=support_agent, query="Price of the Aurora?", status="finished", final_answer="3"
    )
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    item = ReviewItem.objects.get()
    review_item_request_evidence(item_id=item.pk, user=ops_user, note="one vote only")

    feedback_submit(trace_id=str(run.pk), user=support_user2, rating="down", comment="wrong")

    assert list(ReviewItem.objects.values_list("status", flat=True)) == ["open"]


def test_items_are_assigned_to_reviewers_only(
    proposal: ReviewItem, ops_user: Any, reviewer2: Any, support_user: Any
) -> None:
    with pytest.raises(ValueError, match="does not review"):
        review_item_assign(item_id=proposal.pk, user=ops_user, assignee=support_user)

    review_item_assign(item_id=proposal.pk, user=ops_user, assignee=reviewer2)

    proposal.refresh_from_db()
    assert proposal.assigned_to == reviewer2
    row = AuditLog.objects.get(action="review.assign")
    assert row.actor == ops_user and row.details == {"assignee": "piet", "previous": None}


@pytest.mark.parametrize(
    ("enabled", "minimum", "merged"),
    [(True, 0.6, True), (True, 0.85, False), (False, 0.0, False)],
)
@pytest.mark.django_db(transaction=True)
def test_auto_merge_publishes_confident_replayed_strategies_only(
    replay_shop: str,
    recorded_failure: Trace,
    settings: Any,
    enabled: bool,
    minimum: float,
    merged: bool,
) -> None:
    settings.REVIEW_AUTO_MERGE = enabled
    settings.REVIEW_AUTO_MERGE_MIN_CONFIDENCE = minimum

    [record] = reflexion_run(trace_id=str(recorded_failure.pk))

    strategy = record.strategy
    assert strategy is not None and strategy.confidence == 0.7
    strategy.refresh_from_db()
    assert (strategy.status == Strategy.Status.ACTIVE) is merged
    assert PolicyVersion.objects.filter(author_kind="auto_merge").exists() is merged
    assert AuditLog.objects.filter(
        action="review.auto_merge", actor_kind="auto_merge"
    ).exists() is (merged)
    assert ReviewItem.objects.filter(strategy=strategy, status="open").exists() is not merged


# --- pages --------------------------------------------------------------------------------


def test_the_item_page_shows_the_last_twenty_confidence_moves_of_how_many(
    client: Client, proposal: ReviewItem, ops_user: Any
) -> None:
    StrategyConfidenceEvent.objects.bulk_create(
        StrategyConfidenceEvent(
            strategy=proposal.strategy, old=0.7, new=0.7, reason="replay passed"
        )
        for _ in range(23)
    )
    client.force_login(ops_user)

    page = client.get(f"/reviews/{proposal.pk}/").content.decode()

    assert "The last 20 of 23 changes;" in page


def test_the_item_page_reads_as_words_and_shows_what_approving_publishes(
    client: Client, proposal: ReviewItem, ops_user: Any, make_strategy: Any
) -> None:
    # given an active version with a rule in the proposal's slot, and one elsewhere
    rival = make_strategy(
        kind="validation_rule",
        branch=RULE,
        error_type="MISSING_REQUIRED_FIELD",
        strategy_update="the older rule",
    )
    other = make_strategy(branch={"tool": "get_sku", "field": "sku", "transform": "upper"})
    strategy_activate(strategy=rival, author_kind="reviewer")
    current = strategy_activate(strategy=other, author_kind="reviewer")
    strategy_outcome_record(strategy_id=proposal.strategy_id, success=True)
    client.force_login(ops_user)

    page = client.get(f"/reviews/{proposal.pk}/").content.decode()

    main = page[page.index("<main>") : page.index('<details id="edit"')]
    assert "{&#x27;" not in main and "{'" not in main
    assert "refuse the call unless the input requires query" in main
    assert "<dt>Input</dt><dd>requires query</dd>" in main
    evidence = _strategy(proposal).source_traces.get()
    assert f'<a class="source-trace" href="/traces/{evidence.pk}/">' in main
    assert f"Approving creates <strong>v{current.number + 1}</strong>" in main
    assert f'adds <a href="/policies/strategies/{proposal.strategy_id}/">' in main
    assert f'replaces <a href="/policies/strategies/{rival.pk}/">{rival.label}</a>' in main
    assert "keeps 1 strategy" in main
    assert 'id="confidence-history"' in main and "0.70 → 0.75" in main
    similar = main[main.index('id="similar"') :]
    assert f'<a href="/policies/strategies/{rival.pk}/">{rival.label}</a>' in similar
    proposal.refresh_from_db()
    assert proposal.locked_by == ops_user


@pytest.mark.parametrize(
    ("reason", "shown", "absent"),
    [
        ("low_confidence", ["Approving creates", 'id="edit"'], []),
        ("consecutive_failures", ['id="approve-form"'], ["Approving creates", 'id="edit"']),
        ("negative_feedback", ["Error signature <code>TIMEOUT|get_order</code>"], ['id="edit"']),
    ],
)
def test_every_kind_of_item_opens_with_what_applies_to_it(
    client: Client,
    ops_user: Any,
    make_strategy: Any,
    reason: str,
    shown: list[str],
    absent: list[str],
) -> None:
    strategy = None if reason == "negative_feedback" else make_strategy()
    item = ReviewItem.objects.create(
        strategy=strategy, reason=reason, error_signature="TIMEOUT|get_order"
    )
    client.force_login(ops_user)

    response = client.get(f"/reviews/{item.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    assert [text for text in shown if text not in page] == []
    assert [text for text in absent if text in page] == []


def test_a_second_reviewer_sees_the_lock_until_it_expires(
    client: Client, proposal: ReviewItem, ops_user: Any, reviewer2: Any
) -> None:
    client.force_login(ops_user)
    client.get(f"/reviews/{proposal.pk}/")
    client.force_login(reviewer2)

    page = client.get(f"/reviews/{proposal.pk}/").content.decode()
    assert "is being decided by olga" in page and 'id="approve-form"' not in page

    ReviewItem.objects.filter(pk=proposal.pk).update(
        locked_at=timezone.now() - timedelta(minutes=16)
    )
    page = client.get(f"/reviews/{proposal.pk}/").content.decode()
    assert 'id="approve-form"' in page
    proposal.refresh_from_db()
    assert proposal.locked_by == reviewer2


def test_a_thumbs_down_item_names_the_strategies_its_answer_applied(
    client: Client, support_agent: Any, support_user: Any, ops_user: Any, make_strategy: Any
) -> None:
    applied = make_strategy()
    run = Trace.objects.create(
        agent=support_agent, query="Where is #W1?", status="finished", final_answer="Lost."
    )
    Step.objects.create(
        trace=run,
        step_number=1,
        phase="action",
        started_at=timezone.now(),
        strategies_applied=[{"id": applied.pk, "kind": "adapter"}],
    )
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down", comment="not lost")
    client.force_login(ops_user)

    page = client.get(f"/reviews/{ReviewItem.objects.get().pk}/").content.decode()

    names = page[page.index('id="applied-strategies"') :]
    assert f'<a href="/policies/strategies/{applied.pk}/">{applied.label}</a>' in names
    assert "in order_id, keep only its digits" in names
    assert "“not lost”" in page


def test_an_invalid_edit_shows_its_errors_and_keeps_what_was_typed(
    client: Client, proposal: ReviewItem, ops_user: Any
) -> None:
    client.force_login(ops_user)
    typed = "tool: search_products\nschema: {type: objekt}\n"

    response = client.post(f"/reviews/{proposal.pk}/edit/", _edit_form(branch=typed))

    assert response.status_code == 400
    page = response.content.decode()
    assert "schema is invalid" in page
    assert "tool: search_products\nschema: {type: objekt}" in page
    assert "Require a query of two characters or more" in page
    assert '<details id="edit" open>' in page
    assert _strategy(proposal).branch == RULE and not AuditLog.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_valid_edit_through_the_page_publishes_and_says_so(
    replay_shop: str, client: Client, proposal: ReviewItem, ops_user: Any
) -> None:
    client.force_login(ops_user)

    response = client.post(f"/reviews/{proposal.pk}/edit/", _edit_form(), follow=True)

    page = response.content.decode()
    assert "edited and approved: published as version v1" in page
    assert _strategy(proposal).branch == STRICTER


@pytest.mark.parametrize("action", ["reject", "evidence"])
def test_reject_and_ask_for_evidence_need_a_reason(
    client: Client, proposal: ReviewItem, ops_user: Any, action: str
) -> None:
    client.force_login(ops_user)

    response = client.post(f"/reviews/{proposal.pk}/{action}/", {f"{action}-note": " "})

    assert response.status_code == 400
    assert "Say why" in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN


def test_approve_and_next_opens_the_next_item(
    client: Client, proposal: ReviewItem, ops_user: Any, make_strategy: Any
) -> None:
    later = ReviewItem.objects.create(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW),
        reason=ReviewItem.Reason.LOW_CONFIDENCE,
    )
    client.force_login(ops_user)

    response = client.post(f"/reviews/{proposal.pk}/approve/", {"note": "", "next": "1"})

    assert response.status_code == 302 and response["Location"] == f"/reviews/{later.pk}/"
    response = client.post(f"/reviews/{later.pk}/approve/", {"next": "1"})
    assert response["Location"] == "/reviews/"


ACTIONS = {
    "approve": {"note": "ok"},
    "edit": _edit_form(),
    "reject": {"reject-note": "too broad"},
    "evidence": {"evidence-note": "more runs"},
    "reopen": {},
    "assign": {"assignee": ""},
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_support_may_not_act_on_a_review(
    client: Client, proposal: ReviewItem, support_user: Any, action: str
) -> None:
    client.force_login(support_user)

    response = client.post(f"/reviews/{proposal.pk}/{action}/", ACTIONS[action])

    assert response.status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == ReviewItem.Status.OPEN and proposal.assigned_to is None
    assert _strategy(proposal).branch == RULE
    assert not AuditLog.objects.exists() and not PolicyVersion.objects.exists()


def test_support_may_not_open_an_item(
    client: Client, proposal: ReviewItem, support_user: Any
) -> None:
    client.force_login(support_user)
    refused = client.get(f"/reviews/{proposal.pk}/")
    assert refused.status_code == 403
    assert (
        "<p>Only ops staff and admins review strategies. If you need it, ask an admin.</p>"
        in refused.content.decode()
    )
    proposal.refresh_from_db()
    assert proposal.locked_by is None


def test_an_unknown_action_is_a_404(client: Client, proposal: ReviewItem, ops_user: Any) -> None:
    client.force_login(ops_user)
    assert client.post(f"/reviews/{proposal.pk}/publish-everything/").status_code == 404


def test_the_queue_filters_by_status_and_assignee(
    client: Client, proposal: ReviewItem, ops_user: Any, reviewer2: Any, make_strategy: Any
) -> None:
    mine = ReviewItem.objects.create(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW),
        reason=ReviewItem.Reason.LOW_CONFIDENCE,
    )
    review_item_assign(item_id=mine.pk, user=ops_user, assignee=ops_user)
    review_item_request_evidence(item_id=proposal.pk, user=reviewer2, note="more runs")
    client.force_login(ops_user)

    def listed(query: str) -> list[str]:
        page = client.get(f"/reviews/?{query}").content.decode()
        return sorted(part.split('"', 1)[0] for part in page.split('class="item-link" href="')[1:])

    assert listed("") == [f"/reviews/{mine.pk}/"]
    assert listed("status=needs_evidence") == [f"/reviews/{proposal.pk}/"]
    assert listed("status=&assigned=me") == [f"/reviews/{mine.pk}/"]
    assert listed("status=&assigned=none") == [f"/reviews/{proposal.pk}/"]


def test_the_item_page_query_count_does_not_grow_with_its_evidence(
    client: Client, proposal: ReviewItem, ops_user: Any, make_strategy: Any, failed_trace: Any
) -> None:
    strategy = _strategy(proposal)
    client.force_login(ops_user)
    client.get(f"/reviews/{proposal.pk}/")  # the first visit claims the lock
    counts = []
    for extra in (1, 6):
        while strategy.source_traces.count() < extra + 1:
            strategy.source_traces.add(failed_trace(tool="search_products"))
            make_strategy(kind="validation_rule", branch=RULE, status=Strategy.Status.REJECTED)
            strategy_outcome_record(strategy_id=strategy.pk, success=True)
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/reviews/{proposal.pk}/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_an_approved_item_shows_the_canary_that_took_its_strategy_out(
    client: Client, proposal: ReviewItem, ops_user: Any, settings: Any
) -> None:
    """The loop past the decision: the version it went into and the rollout serving it."""
    settings.POLICY_PUBLISH = "canary"
    review_item_approve(item_id=proposal.pk, user=ops_user, note="fine")
    version = PolicyVersion.objects.get(rollout__isnull=False)
    client.force_login(ops_user)

    page = client.get(f"/reviews/{proposal.pk}/").content.decode()

    after = page[page.index('id="after-approval"') :]
    assert f'href="/policies/versions/{version.number}/">v{version.number}</a>' in after
    assert f'href="/policies/rollouts/{version.rollout.pk}/"' in after and "Running" in after


def test_a_thumbs_down_on_a_simulated_answer_says_the_simulated_model_wrote_it(
    client: Client, support_agent: Any, support_user: Any, ops_user: Any
) -> None:
    run = Trace.objects.create(
        agent=support_agent,
        query="Where is #W1?",
        status="finished",
        final_answer="Lost.",
        llm_backend="simulated",
    )
    feedback_submit(trace_id=str(run.pk), user=support_user, rating="down")
    client.force_login(ops_user)

    item = client.get(f"/reviews/{ReviewItem.objects.get().pk}/").content.decode()
    queue = client.get("/reviews/").content.decode()

    for page in (item, queue):
        answer = page[page.index("<dt>Answer</dt>") :].split("</dd>", 1)[0]
        assert "Lost." in answer and ">simulated</span>" in answer


def test_an_edit_with_yaml_aliases_is_refused_at_once_and_changes_nothing(
    client: Client, proposal: ReviewItem, ops_user: Any
) -> None:
    """Nested aliases (~800 bytes) made a structure whose every walk (the schema check,
    redaction) doubles per level: 50 s of one process at depth 12, days at 25."""
    client.force_login(ops_user)
    levels = ["  l0: &l0 {type: string}"]
    levels += [
        f"  l{n}: &l{n} {{type: object, properties: {{a: *l{n - 1}, b: *l{n - 1}}}}}"
        for n in range(1, 15)  # before: minutes; each level doubled it
    ]
    typed = "tool: search_products\nschema:\n  $defs:\n" + "\n".join("  " + line for line in levels)

    response = client.post(f"/reviews/{proposal.pk}/edit/", _edit_form(branch=typed))

    assert response.status_code == 400
    assert "aliases (*l0) are not accepted here" in response.content.decode()
    assert _strategy(proposal).branch == RULE and not AuditLog.objects.exists()
