"""Who may decide a review item: every decision POST through the real views and roles.

A role without ``reviews.review_strategies`` gets a 403 (an anonymous visitor the login
page) and the decision changes nothing: not the item, its strategy, the policy versions,
nor the audit log. Removing the role check from ``review_decide`` fails these tests, since
the services themselves do not check roles.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import URLPattern, reverse
from django.utils import timezone

from policies.models import PolicyVersion, Strategy
from reviews import urls as review_urls
from reviews.models import AuditLog, ReviewItem
from reviews.views import ITEM_ACTIONS
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db

DECISIONS = [
    {"decision": "approve", "note": "looks right"},
    {"decision": "reject", "note": "too broad"},
]
REASONS = [reason.value for reason in ReviewItem.Reason]


@pytest.fixture
def items(make_strategy: Any, support_agent: Any) -> dict[str, ReviewItem]:
    """One open item per reason, as the code that opens each one leaves it."""
    proposed = make_strategy(status=Strategy.Status.IN_REVIEW)
    failing = make_strategy(
        branch={"tool": "get_return_status", "field": "order_id", "transform": "strip"},
        needs_review=True,
        consecutive_failures=2,
    )
    run = trace_create(agent_id=support_agent.pk, query="Where is it?", llm_backend="simulated")
    Trace.objects.filter(pk=run.pk).update(status="finished")
    return {
        "low_confidence": ReviewItem.objects.create(
            strategy=proposed, reason=ReviewItem.Reason.LOW_CONFIDENCE
        ),
        "consecutive_failures": ReviewItem.objects.create(
            strategy=failing, reason=ReviewItem.Reason.CONSECUTIVE_FAILURES
        ),
        "negative_feedback": ReviewItem.objects.create(
            error_signature="UNAUTHORIZED|get_order", reason=ReviewItem.Reason.NEGATIVE_FEEDBACK
        ),
        "thumbs_down": ReviewItem.objects.create(trace=run, reason=ReviewItem.Reason.THUMBS_DOWN),
    }


def _state() -> str:
    """Everything a decision may write, as one comparable text."""
    return json.dumps(
        {
            "items": list(ReviewItem.objects.order_by("pk").values()),
            "strategies": list(Strategy.objects.order_by("pk").values()),
            "versions": list(PolicyVersion.objects.order_by("pk").values()),
            "audit": list(AuditLog.objects.order_by("pk").values()),
        },
        default=str,
        sort_keys=True,
    )


@pytest.fixture
def no_role_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("nobody", password="pw-nobody-123")


@pytest.fixture
def staff_without_review(roles: None, django_user_model: Any) -> Any:
    """Staff (Django admin access) and every ops permission but the one to review."""
    user = django_user_model.objects.create_user("stan", password="pw-stan-123", is_staff=True)
    ops = Group.objects.get(name="ops")
    user.user_permissions.set(ops.permissions.exclude(codename="review_strategies"))
    return user


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("fields", DECISIONS, ids=lambda f: f["decision"])
@pytest.mark.parametrize("who", ["support_user", "no_role_user", "staff_without_review"])
def test_a_role_without_the_review_permission_gets_403_and_changes_nothing(
    client: Client,
    request: pytest.FixtureRequest,
    items: dict[str, ReviewItem],
    who: str,
    fields: dict[str, str],
    reason: str,
) -> None:
    user = request.getfixturevalue(who)
    assert not user.has_perm("reviews.review_strategies")
    client.force_login(user)
    before = _state()

    response = client.post(reverse("reviews:decide", args=[items[reason].pk]), fields)

    assert response.status_code == 403
    assert _state() == before


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("fields", DECISIONS, ids=lambda f: f["decision"])
def test_an_anonymous_decision_is_sent_to_login_and_changes_nothing(
    client: Client, items: dict[str, ReviewItem], fields: dict[str, str], reason: str
) -> None:
    before = _state()

    response = client.post(reverse("reviews:decide", args=[items[reason].pk]), fields)

    assert response.status_code == 302
    assert response["Location"].startswith(resolve_url(settings.LOGIN_URL))
    assert _state() == before


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("fields", DECISIONS, ids=lambda f: f["decision"])
@pytest.mark.parametrize("who", ["ops_user", "admin_role_user"])
def test_ops_and_admins_decide_every_kind_of_item(
    client: Client,
    request: pytest.FixtureRequest,
    items: dict[str, ReviewItem],
    who: str,
    fields: dict[str, str],
    reason: str,
) -> None:
    user = request.getfixturevalue(who)
    client.force_login(user)
    item = items[reason]

    response = client.post(reverse("reviews:decide", args=[item.pk]), fields)

    assert response.status_code == 302 and response["Location"] == reverse("reviews:queue")
    item.refresh_from_db()
    assert item.status == {"approve": "approved", "reject": "rejected"}[fields["decision"]]
    assert item.decided_by == user and item.decision_note == fields["note"]
    assert item.decided_at is not None and timezone.now() - item.decided_at < timedelta(minutes=1)
    audit = AuditLog.objects.get(action=f"review.{fields['decision']}")
    assert (audit.actor, audit.actor_kind, audit.target) == (user, "user", f"review {item.pk}")
    assert {k: audit.details.get(k) for k in ("reason", "note")} == {
        "reason": reason,
        "note": fields["note"],
    }
    if fields["decision"] == "approve":
        # An approval also says what it published (for a proposal, a canary of the new
        # version; other kinds publish nothing).
        assert "published" in audit.details
    # The other items wait untouched.
    assert ReviewItem.objects.filter(status="open").count() == len(items) - 1


def test_a_get_on_the_decision_url_decides_nothing(
    client: Client, items: dict[str, ReviewItem], ops_user: Any
) -> None:
    client.force_login(ops_user)
    before = _state()

    response = client.get(
        reverse("reviews:decide", args=[items["low_confidence"].pk]), {"decision": "approve"}
    )

    assert response.status_code == 405
    assert _state() == before


# Every route of the review app that takes an item id changes that item; none but the
# feedback route (a support agent's own vote) is open to support agents.
SUPPORT_MAY_POST = {"feedback"}


def test_every_review_route_refuses_support_agents(
    client: Client, items: dict[str, ReviewItem], support_user: Any
) -> None:
    client.force_login(support_user)
    before = _state()
    checked = []
    for pattern in review_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        if pattern.name in SUPPORT_MAY_POST:
            continue
        converters = pattern.pattern.converters
        assert set(converters) <= {"item_id", "action"}, f"no id to fill for {pattern.name}"
        kwargs: dict[str, Any] = {"item_id": items["low_confidence"].pk} if converters else {}
        # The item page's actions share one route: every one of them is refused.
        actions = list(ITEM_ACTIONS) if "action" in converters else [None]
        for action in actions:
            if action is not None:
                kwargs["action"] = action
            url = reverse(f"reviews:{pattern.name}", kwargs=kwargs)
            for method in (client.get, client.post):
                status = method(url, {"decision": "approve", "note": "x"}).status_code
                assert status in (403, 405), (pattern.name, action, method, status)
        checked.append(pattern.name)
    assert {"queue", "item", "decide", "act", "audit"} <= set(checked)
    assert _state() == before
