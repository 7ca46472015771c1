"""Retention (traces.retention, `manage.py traces_prune`, the `traces.prune` beat task):
what goes, what a hold keeps, batches, dry runs, and the horizon rollups_rebuild respects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.hooks import periodic_jobs
from policies.branches import branch_signature
from policies.models import Policy, Strategy
from reviews.models import ReviewItem
from traces.models import (
    Feedback,
    Job,
    RunRollupDaily,
    RunRollupHourly,
    Step,
    StepRollupDaily,
    StepRollupHourly,
    Trace,
    TracePrune,
)
from traces.retention import (
    prunable,
    retention_cutoff,
    retention_holds,
    traces_prune,
    traces_prune_due,
)
from traces.rollups import RetentionHorizonError, retention_horizon, rollups_rebuild
from traces.services import trace_create, trace_finish
from traces.tasks import prune

pytestmark = pytest.mark.django_db


def _run(agent: Any, *, days_ago: float, steps: int = 2, status: str = "finished") -> Trace:
    trace = trace_create(agent_id=agent.pk, query=f"{days_ago} days ago", llm_backend="simulated")
    for number in range(1, steps + 1):
        Step.objects.create(
            trace=trace, step_number=number, phase="action", started_at=timezone.now()
        )
    if status != "running":
        trace_finish(trace_id=str(trace.pk), status=status, final_answer="done")
    Trace.objects.filter(pk=trace.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return trace


def _left(runs: list[Trace]) -> list[Any]:
    """Which of ``runs`` are still stored, in the order given (other tests' rows aside)."""
    stored = set(Trace.objects.filter(pk__in=[r.pk for r in runs]).values_list("pk", flat=True))
    return [r.pk for r in runs if r.pk in stored]


def _strategy_from(trace: Trace) -> Strategy:
    branch = {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"}
    policy, _ = Policy.objects.get_or_create(intent="", tool_name="get_order")
    strategy = Strategy.objects.create(
        policy=policy,
        kind="adapter",
        tool_name="get_order",
        error_type="TYPE_MISMATCH",
        root_cause="get_order requires an integer order_id",
        strategy_update="Convert order_id to digits",
        branch=branch,
        signature=branch_signature("adapter", branch),
        origin="test",
    )
    strategy.source_traces.add(trace)
    return strategy


def _rollups() -> dict[str, set[tuple[Any, ...]]]:
    return {
        model.__name__: set(model.objects.values_list(*model.KEY, *model.COUNTERS))
        for model in (StepRollupHourly, StepRollupDaily, RunRollupHourly, RunRollupDaily)
    }


def test_a_pass_deletes_old_ended_runs_with_their_steps_and_keeps_everything_else(
    support_agent: Any, ops_user: Any
) -> None:
    old_ok = _run(support_agent, days_ago=40)
    old_failed = _run(support_agent, days_ago=35, status="failed", steps=3)
    Feedback.objects.create(trace=old_failed, user=ops_user, rating="down")
    closed_item = ReviewItem.objects.create(
        trace=old_failed, reason=ReviewItem.Reason.THUMBS_DOWN, status=ReviewItem.Status.REJECTED
    )
    recent = _run(support_agent, days_ago=5)
    old_running = _run(support_agent, days_ago=50, status="running")
    evidence = _run(support_agent, days_ago=60, status="failed")
    strategy = _strategy_from(evidence)
    under_review = _run(support_agent, days_ago=45, status="failed")
    open_item = ReviewItem.objects.create(
        trace=under_review, reason=ReviewItem.Reason.THUMBS_DOWN, status=ReviewItem.Status.OPEN
    )
    rollups_before = _rollups()

    result = traces_prune(before=timezone.now() - timedelta(days=30))

    assert (result.traces, result.steps, result.held) == (2, 5, 2)
    assert not Trace.objects.filter(pk__in=[old_ok.pk, old_failed.pk]).exists()
    assert not Step.objects.filter(trace_id__in=[old_ok.pk, old_failed.pk]).exists()
    assert not Feedback.objects.filter(trace_id=old_failed.pk).exists()
    kept = {recent.pk, old_running.pk, evidence.pk, under_review.pk}
    assert set(Trace.objects.filter(pk__in=kept).values_list("pk", flat=True)) == kept
    assert Step.objects.filter(trace_id=evidence.pk).count() == 2
    assert list(strategy.source_traces.all()) == [evidence]
    # An item that points at a deleted run keeps its history and loses the link.
    closed_item.refresh_from_db()
    assert closed_item.trace_id is None
    open_item.refresh_from_db()
    assert open_item.trace_id == under_review.pk
    # The dashboards keep their history.
    assert _rollups() == rollups_before
    prune_row = TracePrune.objects.get(pk=result.prune_id)
    assert (prune_row.traces_matched, prune_row.traces_deleted, prune_row.steps_deleted) == (
        2,
        2,
        5,
    )
    assert prune_row.traces_held == 2
    assert prune_row.finished_at is not None
    job = Job.objects.get(kind=Job.Kind.RETENTION)
    assert (job.status, job.done, job.total) == (Job.Status.FINISHED, 2, 2)


def test_a_needs_evidence_item_holds_its_run_and_a_decided_one_does_not(
    support_agent: Any,
) -> None:
    waiting = _run(support_agent, days_ago=40, status="failed")
    decided = _run(support_agent, days_ago=40, status="failed")
    ReviewItem.objects.create(
        trace=waiting,
        reason=ReviewItem.Reason.THUMBS_DOWN,
        status=ReviewItem.Status.NEEDS_EVIDENCE,
    )
    ReviewItem.objects.create(
        trace=decided, reason=ReviewItem.Reason.THUMBS_DOWN, status=ReviewItem.Status.APPROVED
    )
    cutoff = timezone.now() - timedelta(days=30)
    assert list(prunable(before=cutoff)) == [decided]
    assert set(retention_holds()) == {"strategy evidence", "open review item"}


def test_batches_go_oldest_first_and_report_progress(support_agent: Any) -> None:
    runs = [_run(support_agent, days_ago=40 + n, steps=1) for n in range(5)]
    seen: list[tuple[int, int]] = []
    left_after_first: list[set[Any]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if not left_after_first:
            left_after_first.append(set(_left(runs)))

    result = traces_prune(
        before=timezone.now() - timedelta(days=30), batch_size=2, progress=progress
    )

    assert result.traces == 5
    assert seen == [(2, 5), (4, 5), (5, 5)]
    # The two oldest went first: a pass cut short leaves a clean prefix deleted.
    assert left_after_first == [{run.pk for run in runs[:3]}]
    assert _left(runs) == []


def test_a_dry_run_counts_and_deletes_nothing(support_agent: Any) -> None:
    runs = [_run(support_agent, days_ago=40, steps=3), _run(support_agent, days_ago=1)]

    result = traces_prune(before=timezone.now() - timedelta(days=30), dry_run=True)

    assert (result.traces, result.steps, result.dry_run) == (1, 3, True)
    assert len(_left(runs)) == 2 and Step.objects.filter(trace__in=runs).count() == 5
    assert TracePrune.objects.get(pk=result.prune_id).dry_run
    # A dry run moves no horizon and starts no job.
    assert retention_horizon() is None
    assert not Job.objects.filter(kind=Job.Kind.RETENTION).exists()


def test_a_pass_with_nothing_to_delete_leaves_no_row(support_agent: Any) -> None:
    _run(support_agent, days_ago=1)
    result = traces_prune(before=timezone.now() - timedelta(days=30))
    assert (result.prune_id, result.traces) == (None, 0)
    assert not TracePrune.objects.exists()
    assert not Job.objects.filter(kind=Job.Kind.RETENTION).exists()


def test_bad_arguments_are_refused_before_anything_is_deleted(support_agent: Any) -> None:
    run = _run(support_agent, days_ago=40)
    with pytest.raises(ValueError, match="future"):
        traces_prune(before=timezone.now() + timedelta(minutes=5))
    with pytest.raises(ValueError, match="batch_size"):
        traces_prune(before=timezone.now() - timedelta(days=30), batch_size=0)
    with pytest.raises(ValueError, match="at least 1 day"):
        retention_cutoff(days=0)
    assert _left([run]) == [run.pk]


def test_the_cutoff_is_utc_midnight_so_whole_days_go() -> None:
    now = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
    assert retention_cutoff(days=30, now=now) == datetime(2026, 11, 3, tzinfo=UTC)
    # A moment given in another zone is the same instant.
    tokyo = now.astimezone(timezone.get_fixed_timezone(9 * 60))
    assert retention_cutoff(days=30, now=tokyo) == datetime(2026, 11, 3, tzinfo=UTC)


def test_the_periodic_pass_is_a_no_op_until_a_window_is_set(
    support_agent: Any, settings: Any
) -> None:
    old = _run(support_agent, days_ago=40)
    recent = _run(support_agent, days_ago=2)
    settings.TRACE_RETENTION_DAYS = 0
    assert traces_prune_due() is None
    assert prune() == 0
    settings.TRACE_RETENTION_DAYS = 30
    assert prune() == 1
    assert _left([old, recent]) == [recent.pk]


def test_beat_and_the_embedded_worker_both_schedule_the_pass() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["traces-prune"]
    assert entry == {"task": "traces.prune", "schedule": settings.TRACE_PRUNE_INTERVAL_SECONDS}
    assert prune.name == "traces.prune"
    jobs = {job.name: job for job in periodic_jobs()}
    assert jobs["traces.prune"].run is traces_prune_due


def test_rollups_are_not_rebuilt_from_before_the_horizon(support_agent: Any) -> None:
    _run(support_agent, days_ago=40)
    cutoff = retention_cutoff(days=30)
    traces_prune(before=cutoff)
    assert retention_horizon() == cutoff

    with pytest.raises(RetentionHorizonError, match="retention horizon"):
        rollups_rebuild(since=cutoff - timedelta(hours=1))
    with pytest.raises(CommandError, match="retention horizon"):
        call_command("rollups_rebuild", "--since", "40d", stdout=StringIO())
    # From the horizon's own day on, every row is there to recompute from.
    rollups_rebuild(since=cutoff)


def test_the_command_needs_a_window_and_says_what_it_did(support_agent: Any, settings: Any) -> None:
    runs = [_run(support_agent, days_ago=40, steps=3), _run(support_agent, days_ago=1)]
    settings.TRACE_RETENTION_DAYS = 0
    with pytest.raises(CommandError, match="no retention window"):
        call_command("traces_prune", stdout=StringIO())
    with pytest.raises(CommandError, match="at least 1"):
        call_command("traces_prune", "--older-than-days", "0", stdout=StringIO())
    with pytest.raises(CommandError, match="future"):
        call_command("traces_prune", "--before", "2999-01-01", stdout=StringIO())
    with pytest.raises(CommandError, match="--batch-size"):
        call_command("traces_prune", "--older-than-days", "30", "--batch-size", "0")
    with pytest.raises(CommandError, match="use 30d"):
        call_command("traces_prune", "--before", "last tuesday", stdout=StringIO())

    out = StringIO()
    call_command("traces_prune", "--older-than-days", "30", "--dry-run", stdout=out)
    assert "would delete 1 runs and 3 steps" in out.getvalue()
    assert len(_left(runs)) == 2

    out = StringIO()
    settings.TRACE_RETENTION_DAYS = 30
    call_command("traces_prune", stdout=out)
    text = out.getvalue()
    assert "holds: strategy evidence, open review item" in text
    assert "1/1 runs deleted" in text
    assert "deleted 1 runs and 3 steps; kept 0" in text
    assert _left(runs) == [runs[1].pk]
