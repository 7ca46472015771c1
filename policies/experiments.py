"""A/B experiments of the learning loop (seed 000 §5.2): does the loop earn its keep?

While one experiment runs, every new session (a conversation, else a customer, else a
single run) is hashed with the experiment's id: ``traffic_percent`` of them enter it and
are split evenly between a control arm, which runs without learned strategies (the empty
policy) and does not feed Reflexion, and a treatment arm, which runs with the policy it
would get anyway. The arm is stored on the Trace, so a conversation stays in its arm and
the report reads only stored totals: success rate (two-proportion z-test), mean retries
and feedback score (Welch t-tests), fixed-horizon, read at the planned size.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import Case, Count, F, Q, Sum, Value, When
from django.utils import timezone

from bench.stats import (
    mean_difference_interval,
    newcombe_interval,
    summary_variance,
    two_proportion_z_test,
    welch_t_test,
    wilson_interval,
)
from policies.models import Experiment
from policies.services import audit
from traces.models import Feedback, Trace
from traces.redaction import redact_text

logger = logging.getLogger(__name__)

RUN_EXPERIMENTS = "policies.run_experiments"
CONTROL = Experiment.Arm.CONTROL.value
TREATMENT = Experiment.Arm.TREATMENT.value
ALPHA = 0.05
# Below this many ended runs in an arm the tests are not run at all.
MIN_RUNS_FOR_TEST = 10


@dataclass(frozen=True)
class RunningExperiment:
    """What assignment needs of the running experiment, cached per process."""

    pk: int
    traffic_percent: int
    started_at: datetime


# Starting or stopping an experiment reaches every worker within a second, like a policy.
_CACHE_SECONDS = 1.0
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, RunningExperiment | None]] = {}


class ExperimentStateError(Exception):
    """The experiment is not in the state the action starts from (or another one runs)."""


def user_can_run_experiments(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(RUN_EXPERIMENTS))  # type: ignore[union-attr]


# --- assignment ------------------------------------------------------------------------


def experiment_arm_assign(*, experiment_pk: int, unit: str, traffic_percent: int) -> str:
    """The arm of one session, or "" when it stays out: a pure function of the experiment
    and the session, so every worker and every later run of the session agree."""
    digest = hashlib.sha256(f"experiment:{experiment_pk}:{unit}".encode()).digest()
    # Enrolment and arm come from different bytes of the hash, so they are independent.
    if int.from_bytes(digest[:8], "big") % 10_000 >= traffic_percent * 100:
        return ""
    return TREATMENT if digest[8] & 1 else CONTROL


def experiment_running() -> RunningExperiment | None:
    """The running experiment, cached per process for at most a second."""
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get("running")
        if cached and now - cached[0] < _CACHE_SECONDS:
            return cached[1]
    row = (
        Experiment.objects.filter(status=Experiment.Status.RUNNING, started_at__isnull=False)
        .values_list("pk", "traffic_percent", "started_at")
        .first()
    )
    running = None
    if row is not None and row[2] is not None:
        running = RunningExperiment(pk=row[0], traffic_percent=row[1], started_at=row[2])
    with _cache_lock:
        _cache["running"] = (now, running)
    return running


def experiment_cache_clear() -> None:
    with _cache_lock:
        _cache.clear()


def _session_unit(trace: Trace) -> tuple[str, Q | None]:
    """What keeps a conversation in one arm, and how to find its earlier runs."""
    if trace.session_id:
        return f"session:{trace.session_id}", Q(session_id=trace.session_id)
    if trace.customer_id:
        return f"customer:{trace.customer_id}", Q(customer_id=trace.customer_id)
    return f"run:{trace.pk}", None


def experiment_arm_for_run(*, trace: Trace) -> str:
    """The arm this run belongs to ("" for none), assigned and stored on its first start.

    Only customers' runs enter, and only new sessions: one with a run from before the
    experiment started keeps running as usual, so no conversation changes policy midway.
    A resumed run keeps the arm it was given, even if the experiment has since stopped.
    """
    if trace.experiment_arm:
        return trace.experiment_arm
    if trace.origin != Trace.Origin.CUSTOMER:
        return ""
    running = experiment_running()
    if running is None:
        return ""
    unit, earlier = _session_unit(trace)
    arm = experiment_arm_assign(
        experiment_pk=running.pk, unit=unit, traffic_percent=running.traffic_percent
    )
    if not arm:
        return ""
    if earlier is not None and (
        Trace.objects.filter(earlier, created_at__lt=running.started_at).exists()
    ):
        return ""
    Trace.objects.filter(pk=trace.pk, experiment_arm="").update(
        experiment_pk=running.pk, experiment_arm=arm
    )
    trace.experiment_pk, trace.experiment_arm = running.pk, arm
    return arm


# --- writes ----------------------------------------------------------------------------


def experiment_create(
    *,
    name: str,
    hypothesis: str = "",
    traffic_percent: int = 100,
    planned_runs_per_arm: int = 200,
    actor: Any = None,
) -> Experiment:
    """A draft experiment; nothing is split until it is started."""
    with transaction.atomic():
        experiment = Experiment(
            name=redact_text(name)[:100],
            hypothesis=redact_text(hypothesis)[:2000],
            traffic_percent=traffic_percent,
            planned_runs_per_arm=planned_runs_per_arm,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        experiment.full_clean()
        experiment.save()
        audit(
            action="experiment.create",
            target=experiment.label,
            actor=actor,
            details={
                "name": name,
                "traffic_percent": traffic_percent,
                "planned_runs_per_arm": planned_runs_per_arm,
            },
        )
    return experiment


def experiment_start(*, experiment_id: int, actor: Any = None) -> Experiment:
    """draft -> running. Refused when another experiment runs: the database's one-running
    constraint decides, so two people starting two experiments at once cannot both win."""
    try:
        with transaction.atomic():
            experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
            if experiment.status != Experiment.Status.DRAFT:
                raise ExperimentStateError(
                    f"{experiment.label} is {experiment.status}; only a draft can be started."
                )
            experiment.status = Experiment.Status.RUNNING
            experiment.started_at = timezone.now()
            experiment.save(update_fields=["status", "started_at"])
            audit(
                action="experiment.start",
                target=experiment.label,
                actor=actor,
                details={"traffic_percent": experiment.traffic_percent},
            )
            transaction.on_commit(experiment_cache_clear)
    except IntegrityError as exc:
        running = Experiment.objects.filter(status=Experiment.Status.RUNNING).first()
        raise ExperimentStateError(
            f"{running.label if running else 'Another experiment'} is running; stop it first."
        ) from exc
    logger.info("experiment.started", extra={"experiment": experiment.pk})
    return experiment


def experiment_stop(*, experiment_id: int, actor: Any = None) -> Experiment:
    """running -> stopped: new sessions run as usual again; the report stays."""
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
        if experiment.status != Experiment.Status.RUNNING:
            raise ExperimentStateError(
                f"{experiment.label} is {experiment.status}; only a running one can be stopped."
            )
        experiment.status = Experiment.Status.STOPPED
        experiment.stopped_at = timezone.now()
        experiment.save(update_fields=["status", "stopped_at"])
        runs = Trace.objects.filter(experiment_pk=experiment.pk).count()
        audit(
            action="experiment.stop", target=experiment.label, actor=actor, details={"runs": runs}
        )
        transaction.on_commit(experiment_cache_clear)
    logger.info("experiment.stopped", extra={"experiment": experiment.pk})
    return experiment


# --- the report ------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmReport:
    """One arm's totals, from the stored trace totals and the feedback rows."""

    arm: str
    label: str
    runs: int  # ended runs
    in_flight: int
    successes: int
    retries_total: int
    retries_squares: int
    ratings: int
    thumbs_up: int

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.runs if self.runs else None

    @property
    def success_interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.runs)

    @property
    def retries_mean(self) -> float | None:
        return self.retries_total / self.runs if self.runs else None

    @property
    def retries_variance(self) -> float:
        return summary_variance(self.retries_total, self.retries_squares, self.runs)

    @property
    def retries_interval(self) -> tuple[float, float]:
        if self.runs < 2:
            return (0.0, 0.0)
        mean = self.retries_total / self.runs
        half = 1.959964 * (self.retries_variance / self.runs) ** 0.5
        return (max(0.0, mean - half), mean + half)

    @property
    def feedback_score(self) -> float | None:
        """Thumbs up count +1 and down -1: the mean lies between -1 and +1."""
        return (2 * self.thumbs_up - self.ratings) / self.ratings if self.ratings else None

    @property
    def feedback_variance(self) -> float:
        # Every value is +1 or -1, so the sum of squares is the number of ratings.
        return summary_variance(2 * self.thumbs_up - self.ratings, self.ratings, self.ratings)

    @property
    def feedback_interval(self) -> tuple[float, float]:
        if self.ratings < 2:
            return (0.0, 0.0)
        score = self.feedback_score or 0.0
        half = 1.959964 * (self.feedback_variance / self.ratings) ** 0.5
        return (max(-1.0, score - half), min(1.0, score + half))


@dataclass(frozen=True)
class Comparison:
    """Treatment against control on one metric."""

    metric: str
    test: str
    higher_is_better: bool
    control: float | None
    treatment: float | None
    difference: float
    interval: tuple[float, float]
    statistic: float
    p_value: float
    tested: bool  # False: too few values in an arm to run the test
    df: float | None = None

    @property
    def significant(self) -> bool:
        return self.tested and self.p_value < ALPHA

    @property
    def favours(self) -> str:
        """Which arm the significant difference favours ("" when it is not significant)."""
        if not self.significant or self.difference == 0:
            return ""
        better = (self.difference > 0) == self.higher_is_better
        return TREATMENT if better else CONTROL

    @property
    def p_display(self) -> str:
        if not self.tested:
            return "not tested"
        return "p < 0.001" if self.p_value < 0.001 else f"p = {self.p_value:.3f}"


@dataclass(frozen=True)
class ExperimentReport:
    experiment: Experiment
    control: ArmReport
    treatment: ArmReport
    comparisons: list[Comparison]
    verdict_kind: str  # collecting | interim | treatment_better | control_better | no_difference
    verdict: str

    @property
    def arms(self) -> list[ArmReport]:
        return [self.control, self.treatment]

    @property
    def reached_plan(self) -> bool:
        planned = self.experiment.planned_runs_per_arm
        return min(self.control.runs, self.treatment.runs) >= planned


def _arm_reports(experiment_pk: int) -> dict[str, ArmReport]:
    ended = Q(status__in=Trace.TERMINAL_STATUSES)
    runs = {
        row["experiment_arm"]: row
        for row in Trace.objects.filter(experiment_pk=experiment_pk)
        .order_by()
        .values("experiment_arm")
        .annotate(
            runs=Count("id", filter=ended),
            in_flight=Count("id", filter=~ended),
            successes=Count("id", filter=Q(status=Trace.Status.FINISHED)),
            retries_total=Sum("retries", filter=ended),
            retries_squares=Sum(F("retries") * F("retries"), filter=ended),
        )
    }
    ratings = {
        row["trace__experiment_arm"]: row
        for row in Feedback.objects.filter(trace__experiment_pk=experiment_pk)
        .order_by()
        .values("trace__experiment_arm")
        .annotate(ratings=Count("id"), thumbs_up=Count("id", filter=Q(rating=Feedback.Rating.UP)))
    }
    reports = {}
    for arm, label in Experiment.Arm.choices:
        row, rated = runs.get(arm, {}), ratings.get(arm, {})
        reports[arm] = ArmReport(
            arm=arm,
            label=label,
            runs=row.get("runs") or 0,
            in_flight=row.get("in_flight") or 0,
            successes=row.get("successes") or 0,
            retries_total=row.get("retries_total") or 0,
            retries_squares=row.get("retries_squares") or 0,
            ratings=rated.get("ratings") or 0,
            thumbs_up=rated.get("thumbs_up") or 0,
        )
    return reports


def _comparisons(control: ArmReport, treatment: ArmReport) -> list[Comparison]:
    tested = min(control.runs, treatment.runs) >= MIN_RUNS_FOR_TEST
    z, p = two_proportion_z_test(
        control.successes, control.runs, treatment.successes, treatment.runs
    )
    success = Comparison(
        metric="Success rate",
        test="two-proportion z-test",
        higher_is_better=True,
        control=control.success_rate,
        treatment=treatment.success_rate,
        difference=(treatment.success_rate or 0.0) - (control.success_rate or 0.0),
        interval=newcombe_interval(
            control.successes, control.runs, treatment.successes, treatment.runs
        )
        if tested
        else (0.0, 0.0),
        statistic=z,
        p_value=p,
        tested=tested,
    )
    retries = _welch_comparison(
        "Mean retries",
        higher_is_better=False,
        control=(control.retries_mean, control.retries_variance, control.runs),
        treatment=(treatment.retries_mean, treatment.retries_variance, treatment.runs),
        tested=tested,
    )
    feedback = _welch_comparison(
        "Feedback score",
        higher_is_better=True,
        control=(control.feedback_score, control.feedback_variance, control.ratings),
        treatment=(treatment.feedback_score, treatment.feedback_variance, treatment.ratings),
        tested=min(control.ratings, treatment.ratings) >= 2,
    )
    return [success, retries, feedback]


def _welch_comparison(
    metric: str,
    *,
    higher_is_better: bool,
    control: tuple[float | None, float, int],
    treatment: tuple[float | None, float, int],
    tested: bool,
) -> Comparison:
    """Treatment against control on a mean (mean, sample variance, n per arm): Welch."""
    c_mean, t_mean = control[0] or 0.0, treatment[0] or 0.0
    args = (c_mean, control[1], control[2], t_mean, treatment[1], treatment[2])
    t, df, p = welch_t_test(*args)
    return Comparison(
        metric=metric,
        test="Welch t-test",
        higher_is_better=higher_is_better,
        control=control[0],
        treatment=treatment[0],
        difference=t_mean - c_mean,
        interval=mean_difference_interval(*args) if tested else (0.0, 0.0),
        statistic=t,
        p_value=p,
        tested=tested,
        df=df,
    )


def _verdict(
    experiment: Experiment, control: ArmReport, treatment: ArmReport, comparisons: list[Comparison]
) -> tuple[str, str]:
    planned = experiment.planned_runs_per_arm
    smaller = min(control.runs, treatment.runs)
    if smaller < MIN_RUNS_FOR_TEST:
        return (
            "collecting",
            f"Not enough runs yet: {control.runs} in control and {treatment.runs} in "
            f"treatment. The tests start at {MIN_RUNS_FOR_TEST} ended runs per arm; the "
            f"verdict is read at the planned {planned}.",
        )
    success = comparisons[0]
    points = f"{success.difference * 100:+.1f} points"
    detail = (
        f"success rate {(treatment.success_rate or 0) * 100:.1f}% with learned strategies "
        f"against {(control.success_rate or 0) * 100:.1f}% without ({points}, 95% CI "
        f"{success.interval[0] * 100:+.1f} to {success.interval[1] * 100:+.1f}, "
        f"{success.p_display})"
    )
    if success.favours == TREATMENT:
        kind, text = "treatment_better", f"The learned strategies help: {detail}."
    elif success.favours == CONTROL:
        kind, text = "control_better", f"The learned strategies hurt: {detail}."
    else:
        kind, text = (
            "no_difference",
            f"No significant difference in success: {detail}. A difference this size could "
            "be chance.",
        )
    others = [
        f"{c.metric.lower()} "
        + (f"favours {c.favours}" if c.favours else "shows no significant difference")
        + f" ({c.p_display})"
        for c in comparisons[1:]
        if c.tested
    ]
    if others:
        text += " Also: " + "; ".join(others) + "."
    if experiment.status == Experiment.Status.RUNNING and smaller < planned:
        return (
            "interim",
            f"Interim look ({smaller} of {planned} planned runs in the smaller arm): the "
            "p-values are fixed-horizon, so they are a verdict only at the planned size; "
            f"checking them again and again finds differences that are not there. So far: {text}",
        )
    return kind, text


def experiment_report(*, experiment: Experiment) -> ExperimentReport:
    """Both arms' numbers, the tests and a verdict in plain words; two queries."""
    arms = _arm_reports(experiment.pk)
    control, treatment = arms[CONTROL], arms[TREATMENT]
    comparisons = _comparisons(control, treatment)
    kind, verdict = _verdict(experiment, control, treatment, comparisons)
    return ExperimentReport(
        experiment=experiment,
        control=control,
        treatment=treatment,
        comparisons=comparisons,
        verdict_kind=kind,
        verdict=verdict,
    )


def experiments_page(*, limit: int = 50) -> list[Experiment]:
    """The latest experiments, the running one first."""
    running_first = Case(When(status=Experiment.Status.RUNNING, then=Value(0)), default=Value(1))
    return list(
        Experiment.objects.select_related("created_by").order_by(
            running_first, "-created_at", "-id"
        )[:limit]
    )
