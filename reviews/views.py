"""Staff pages of the review queue."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST

from policies.branches import branch_fields
from policies.selectors import (
    strategy_confidence_history,
    strategy_rollouts,
    strategy_source_traces,
    strategy_versions,
)
from reviews.forms import (
    ReviewAssignForm,
    ReviewDecisionForm,
    ReviewNoteForm,
    ReviewReasonForm,
    StrategyEditForm,
)
from reviews.models import ReviewItem
from reviews.selectors import (
    QUEUE_PAGE_SIZE,
    AuditFilter,
    ReviewFilter,
    audit_log_page,
    review_item_for_page,
    review_item_neighbours,
    review_item_next,
    review_item_similar_strategies,
    review_item_thumbs_down,
    review_item_version_preview,
    review_items_decided,
    review_items_list,
    user_can_review,
    user_can_view_audit_log,
)
from reviews.services import (
    LOCK_MINUTES,
    ReviewConflict,
    StrategyEditInvalid,
    feedback_submit,
    review_item_approve,
    review_item_assign,
    review_item_edit_approve,
    review_item_lock,
    review_item_reject,
    review_item_reopen,
    review_item_request_evidence,
)
from traces.models import Feedback
from traces.selectors import runs_for_chat
from traces.views import run_answer_response

REVIEW_STATUSES = ("", *ReviewItem.Status.values)
ASSIGNED_CHOICES = (("", "anyone"), ("me", "me"), ("none", "nobody"))


def _reviewer_only(request: HttpRequest) -> None:
    if not user_can_review(request.user):
        raise PermissionDenied("Only ops staff and admins review strategies.")


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    """The queue: open items by default; filters (status, reason, assignee) live in the URL."""
    _reviewer_only(request)
    get = request.GET
    status = get.get("status", ReviewItem.Status.OPEN)
    filters = ReviewFilter(
        status=status if status in REVIEW_STATUSES else ReviewItem.Status.OPEN,
        reason=get.get("reason", "") if get.get("reason", "") in ReviewItem.Reason.values else "",
        assigned=get.get("assigned", "") if get.get("assigned", "") in ("me", "none") else "",
    )
    after = get.get("after", "")
    items, next_after = review_items_list(
        filters=filters,
        user=request.user,
        after=int(after) if after.isascii() and after.isdigit() and len(after) < 19 else None,
    )
    params = {"status": filters.status, "reason": filters.reason, "assigned": filters.assigned}
    return render(
        request,
        "reviews/queue.html",
        {
            "items": items,
            "paged": bool(after),
            "first_page": urlencode(params),
            "next_page": urlencode({**params, "after": next_after}) if next_after else "",
            "page_size": QUEUE_PAGE_SIZE,
            "filters": filters,
            "statuses": [("", "every status"), *ReviewItem.Status.choices],
            "reasons": [("", "every reason"), *ReviewItem.Reason.choices],
            "assigned_choices": ASSIGNED_CHOICES,
            "decided": review_items_decided(),
        },
    )


def _item_context(
    request: HttpRequest,
    item: ReviewItem,
    *,
    forms: dict[str, Any] | None = None,
    lock_notice: str = "",
) -> dict[str, Any]:
    strategy = item.strategy
    context: dict[str, Any] = {
        "item": item,
        "lock_notice": lock_notice,
        "can_decide": item.is_open and not lock_notice,
        "lock_minutes": LOCK_MINUTES,
        "lock_expires": item.locked_at + timedelta(minutes=LOCK_MINUTES)
        if item.locked_at
        else None,
    }
    previous, following = review_item_neighbours(
        item=item, user=request.user, lock_minutes=LOCK_MINUTES
    )
    context.update(previous_id=previous, next_id=following)
    if strategy is not None:
        history = strategy_confidence_history(strategy_id=strategy.pk)
        # Only a proposal publishes on approval; approving a failing strategy keeps it.
        proposed = item.reason == ReviewItem.Reason.LOW_CONFIDENCE
        context.update(
            strategy=strategy,
            branch_fields=branch_fields(strategy.kind, strategy.branch),
            preview=review_item_version_preview(strategy=strategy)
            if item.is_open and proposed
            else None,
            history=list(reversed(history))[:20],
            history_total=len(history),
            similar=review_item_similar_strategies(strategy=strategy),
            evidence=strategy_source_traces(strategy=strategy, user=request.user),
            editable=proposed,
            # What came of it after the decision: the versions and canaries that carried it.
            versions=strategy_versions(strategy=strategy, limit=10),
            rollouts=strategy_rollouts(strategy=strategy),
        )
    if item.trace is not None:
        context["thumbs_down"] = review_item_thumbs_down(trace=item.trace)
    forms = forms or {}
    context["approve_form"] = forms.get("approve") or ReviewNoteForm()
    context["reject_form"] = forms.get("reject") or ReviewReasonForm(prefix="reject")
    context["evidence_form"] = forms.get("evidence") or ReviewReasonForm(prefix="evidence")
    context["assign_form"] = forms.get("assign") or ReviewAssignForm(
        initial={"assignee": item.assigned_to_id}
    )
    if strategy is not None:
        context["edit_form"] = forms.get("edit") or StrategyEditForm.for_strategy(strategy)
    context["edit_open"] = "edit" in forms
    return context


@login_required
def review_item_page(request: HttpRequest, item_id: int) -> HttpResponse:
    """One item: what it proposes, what approving publishes, its evidence and history.

    Opening an open item claims its lock (15 minutes), as the queue's reviewers agreed."""
    _reviewer_only(request)
    lock_notice = ""
    try:
        item = review_item_for_page(item_id=item_id)
        if item.is_open:
            try:
                review_item_lock(item_id=item.pk, user=request.user)
            except ReviewConflict as exc:
                lock_notice = str(exc)
            item = review_item_for_page(item_id=item_id)
    except ReviewItem.DoesNotExist as exc:
        raise Http404(f"No review {item_id}.") from exc
    return render(
        request, "reviews/item.html", _item_context(request, item, lock_notice=lock_notice)
    )


ITEM_ACTIONS = ("approve", "edit", "reject", "evidence", "reopen", "assign")


def _invalid(request: HttpRequest, item: ReviewItem, name: str, form: Any) -> HttpResponse:
    """Re-render the item with the refused form, its errors and everything typed kept."""
    context = _item_context(request, item, forms={name: form})
    return render(request, "reviews/item.html", context, status=400)


@login_required
@require_POST
def review_item_action(request: HttpRequest, item_id: int, action: str) -> HttpResponse:
    """approve (optionally and-next), edit (edit-then-approve), reject, evidence (ask for
    more), reopen, assign. Every decision is audited by its service."""
    _reviewer_only(request)
    if action not in ITEM_ACTIONS:
        raise Http404(f"No review action {action!r}.")
    try:
        item = review_item_for_page(item_id=item_id)
    except ReviewItem.DoesNotExist as exc:
        raise Http404(f"No review {item_id}.") from exc
    user = request.user
    done = ""
    try:
        if action == "approve":
            form: Any = ReviewNoteForm(request.POST)
            if not form.is_valid():
                return _invalid(request, item, action, form)
            item = review_item_approve(item_id=item.pk, user=user, note=form.cleaned_data["note"])
            done = f"Review {item.pk} approved" + (f": {item.published}" if item.published else "")
        elif action == "edit":
            if item.strategy is None:
                raise ReviewConflict(f"review {item.pk} has no strategy to edit")
            form = StrategyEditForm(request.POST, kind=item.strategy.kind)
            if not form.is_valid():
                return _invalid(request, item, action, form)
            try:
                item = review_item_edit_approve(
                    item_id=item.pk, user=user, edit=form.edit(), note=form.cleaned_data["note"]
                )
            except StrategyEditInvalid as exc:
                for error in exc.errors:
                    form.add_error(None, error)
                return _invalid(request, item, action, form)
            done = f"Review {item.pk} edited and approved" + (
                f": {item.published}" if item.published else ""
            )
        elif action in ("reject", "evidence"):
            form = ReviewReasonForm(request.POST, prefix=action)
            if not form.is_valid():
                return _invalid(request, item, action, form)
            note = form.cleaned_data["note"]
            if action == "reject":
                review_item_reject(item_id=item.pk, user=user, note=note)
                done = f"Review {item.pk} rejected."
            else:
                review_item_request_evidence(item_id=item.pk, user=user, note=note)
                done = f"Review {item.pk} waits for more evidence."
        elif action == "reopen":
            review_item_reopen(item_id=item.pk, user=user)
            done = f"Review {item.pk} reopened."
        else:
            form = ReviewAssignForm(request.POST)
            if not form.is_valid():
                return _invalid(request, item, action, form)
            assignee = form.cleaned_data["assignee"]
            review_item_assign(item_id=item.pk, user=user, assignee=assignee)
            done = f"Review {item.pk} assigned to {assignee or 'nobody'}."
    except ReviewConflict as exc:
        messages.error(request, str(exc))
        return redirect("reviews:item", item_id=item.pk)
    messages.success(request, done)
    if action in ("approve", "edit", "reject") and request.POST.get("next"):
        following = review_item_next(after=item, user=user, lock_minutes=LOCK_MINUTES)
        if following is not None:
            return redirect("reviews:item", item_id=following)
        return redirect("reviews:queue")
    return redirect("reviews:item", item_id=item.pk)


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
    "review.request_evidence",
    "review.reopen",
    "review.assign",
    "review.auto_merge",
    "strategy.edit",
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
    # isascii: str.isdigit() also accepts digits such as "²" that int() refuses.
    if moment is None or not (pk.isascii() and pk.isdigit()) or len(pk) > 18:
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
