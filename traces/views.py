"""Staff pages of the trace store: trace explorer and live step partials."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme

from traces.dashboards import ORIGIN_ALL
from traces.models import ErrorType, Feedback, Job, Trace
from traces.selectors import (
    TEXT_FILTER_MAX_LENGTH,
    jobs_ended,
    jobs_running,
    run_for_chat,
    runs_for_chat,
    strategy_ids_applied,
    trace_page,
    trace_timeline,
    traces_matching_text,
    traces_visible_to,
    user_can_view_jobs,
)
from traces.trace_filters import TraceListFilters


@login_required
def trace_list(request: HttpRequest) -> HttpResponse:
    filters = TraceListFilters.from_params(request.GET)
    qs = filters.apply(traces_visible_to(user=request.user))
    text = request.GET.get("q", "").strip()[:TEXT_FILTER_MAX_LENGTH]
    qs = traces_matching_text(qs, text=text)
    # Stored totals and indexed columns only: no aggregate over Steps, and no COUNT of
    # the matching traces (the pager reads one row past the page to know there is more).
    page = trace_page(qs, number=request.GET.get("page"))
    return render(
        request,
        "traces/trace_list.html",
        {
            "q": text,
            "page": page,
            "filters": filters,
            "querystring": filters.querystring(),
            "status": filters.status,
            "error_type": filters.error_type,
            "outcome": filters.outcome,
            "outcomes": Trace.Outcome.choices,
            "statuses": Trace.Status.values,
            "error_types": ErrorType.values,
            "origins": [*Trace.Origin.values, ORIGIN_ALL],
        },
    )


@login_required
def trace_detail(request: HttpRequest, trace_id: str) -> HttpResponse:
    trace = get_object_or_404(
        traces_visible_to(user=request.user)
        .select_related("handed_over_by")
        .prefetch_related(Prefetch("feedback", queryset=Feedback.objects.select_related("user"))),
        pk=trace_id,
    )
    timeline = trace_timeline(trace=trace)
    return render(
        request,
        "traces/trace_detail.html",
        {"trace": trace, "timeline": timeline, "applied_ids": strategy_ids_applied(timeline)},
    )


@login_required
def trace_steps_partial(request: HttpRequest, trace_id: str) -> HttpResponse:
    """The steps block of one run; htmx polls it until the run is terminal."""
    trace = get_object_or_404(runs_for_chat(user=request.user), pk=trace_id)
    return render(request, "traces/_run.html", {"run": trace, "steps": trace.steps.all()})


def run_answer_response(request: HttpRequest, *, trace_id: str) -> HttpResponse:
    """After an action on a run's answer (feedback, handover): the new answer block for
    htmx, or, without JS, back to the page the form was on."""
    if request.headers.get("HX-Request"):
        run = run_for_chat(user=request.user, trace_id=trace_id)
        if run is None:
            raise Http404
        return render(request, "traces/_answer.html", {"run": run})
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = "/"
    return redirect(f"{back}#run-{trace_id}")


def _jobs_context(request: HttpRequest) -> dict[str, object]:
    if not user_can_view_jobs(request.user):
        raise PermissionDenied("Only ops staff and admins watch jobs.")
    kind = request.GET.get("kind", "")
    kind = kind if kind in Job.Kind.values else ""
    return {
        "running": list(jobs_running()),
        "ended": list(jobs_ended(kind=kind)),
        "kind": kind,
        "kinds": Job.Kind.choices,
    }


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """Long jobs: the running ones with their progress above the most recent ended ones."""
    return render(request, "traces/jobs.html", _jobs_context(request))


@login_required
def job_list_partial(request: HttpRequest) -> HttpResponse:
    """The jobs block alone; htmx polls it (fast while a job runs, slowly otherwise)."""
    return render(request, "traces/_jobs.html", _jobs_context(request))
