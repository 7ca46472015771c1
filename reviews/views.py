"""Staff pages of the review queue."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from reviews.forms import ReviewDecisionForm
from reviews.models import ReviewItem
from reviews.selectors import review_items_decided, review_items_open, user_can_review
from reviews.services import ReviewConflict, review_item_approve, review_item_reject


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
