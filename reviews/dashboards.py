"""The ops dashboards: the KPI overview, the failures page and the JSON their charts read.

They live in the top layer because the overview joins two stores: the rollups
(``traces.dashboards``) and the approval times of strategies (``policies.selectors``).
Every number comes from the rollup tables; none of these views reads the Step table.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from policies.selectors import strategy_approvals_by_error_type
from traces.dashboards import (
    BREAKDOWNS,
    DAY,
    HOUR,
    WINDOWS,
    RollupFilters,
    Window,
    discoveries_with_approvals,
    error_types_first_seen,
    failure_filter_choices,
    failures_breakdown,
    failures_over_time,
    kpis_for_window,
    mean_hours_to_approval,
    runs_over_time,
    window_resolve,
)
from traces.models import ErrorType, Trace
from traces.rollups import BUCKET_BANDS
from traces.selectors import user_sees_all_traces

# Stated on the pages: the rollups are written in the same transaction as the steps.
FRESHNESS = "Live: counts are updated in the same transaction that stores each step and run."


def _staff_only(request: HttpRequest) -> None:
    if not user_sees_all_traces(request.user):
        raise PermissionDenied("Only ops staff and admins see the dashboards.")


def _window(request: HttpRequest) -> Window:
    return window_resolve(
        key=request.GET.get("window", ""), now=timezone.now(), bucket=request.GET.get("per", "")
    )


def _query(window: Window, filters: RollupFilters, **extra: str) -> str:
    return urlencode({"window": window.key, "per": window.bucket, **filters.as_params(), **extra})


def _drill_base(window: Window, filters: RollupFilters) -> str:
    """The trace list filtered like the page; a click adds the bar's or slice's own filter."""
    params = filters.as_params()
    params["step_error"] = params.pop("error_type", "any")
    params.setdefault("since", window.start.isoformat())
    params.setdefault("until", window.end.isoformat())
    return reverse("traces:list") + "?" + urlencode(params)


def _discovery_context(window: Window) -> dict[str, Any]:
    found = error_types_first_seen(window=window)
    types = [item.error_type for item in (*found.current, *found.previous)]
    approvals, in_force = strategy_approvals_by_error_type(error_types=types)
    found = discoveries_with_approvals(found, approvals=approvals, in_force=in_force)
    return {
        "new_error_types": found.current,
        "new_error_types_previous": len(found.previous),
        "hours_to_approval": mean_hours_to_approval(found.current),
        "hours_to_approval_previous": mean_hours_to_approval(found.previous),
    }


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """The KPIs of seed §5.1 over a window, each against the window before."""
    _staff_only(request)
    window = _window(request)
    filters = RollupFilters.from_params(request.GET)
    kpis = kpis_for_window(window=window, filters=filters)
    return render(
        request,
        "dashboards/overview.html",
        {
            "window": window,
            "windows": list(WINDOWS),
            "filters": filters,
            "kpis": kpis,
            "has_runs": bool(kpis[0].value or kpis[0].previous),
            "runs_url": reverse("dashboards:runs-json") + "?" + _query(window, filters),
            "failures_url": reverse("dashboards:failures") + "?" + _query(window, filters),
            "freshness": FRESHNESS,
            **_discovery_context(window),
        },
    )


@login_required
def failures(request: HttpRequest) -> HttpResponse:
    """Error types over time and failed steps by tool, endpoint and policy version."""
    _staff_only(request)
    window = _window(request)
    filters = RollupFilters.from_params(request.GET)
    query = _query(window, filters)
    return render(
        request,
        "dashboards/failures.html",
        {
            "window": window,
            "windows": list(WINDOWS),
            "buckets": [name for name in (HOUR, DAY) if name in WINDOWS[window.key][2]],
            "filters": filters,
            "choices": failure_filter_choices(window=window, filters=filters),
            "error_types": ErrorType.values,
            "origins": [*Trace.Origin.values, "all"],
            "bands": BUCKET_BANDS,
            "series_url": reverse("dashboards:failures-json") + "?" + query,
            "breakdown_urls": {
                by: reverse("dashboards:breakdown-json") + "?" + _query(window, filters, by=by)
                for by in BREAKDOWNS
            },
            "drill_base": _drill_base(window, filters),
            "freshness": FRESHNESS,
        },
    )


@login_required
def kpis_json(request: HttpRequest) -> JsonResponse:
    _staff_only(request)
    window = _window(request)
    filters = RollupFilters.from_params(request.GET)
    context = _discovery_context(window)
    return JsonResponse(
        {
            "window": {"key": window.key, "start": window.start, "end": window.end},
            "kpis": [kpi.as_dict() for kpi in kpis_for_window(window=window, filters=filters)],
            "new_error_types": [
                {
                    "error_type": item.error_type,
                    "first_seen": item.first_seen,
                    "approved_at": item.approved_at,
                    "hours_to_approval": item.hours_to_approval,
                    # False once every approved strategy for it was deprecated.
                    "strategy_in_force": item.in_force if item.approved_at else None,
                }
                for item in context["new_error_types"]
            ],
            "new_error_types_previous": context["new_error_types_previous"],
            "mean_hours_to_approval": context["hours_to_approval"],
            "mean_hours_to_approval_previous": context["hours_to_approval_previous"],
        }
    )


@login_required
def runs_json(request: HttpRequest) -> JsonResponse:
    _staff_only(request)
    filters = RollupFilters.from_params(request.GET)
    return JsonResponse(runs_over_time(window=_window(request), filters=filters))


@login_required
def failures_json(request: HttpRequest) -> JsonResponse:
    _staff_only(request)
    filters = RollupFilters.from_params(request.GET)
    return JsonResponse(failures_over_time(window=_window(request), filters=filters))


@login_required
def breakdown_json(request: HttpRequest) -> JsonResponse:
    _staff_only(request)
    by = request.GET.get("by", "")
    if by not in BREAKDOWNS:
        return JsonResponse({"error": f"by must be one of {', '.join(BREAKDOWNS)}"}, status=400)
    filters = RollupFilters.from_params(request.GET)
    return JsonResponse(failures_breakdown(window=_window(request), filters=filters, by=by))
