"""A/B experiments: the split of new sessions, the arm stored on the run, the start/stop
state machine with its audit rows, and the report's numbers and verdict."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.stats import two_proportion_z_test, welch_t_test_samples
from policies.experiments import (
    CONTROL,
    TREATMENT,
    ExperimentStateError,
    experiment_arm_assign,
    experiment_arm_for_run,
    experiment_cache_clear,
    experiment_create,
    experiment_report,
    experiment_start,
    experiment_stop,
)
from policies.models import Experiment
from reviews.models import AuditLog
from traces.models import Feedback, Trace
from traces.selectors import tool_call_retries
from traces.services import trace_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache() -> Any:
    experiment_cache_clear()
    yield
    experiment_cache_clear()


# --- the split ---------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    experiment_pk=st.integers(min_value=1, max_value=10**6),
    unit=st.text(min_size=1, max_size=64),
    percent=st.integers(min_value=1, max_value=100),
)
def test_a_session_always_lands_in_the_same_arm(
    experiment_pk: int, unit: str, percent: int
) -> None:
    first = experiment_arm_assign(experiment_pk=experiment_pk, unit=unit, traffic_percent=percent)
    again = experiment_arm_assign(experiment_pk=experiment_pk, unit=unit, traffic_percent=percent)
    assert first == again and first in ("", CONTROL, TREATMENT)
    # Raising the share only adds sessions: an enrolled one keeps its arm.
    if first:
        assert (
            experiment_arm_assign(experiment_pk=experiment_pk, unit=unit, traffic_percent=100)
            == first
        )


@settings(max_examples=15, deadline=None)
@given(
    experiment_pk=st.integers(min_value=1, max_value=10**6),
    percent=st.sampled_from([1, 10, 25, 50, 100]),
)
def test_the_split_is_within_tolerance_of_the_share_and_even_between_arms(
    experiment_pk: int, percent: int
) -> None:
    n = 8000
    arms = [
        experiment_arm_assign(experiment_pk=experiment_pk, unit=f"s-{i}", traffic_percent=percent)
        for i in range(n)
    ]
    enrolled = [a for a in arms if a]
    # Binomial: 4.5 standard deviations, so a correct hash fails about once in 150,000 draws.
    share = percent / 100
    assert abs(len(enrolled) / n - share) <= 4.5 * (share * (1 - share) / n) ** 0.5
    if len(enrolled) >= 50:
        half = len(enrolled) / 2
        assert abs(enrolled.count(CONTROL) - half) <= 4.5 * (len(enrolled) * 0.25) ** 0.5


def test_experiments_split_sessions_independently() -> None:
    units = [f"s-{i}" for i in range(4000)]
    a = [experiment_arm_assign(experiment_pk=1, unit=u, traffic_percent=100) for u in units]
    b = [experiment_arm_assign(experiment_pk=2, unit=u, traffic_percent=100) for u in units]
    same = sum(x == y for x, y in zip(a, b, strict=True)) / len(units)
    assert 0.45 < same < 0.55  # a second experiment reshuffles: about half agree by chance


# --- assignment to runs ---------------------------------------------------------------------


def _running(**kwargs: Any) -> Experiment:
    experiment = experiment_create(name="loop on vs off", **kwargs)
    return experiment_start(experiment_id=experiment.pk)


def _run(agent: Any, **kwargs: Any) -> Trace:
    return trace_create(
        agent_id=agent.pk, query="Where is my order?", llm_backend="simulated", **kwargs
    )


def test_the_arm_is_stored_on_the_run_and_kept_by_the_session(support_agent: Any) -> None:
    experiment = _running()
    first = _run(support_agent, session_id="conv-1")

    arm = experiment_arm_for_run(trace=first)

    first.refresh_from_db()
    assert arm in (CONTROL, TREATMENT)
    assert (first.experiment_pk, first.experiment_arm) == (experiment.pk, arm)
    later = _run(support_agent, session_id="conv-1")
    assert experiment_arm_for_run(trace=later) == arm


def test_a_session_that_began_before_the_start_is_left_alone(support_agent: Any) -> None:
    old = _run(support_agent, session_id="conv-old")
    Trace.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    _running()

    follow_up = _run(support_agent, session_id="conv-old")

    assert experiment_arm_for_run(trace=follow_up) == ""
    follow_up.refresh_from_db()
    assert (follow_up.experiment_pk, follow_up.experiment_arm) == (None, "")


def test_customers_without_a_session_are_split_by_customer(support_agent: Any) -> None:
    _running()
    arms = {
        experiment_arm_for_run(trace=_run(support_agent, customer_id="U00000042")) for _ in range(4)
    }
    assert len(arms) == 1 and arms != {""}


@pytest.mark.parametrize("origin", [Trace.Origin.REPLAY, Trace.Origin.EXPERIMENT])
def test_the_loops_own_runs_never_enter(support_agent: Any, origin: str) -> None:
    _running()
    assert experiment_arm_for_run(trace=_run(support_agent, session_id="c", origin=origin)) == ""


def test_a_stopped_experiment_assigns_nothing_new_but_a_resumed_run_keeps_its_arm(
    support_agent: Any,
) -> None:
    experiment = _running()
    resumed = _run(support_agent, session_id="conv-2")
    arm = experiment_arm_for_run(trace=resumed)
    experiment_stop(experiment_id=experiment.pk)
    experiment_cache_clear()  # another process would see it within a second

    assert experiment_arm_for_run(trace=Trace.objects.get(pk=resumed.pk)) == arm
    assert experiment_arm_for_run(trace=_run(support_agent, session_id="conv-3")) == ""


# --- the state machine ------------------------------------------------------------------------


def test_start_and_stop_move_the_state_and_write_audit_rows(ops_user: Any) -> None:
    experiment = experiment_create(name="E", traffic_percent=50, actor=ops_user)
    experiment_start(experiment_id=experiment.pk, actor=ops_user)
    stopped = experiment_stop(experiment_id=experiment.pk, actor=ops_user)

    assert stopped.status == "stopped"
    assert stopped.started_at is not None and stopped.stopped_at is not None
    rows = AuditLog.objects.filter(target=experiment.label).order_by("id")
    assert [(r.action, r.actor_id) for r in rows] == [
        ("experiment.create", ops_user.pk),
        ("experiment.start", ops_user.pk),
        ("experiment.stop", ops_user.pk),
    ]


def test_only_one_experiment_runs_at_a_time() -> None:
    first = _running()
    second = experiment_create(name="second")

    with pytest.raises(ExperimentStateError, match=f"{first.label} is running"):
        experiment_start(experiment_id=second.pk)

    assert Experiment.objects.get(pk=second.pk).status == "draft"


@pytest.mark.parametrize(("action", "state"), [("start", "running"), ("stop", "draft")])
def test_an_action_from_the_wrong_state_is_refused(action: str, state: str) -> None:
    experiment = _running() if state == "running" else experiment_create(name="draft")
    do = experiment_start if action == "start" else experiment_stop
    with pytest.raises(ExperimentStateError):
        do(experiment_id=experiment.pk)


def test_the_split_share_is_validated() -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        experiment_create(name="too much", traffic_percent=101)


# --- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("oks", "expected"),
    [([], 0), ([True], 0), ([False], 0), ([False, True], 1), ([False, False, True], 2),
     ([True, False], 0), ([False, True, False], 1)],
)  # fmt: skip
def test_retries_count_the_calls_made_after_a_failed_one(oks: list[bool], expected: int) -> None:
    failed = [i for i, ok in enumerate(oks, start=1) if not ok]
    assert (
        tool_call_retries(
            failed_calls=len(failed),
            last_failed=failed[-1] if failed else None,
            last_call=len(oks) or None,
        )
        == expected
    )


# --- the report -------------------------------------------------------------------------------


def _arm_runs(
    agent: Any, experiment: Experiment, arm: str, outcomes: list[tuple[str, int]]
) -> list[Trace]:
    traces = []
    for status, retries in outcomes:
        trace = _run(agent)
        Trace.objects.filter(pk=trace.pk).update(
            experiment_pk=experiment.pk, experiment_arm=arm, status=status, retries=retries
        )
        traces.append(trace)
    return traces


def test_the_report_gives_each_arm_its_numbers_and_p_values(
    support_agent: Any, support_user: Any, ops_user: Any
) -> None:
    experiment = experiment_create(name="report", planned_runs_per_arm=40)
    control = [("finished", 2)] * 24 + [("failed", 3)] * 16  # 60%, retries mean 2.4
    treated = [("finished", 0)] * 36 + [("fallback", 1)] * 4  # 90%
    c_runs = _arm_runs(support_agent, experiment, CONTROL, control)
    t_runs = _arm_runs(support_agent, experiment, TREATMENT, treated)
    _arm_runs(support_agent, experiment, TREATMENT, [("running", 0)])
    for trace, user, rating in [
        (c_runs[0], support_user, "down"), (c_runs[1], support_user, "down"),
        (c_runs[2], ops_user, "up"), (t_runs[0], support_user, "up"),
        (t_runs[1], support_user, "up"), (t_runs[2], ops_user, "down"),
    ]:  # fmt: skip
        Feedback.objects.create(trace=trace, user=user, rating=rating)

    report = experiment_report(experiment=experiment)

    assert (report.control.runs, report.treatment.runs, report.treatment.in_flight) == (40, 40, 1)
    assert report.control.success_rate == pytest.approx(0.6)
    assert report.treatment.success_rate == pytest.approx(0.9)
    assert report.control.retries_mean == pytest.approx(2.4)
    assert report.treatment.retries_mean == pytest.approx(0.1)
    assert report.control.feedback_score == pytest.approx(-1 / 3)
    assert report.treatment.feedback_score == pytest.approx(1 / 3)
    success, retries, feedback = report.comparisons
    assert (success.statistic, success.p_value) == pytest.approx(
        two_proportion_z_test(24, 40, 36, 40)
    )
    t, df, p = welch_t_test_samples([r for _, r in control], [r for _, r in treated])
    assert (retries.statistic, retries.df, retries.p_value) == pytest.approx((t, df, p))
    t, df, p = welch_t_test_samples([-1, -1, 1], [1, 1, -1])
    assert (feedback.statistic, feedback.p_value) == pytest.approx((t, p))
    assert success.favours == TREATMENT and retries.favours == TREATMENT
    assert feedback.favours == ""  # three ratings an arm prove nothing
    assert report.verdict_kind == "treatment_better"
    assert report.verdict.startswith("The learned strategies help: success rate 90.0%")


def test_too_few_runs_give_no_verdict(support_agent: Any) -> None:
    experiment = experiment_create(name="small")
    _arm_runs(support_agent, experiment, CONTROL, [("failed", 1)] * 9)
    _arm_runs(support_agent, experiment, TREATMENT, [("finished", 0)] * 30)

    report = experiment_report(experiment=experiment)

    assert report.verdict_kind == "collecting"
    assert not any(c.tested for c in report.comparisons)
    assert "9 in control" in report.verdict


def test_a_running_experiment_below_its_planned_size_reports_an_interim_look(
    support_agent: Any,
) -> None:
    experiment = _running(planned_runs_per_arm=100)
    _arm_runs(support_agent, experiment, CONTROL, [("finished", 0)] * 20)
    _arm_runs(support_agent, experiment, TREATMENT, [("finished", 0)] * 20)

    report = experiment_report(experiment=experiment)

    assert report.verdict_kind == "interim"
    assert "20 of 100 planned" in report.verdict
    assert "No significant difference in success" in report.verdict


def test_the_report_reads_two_queries_however_many_runs(
    support_agent: Any, django_assert_num_queries: Any
) -> None:
    experiment = experiment_create(name="queries")
    _arm_runs(support_agent, experiment, CONTROL, [("finished", 1)] * 30)
    with django_assert_num_queries(2):
        experiment_report(experiment=experiment)


def test_an_experiment_keeps_no_secret_pasted_into_its_name_or_hypothesis(ops_user: Any) -> None:
    experiment = experiment_create(
        name="try token=abc123secretvalue",
        hypothesis="the key sk-live-0123456789abcdef leaked into a note",
        actor=ops_user,
    )
    experiment.refresh_from_db()
    assert experiment.name == "try token=[REDACTED]"
    assert experiment.hypothesis == "the key [REDACTED] leaked into a note"
