"""Retention: delete ended runs older than a cutoff, with their steps, in batches.

The trace store otherwise grows forever (README, "Pages at 10M steps"). Deleting a trace
deletes its steps, feedback and reflexion proposals with it (foreign keys that cascade);
rows that only point at it (review items, customer facts, confidence events) keep their
history and lose the link. The hourly and daily rollups are not touched: the dashboards
keep their history after the rows behind it are gone.

What is never deleted:

- a run that has not ended (queued or running): the stuck-run sweeper owns those;
- a run a layer above holds on to. The layers above the trace store register a *hold*
  (``retention_hold_register``) when the app registry is ready: the learning loop keeps the
  runs a strategy was learned from (its evidence), the review queue the runs behind an open
  item. The trace store imports neither (DESIGN.md layers).

Each pass is recorded as a ``TracePrune`` row (cutoff, counts, start and end), which is the
audit log of what was deleted and the *retention horizon*
(``traces.rollups.retention_horizon``): ``rollups_rebuild`` refuses a period that starts
before it, since the rows it would recompute from are gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from traces.models import Job, Step, Trace, TracePrune
from traces.services import job_finish, job_progress, job_start

logger = logging.getLogger(__name__)

ENDED = (Trace.Status.FINISHED, Trace.Status.FALLBACK, Trace.Status.FAILED)
DEFAULT_BATCH_SIZE = 500

# A hold names the traces to keep: a queryset of their primary keys (values_list("pk")-like).
RetentionHold = Callable[[], QuerySet]
_holds: dict[str, RetentionHold] = {}


def retention_hold_register(name: str, trace_ids: RetentionHold) -> None:
    """Keep the traces whose ids ``trace_ids()`` yields out of every prune (one per name)."""
    _holds[name] = trace_ids


def retention_holds() -> dict[str, RetentionHold]:
    return dict(_holds)


def retention_cutoff(*, days: int, now: datetime | None = None) -> datetime:
    """The UTC midnight ``days`` days before ``now``: a prune deletes whole UTC days, so the
    rollups of any day after the horizon can still be rebuilt from complete data."""
    if days < 1:
        raise ValueError("retention needs at least 1 day")
    moment = (now or timezone.now()).astimezone(UTC) - timedelta(days=days)
    return datetime.combine(moment.date(), time.min, tzinfo=UTC)


def prunable(*, before: datetime) -> QuerySet[Trace]:
    """The ended traces created before ``before`` that no hold keeps."""
    qs = Trace.objects.filter(status__in=ENDED, created_at__lt=before)
    for trace_ids in _holds.values():
        qs = qs.exclude(pk__in=trace_ids())
    return qs


@dataclass(frozen=True)
class PruneResult:
    prune_id: int | None
    cutoff: datetime
    traces: int
    steps: int
    held: int
    dry_run: bool


def traces_prune(
    *,
    before: datetime,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> PruneResult:
    """Delete the prunable traces created before ``before``, ``batch_size`` per transaction.

    Oldest first, so a pass cut short (a killed command, a deploy) leaves a clean prefix
    deleted, and the next pass goes on from there. ``progress(done, total)`` is called after
    each batch; the pass is also a ``Job`` on the jobs page. ``dry_run`` counts and deletes
    nothing.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if before > timezone.now():
        raise ValueError("the cutoff is in the future: that would delete runs as they end")
    candidates = prunable(before=before)
    total = candidates.count()
    held = Trace.objects.filter(status__in=ENDED, created_at__lt=before).count() - total
    if total == 0 and not dry_run:
        # Nothing to delete: no row, so that an hourly pass leaves no trail of empty ones.
        return PruneResult(None, before, 0, 0, held, False)
    steps_total = 0
    if dry_run:
        steps_total = Step.objects.filter(trace__in=candidates).count()
    prune = TracePrune.objects.create(
        cutoff=before, dry_run=dry_run, traces_matched=total, traces_held=held
    )
    logger.info(
        "traces.prune.start",
        extra={"cutoff": before.isoformat(), "traces": total, "held": held, "dry_run": dry_run},
    )
    if dry_run:
        prune.finished_at = timezone.now()
        prune.save(update_fields=["finished_at"])
        return PruneResult(prune.pk, before, total, steps_total, held, True)

    job = job_start(
        kind=Job.Kind.RETENTION,
        name=f"delete runs created before {before:%Y-%m-%d %H:%M} UTC",
        total=total,
    )
    traces = steps = 0
    try:
        while True:
            ids = list(
                candidates.order_by("created_at", "pk").values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            with transaction.atomic():
                _, per_model = Trace.objects.filter(pk__in=ids).delete()
            traces += per_model.get("traces.Trace", 0)
            steps += per_model.get("traces.Step", 0)
            TracePrune.objects.filter(pk=prune.pk).update(
                traces_deleted=traces, steps_deleted=steps
            )
            job_progress(job_id=job.pk, advance=len(ids))
            if progress is not None:
                progress(traces, total)
    except BaseException as exc:
        job_finish(job_id=job.pk, ok=False, message=f"{type(exc).__name__}: {exc}")
        raise
    TracePrune.objects.filter(pk=prune.pk).update(finished_at=timezone.now())
    job_finish(job_id=job.pk, message=f"{traces} runs and {steps} steps deleted, {held} kept")
    logger.info(
        "traces.prune.finish",
        extra={"cutoff": before.isoformat(), "traces": traces, "steps": steps, "held": held},
    )
    return PruneResult(prune.pk, before, traces, steps, held, False)


def traces_prune_due() -> PruneResult | None:
    """The periodic pass: prune past ``TRACE_RETENTION_DAYS`` if it is set (0 keeps all)."""
    from django.conf import settings

    days = settings.TRACE_RETENTION_DAYS
    if not days:
        return None
    return traces_prune(before=retention_cutoff(days=days))
