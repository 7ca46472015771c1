"""Staff pages of the review queue."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from reviews.selectors import review_items_decided, review_items_open, user_can_review
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
    decision = request.POST.get("decision")
    note = request.POST.get("note", "").strip()[:500]
    if decision not in ("approve", "reject"):
        messages.error(request, "Choose approve or reject.")
        return redirect("reviews:queue")
    if decision == "reject" and not note:
        messages.error(request, "Say why you reject it: the note is kept in the audit log.")
        return redirect("reviews:queue")
    try:
        if decision == "approve":
            review_item_approve(item_id=item_id, user=request.user, note=note)
        else:
            review_item_reject(item_id=item_id, user=request.user, note=note)
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
