"""Staff pages of the policy tree: the active version, versions, diffs, strategies, the
canary rollouts and the A/B experiments of the learning loop.

Views stay thin: documents.py renders and compares the YAML, selectors.py reads rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from policies.documents import (
    policy_document_parse,
    policy_document_side_by_side,
    policy_document_tree,
    policy_version_get,
)
from policies.experiments import (
    ALPHA,
    ExperimentStateError,
    experiment_create,
    experiment_report,
    experiment_start,
    experiment_stop,
    experiments_page,
    user_can_run_experiments,
)
from policies.forms import ExperimentForm
from policies.models import Experiment, PolicyVersion, Rollout, Strategy
from policies.rollout_stats import rollout_judge, schedule_next
from policies.rollouts import (
    RolloutError,
    rollout_manual,
    rollout_rules,
    rollout_window,
)
from policies.selectors import (
    policy_version_active,
    policy_versions_page,
    rollout_decisions,
    rollout_series,
    rollouts_page,
    strategies_by_id,
    strategy_confidence_history,
    strategy_rollouts,
    strategy_source_traces,
    strategy_versions,
    user_can_manage_rollouts,
    user_can_view_policies,
)
from policies.services import CONFIDENCE_CITE_MIN, CONFIDENCE_DEPRECATE_BELOW

VERSIONS_PER_PAGE = 25
SPARK_WIDTH, SPARK_HEIGHT = 320, 60


def _policies_viewer(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not user_can_view_policies(request.user):
            raise PermissionDenied("Only ops staff and admins read the policy tree.")
        return view(request, *args, **kwargs)

    return wrapped


def _version_or_404(number: int) -> PolicyVersion:
    version = policy_version_get(number=number)
    if version is None:
        raise Http404(f"There is no policy version v{number}.")
    return version


def _tree_page(request: HttpRequest, version: PolicyVersion | None) -> HttpResponse:
    scopes: list[dict[str, Any]] = []
    if version is not None:
        document = policy_document_parse(version.document)
        live = strategies_by_id([e.id for e in document.entries if e.id is not None])
        scopes = [
            {
                "scope": scope,
                "lists": [
                    {
                        "name": branch_list.name,
                        "entries": [
                            {
                                "entry": entry,
                                "strategy": live.get(entry.id) if entry.id else None,
                                "branch": yaml.safe_dump(
                                    entry.branch, sort_keys=False, allow_unicode=True
                                ),
                            }
                            for entry in branch_list.entries
                        ],
                    }
                    for branch_list in scope.lists
                ],
            }
            for scope in policy_document_tree(document)
        ]
    return render(request, "policies/tree.html", {"version": version, "scopes": scopes})


@_policies_viewer
def policy_active(request: HttpRequest) -> HttpResponse:
    return _tree_page(request, policy_version_active())


@_policies_viewer
def policy_version_tree(request: HttpRequest, number: int) -> HttpResponse:
    return _tree_page(request, _version_or_404(number))


def _int_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return int(value) if value.isdigit() and len(value) < 10 else None


@_policies_viewer
def policy_version_list(request: HttpRequest) -> HttpResponse:
    before = _int_param(request, "before")
    rows = policy_versions_page(before=before, limit=VERSIONS_PER_PAGE)
    versions, older = rows[:VERSIONS_PER_PAGE], len(rows) > VERSIONS_PER_PAGE
    return render(
        request,
        "policies/versions.html",
        {
            "versions": versions,
            "before": before,
            "older": versions[-1].number if older else None,
        },
    )


@_policies_viewer
def policy_version_yaml(request: HttpRequest, number: int) -> HttpResponse:
    version = _version_or_404(number)
    response = HttpResponse(version.document, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="policy-v{version.number}.yaml"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@_policies_viewer
def policy_version_diff(request: HttpRequest) -> HttpResponse:
    a, b = _int_param(request, "a"), _int_param(request, "b")
    old = policy_version_get(number=a) if a is not None else None
    new = policy_version_get(number=b) if b is not None else None
    rows = (
        policy_document_side_by_side(old_text=old.document, new_text=new.document)
        if old is not None and new is not None
        else []
    )
    recent = PolicyVersion.objects.order_by("-number").values_list("number", flat=True)[:200]
    numbers = sorted({*recent, *(v.number for v in (old, new) if v is not None)}, reverse=True)
    return render(
        request,
        "policies/diff.html",
        {
            "old": old,
            "new": new,
            "a": a,
            "b": b,
            # Until two are picked, offer the newest version against its predecessor.
            "pick_a": a if a is not None else (numbers[1] if len(numbers) > 1 else None),
            "pick_b": b if b is not None else (numbers[0] if numbers else None),
            "rows": rows,
            "changed": sum(1 for row in rows if row.tag not in ("equal", "skip")),
            "numbers": numbers,
            "missing": [n for n, v in ((a, old), (b, new)) if n is not None and v is None],
        },
    )


def _sparkline(values: list[float]) -> str:
    """SVG polyline points for confidence values in [0, 1]; empty for fewer than two."""
    if len(values) < 2:
        return ""
    step = SPARK_WIDTH / (len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{(1 - max(0.0, min(1.0, v))) * SPARK_HEIGHT:.1f}"
        for i, v in enumerate(values)
    )


@_policies_viewer
def strategy_detail(request: HttpRequest, strategy_id: int) -> HttpResponse:
    strategy = get_object_or_404(Strategy.objects.select_related("policy"), pk=strategy_id)
    history = strategy_confidence_history(strategy_id=strategy.pk)
    values = ([history[0].old] if history else []) + [event.new for event in history]
    return render(
        request,
        "policies/strategy.html",
        {
            "strategy": strategy,
            "branch_yaml": yaml.safe_dump(strategy.branch, sort_keys=False, allow_unicode=True),
            "history": history,
            "recent": list(reversed(history))[:50],
            "spark": _sparkline(values),
            "spark_width": SPARK_WIDTH,
            "spark_height": SPARK_HEIGHT,
            "thresholds": {
                "cite": (1 - CONFIDENCE_CITE_MIN) * SPARK_HEIGHT,
                "deprecate": (1 - CONFIDENCE_DEPRECATE_BELOW) * SPARK_HEIGHT,
            },
            "traces": strategy_source_traces(strategy=strategy, user=request.user),
            "versions": strategy_versions(strategy=strategy),
            "rollouts": strategy_rollouts(strategy=strategy),
        },
    )


# --- A/B experiments ----------------------------------------------------------------------


def _experiment_runner(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not user_can_run_experiments(request.user):
            raise PermissionDenied("Only ops staff and admins run experiments.")
        return view(request, *args, **kwargs)

    return wrapped


@_experiment_runner
@require_http_methods(["GET"])
def experiment_list(request: HttpRequest) -> HttpResponse:
    return render(request, "policies/experiments.html", {"experiments": experiments_page()})


@_experiment_runner
@require_http_methods(["GET", "POST"])
def experiment_new(request: HttpRequest) -> HttpResponse:
    form = ExperimentForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        experiment = experiment_create(actor=request.user, **form.cleaned_data)
        messages.success(request, f"{experiment.label} created as a draft: start it to split.")
        return redirect(experiment)
    return render(
        request,
        "policies/experiment_new.html",
        {"form": form},
        status=400 if form.errors else 200,
    )


@_experiment_runner
@require_http_methods(["GET"])
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = get_object_or_404(
        Experiment.objects.select_related("created_by"), pk=experiment_id
    )
    return render(
        request,
        "policies/experiment.html",
        {
            "experiment": experiment,
            "report": experiment_report(experiment=experiment),
            "alpha": ALPHA,
        },
    )


# Each asks for confirmation on GET and acts on POST (audited by the service).
EXPERIMENT_ACTIONS = {"start": "Start", "stop": "Stop"}


@_experiment_runner
@require_http_methods(["GET", "POST"])
def experiment_action(request: HttpRequest, experiment_id: int, action: str) -> HttpResponse:
    if action not in EXPERIMENT_ACTIONS:
        raise Http404("No such experiment action.")
    experiment = get_object_or_404(Experiment, pk=experiment_id)
    if request.method == "GET":
        return render(
            request,
            "policies/experiment_confirm.html",
            {
                "experiment": experiment,
                "action": action,
                "verb": EXPERIMENT_ACTIONS[action],
                "running": Experiment.objects.filter(status=Experiment.Status.RUNNING)
                .exclude(pk=experiment.pk)
                .first(),
            },
        )
    do = experiment_start if action == "start" else experiment_stop
    try:
        do(experiment_id=experiment.pk, actor=request.user)
    except ExperimentStateError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"{experiment.label} started: new sessions are split from now on."
            if action == "start"
            else f"{experiment.label} stopped: new sessions run as usual; the report stays.",
        )
    return redirect(experiment)


# --- rollouts -------------------------------------------------------------------------------

# The controls the rollout page offers: each asks for confirmation on GET and acts on POST.
ROLLOUT_ACTIONS = {
    "pause": "Pause",
    "resume": "Resume",
    "set_percent": "Set the canary percentage of",
    "promote": "Promote",
    "rollback": "Roll back",
}


def _rollout_or_404(rollout_id: int) -> Rollout:
    return get_object_or_404(
        Rollout.objects.select_related("version", "stable", "strategy", "created_by"),
        pk=rollout_id,
    )


ROLLOUTS_SHOWN = 100


@_policies_viewer
def rollout_list(request: HttpRequest) -> HttpResponse:
    rollouts = rollouts_page(limit=ROLLOUTS_SHOWN + 1)
    return render(
        request,
        "policies/rollouts.html",
        {
            "rollouts": rollouts[:ROLLOUTS_SHOWN],
            "older": len(rollouts) > ROLLOUTS_SHOWN,
            "shown": ROLLOUTS_SHOWN,
        },
    )


@_policies_viewer
def rollout_detail(request: HttpRequest, rollout_id: int) -> HttpResponse:
    rollout = _rollout_or_404(rollout_id)
    rules = rollout_rules()
    window = verdict = None
    if rollout.is_open:
        window = rollout_window(rollout)
        verdict = rollout_judge(canary=window.canary, stable=window.stable, rules=rules)
    return render(
        request,
        "policies/rollout.html",
        {
            "rollout": rollout,
            "window": window,
            "verdict": verdict,
            "guard_metrics": GUARDED_METRICS,
            "guard_level": round((1 - rules.alpha) * 100),
            "latency_budget": f"{rules.latency_budget_ms:g}",
            "next_percent": schedule_next(rollout.schedule, rollout.percent),
            "decisions": rollout_decisions(rollout=rollout),
            "can_manage": rollout.is_open and user_can_manage_rollouts(request.user),
        },
    )


# The guarded rollout's tiles (the series' "guard" entries), as the page titles them.
GUARDED_METRICS = (
    ("error_rate", "Error rate"),
    ("success_rate", "Success rate (shown, not judged)"),
    ("p95_ms", "p95 latency (ms)"),
)


@_policies_viewer
def rollout_series_json(request: HttpRequest, rollout_id: int) -> JsonResponse:
    return JsonResponse(rollout_series(rollout=_rollout_or_404(rollout_id)))


def _percent_param(value: str) -> int | None:
    return int(value) if value.isdigit() and len(value) <= 3 else None


@_policies_viewer
@require_http_methods(["GET", "POST"])
def rollout_action(request: HttpRequest, rollout_id: int, action: str) -> HttpResponse:
    """Confirm, then pause, resume, set the percentage of, promote or roll back a rollout
    (each move is a decision row and an audit row with the user's name)."""
    if action not in ROLLOUT_ACTIONS:
        raise Http404("No such rollout action.")
    if not user_can_manage_rollouts(request.user):
        raise PermissionDenied("Only ops staff and admins move rollouts.")
    rollout = _rollout_or_404(rollout_id)
    source = request.POST if request.method == "POST" else request.GET
    percent = _percent_param(source.get("percent", "")) if action == "set_percent" else None
    if request.method == "GET":
        return render(
            request,
            "policies/rollout_confirm.html",
            {
                "rollout": rollout,
                "action": action,
                "verb": ROLLOUT_ACTIONS[action],
                "percent": percent,
                "next_percent": schedule_next(rollout.schedule, rollout.percent),
            },
        )
    try:
        rollout = rollout_manual(
            rollout_id=rollout.pk,
            action=action,
            actor=request.user,
            percent=percent,
            note=source.get("note", "")[:200],
        )
    except RolloutError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"{rollout.label}: {rollout.get_state_display()}, canary {rollout.version.label} "
            f"on {rollout.percent}%.",
        )
    return redirect("policies:rollout", rollout_id=rollout.pk)
