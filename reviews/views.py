"""Staff pages of the review queue."""

from __future__ import annotations

import re
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST

from reviews.forms import ReviewDecisionForm
from reviews.models import ReviewItem
from reviews.selectors import (
    AuditFilter,
    audit_log_page,
    review_items_decided,
    review_items_open,
    user_can_review,
    user_can_view_audit_log,
)
from reviews.services import (
    ReviewConflict,
    feedback_submit,
    review_item_approve,
    review_item_reject,
)
from traces.models import Feedback
from traces.selectors import runs_for_chat
from traces.views import run_answer_response


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    if not user_can_review(request.user):
        raise PermissionDenied("Only ops staff and admins review strategies.")
    return render(
        request,
        "reviews/queue.html",
        {"open_items": review_items_open(), "decided": review_items_decided()},
    )


@login_required
@require_POST
def review_decide(request: HttpRequest, item_id: int) -> HttpResponse:
    if not user_can_review(request.user):
        raise PermissionDenied("Only ops staff and admins review strategies.")
    form = ReviewDecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for errors in form.errors.values() for e in errors))
        return redirect("reviews:queue")
    decision = form.cleaned_data["decision"]
    note = form.cleaned_data["note"]
    try:
        if decision == "approve":
            review_item_approve(item_id=item_id, user=request.user, note=note)
        else:
            review_item_reject(item_id=item_id, user=request.user, note=note)
    except ReviewItem.DoesNotExist as exc:
        # A stale page or a typed URL: the item is gone, which is not a server error.
        raise Http404(f"No review {item_id}.") from exc
    except ReviewConflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Review {item_id} {decision}d.")
    return redirect("reviews:queue")


@login_required
@require_POST
def run_feedback(request: HttpRequest, trace_id: str) -> HttpResponse:
    """Thumbs up/down on an answer the user may see; a thumbs-down lands in this queue."""
    run = get_object_or_404(runs_for_chat(user=request.user), pk=trace_id)
    rating = request.POST.get("rating", "")
    if rating not in Feedback.Rating.values:
        return HttpResponse("rating must be up or down", status=400)
    feedback_submit(
        trace_id=str(run.pk),
        user=request.user,
        rating=rating,
        comment=request.POST.get("comment", "").strip()[:2000],
    )
    return run_answer_response(request, trace_id=str(run.pk))


AUDIT_PER_PAGE = 50
# Actions the code writes today, offered as suggestions; the filter takes any exact action.
AUDIT_ACTIONS = (
    "policy_version.create",
    "policy.import",
    "strategy.activate",
    "strategy.reject",
    "strategy.deprecate",
    "strategy.send_to_review",
    "review.approve",
    "review.reject",
    "reflexion.stop",
)


# Audit targets that name a page of their own.
_TARGET_PAGES = (
    (re.compile(r"S(\d{1,10})"), "policies:strategy"),
    (re.compile(r"v(\d{1,10})"), "policies:version"),
)


def _target_url(target: str) -> str:
    for pattern, name in _TARGET_PAGES:
        found = pattern.fullmatch(target)
        if found:
            return reverse(name, args=[int(found.group(1))])
    return ""


def _aware(value: str) -> datetime | None:
    try:
        parsed = parse_datetime(value.strip()[:40]) if value.strip() else None
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


def _cursor(value: str) -> tuple[datetime, int] | None:
    at, _, pk = value.rpartition("~")
    moment = _aware(at)
    if moment is None or not pk.isdigit() or len(pk) > 18:
        return None
    return moment, int(pk)


@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit log for admins: filters and the page position live in the URL."""
    if not user_can_view_audit_log(request.user):
        raise PermissionDenied("Only admins read the audit log.")
    get = request.GET
    filters = AuditFilter(
        actor=get.get("actor", "").strip()[:150],
        action=get.get("action", "").strip()[:60],
        target=get.get("target", "").strip()[:100],
        since=_aware(get.get("since", "")),
        until=_aware(get.get("until", "")),
    )
    rows = audit_log_page(
        filters=filters, cursor=_cursor(get.get("after", "")), limit=AUDIT_PER_PAGE
    )
    entries, more = rows[:AUDIT_PER_PAGE], len(rows) > AUDIT_PER_PAGE
    next_query = None
    if more:
        query = get.copy()
        last = entries[-1]
        query["after"] = f"{last.created_at.isoformat()}~{last.pk}"
        next_query = query.urlencode()
    return render(
        request,
        "reviews/audit.html",
        {
            "entries": [(entry, _target_url(entry.target)) for entry in entries],
            "filters": filters,
            "raw": {key: get.get(key, "") for key in ("since", "until")},
            "paged": bool(get.get("after")),
            "filtered": any(
                (filters.actor, filters.action, filters.target, filters.since, filters.until)
            ),
            "next_query": next_query,
            "actions": AUDIT_ACTIONS,
        },
    )


def review_item_page(request: HttpRequest, item_id: int) -> HttpResponse:  # placeholder
    raise Http404
