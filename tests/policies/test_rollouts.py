"""Canary rollouts on the real database: start, routing, the evaluator and manual controls."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from policies.models import PolicyVersion, Rollout, RolloutDecision, Strategy
from policies.rollout_stats import rollout_routes_canary, routing_key
from policies.rollouts import (
    RolloutError,
    rollout_manual,
    rollout_promote,
    rollouts_evaluate,
)
from policies.selectors import runtime_policy_cache_clear, runtime_policy_for_run
from policies.services import policy_members_with, strategy_activate
from reviews.models import AuditLog
from traces.models import Trace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def rules(settings: Any) -> None:
    settings.POLICY_PUBLISH = "canary"
    settings.ROLLOUT_SCHEDULE = [1, 5, 25, 50, 100]
    settings.ROLLOUT_MIN_SAMPLES = 20
    settings.ROLLOUT_LATENCY_MIN_SAMPLES = 10
    settings.ROLLOUT_ALPHA = 0.05
    settings.ROLLOUT_LATENCY_BUDGET_MS = 100
    settings.ROLLOUT_BURST = 5
    settings.ROLLOUT_WINDOW = 3600
    runtime_policy_cache_clear()


@pytest.fixture
def stable(make_strategy: Any) -> PolicyVersion:
    """An active v1 with one live adapter (strip on get_order.order_id)."""
    rival = make_strategy(
        branch={"tool": "get_order", "field": "order_id", "transform": "strip"},
        status=Strategy.Status.PROPOSED,
    )
    version = strategy_activate(strategy=rival, author_kind="reviewer", at_once=True)
    assert version is not None
    return version


@pytest.fixture
def canary(stable: PolicyVersion, make_strategy: Any, ops_user: Any) -> Rollout:
    strategy = make_strategy(status=Strategy.Status.IN_REVIEW)  # digits_to_int: same slot
    version = strategy_activate(strategy=strategy, actor=ops_user, author_kind="reviewer")
    assert version is not None
    return Rollout.objects.get(version=version)


def runs(
    support_agent: Any,
    label: str,
    *,
    ok: int = 0,
    failed: int = 0,
    latency_ms: int = 100,
    error_type: str = "INTERNAL_SERVER_ERROR",
) -> None:
    rows = [
        Trace(
            agent=support_agent,
            query="q",
            query_hash="x",
            llm_backend="simulated",
            policy_version=label,
            status=Trace.Status.FAILED if i < failed else Trace.Status.FINISHED,
            error_type=error_type if i < failed else "",
            total_latency_ms=latency_ms,
        )
        for i in range(ok + failed)
    ]
    Trace.objects.bulk_create(rows)


def test_approval_starts_an_inactive_canary_at_the_first_step(
    canary: Rollout, stable: PolicyVersion, ops_user: Any
) -> None:
    assert (canary.percent, canary.state, canary.is_open) == (1, "running", True)
    assert canary.stable == stable and canary.version.parent == stable
    assert not canary.version.is_active
    stable.refresh_from_db()
    assert stable.is_active
    # the rival stays live on stable until the canary reaches 100%
    [rival_id] = canary.replaced
    assert Strategy.objects.get(pk=rival_id).status == "active"
    assert canary.strategy.status == "approved"
    [start] = canary.decisions.all()
    assert (start.action, start.actor, start.to_percent) == ("start", ops_user, 1)
    assert AuditLog.objects.filter(action="rollout.start", actor=ops_user).exists()


def test_a_second_approval_waits_until_the_open_rollout_ends(
    canary: Rollout, make_strategy: Any, ops_user: Any
) -> None:
    other = make_strategy(
        kind="prompt_hint",
        branch={"tool": "get_order", "text": "Quote the order status verbatim."},
        error_type="HALLUCINATED_ANSWER",
        status=Strategy.Status.IN_REVIEW,
    )
    versions = PolicyVersion.objects.count()
    assert strategy_activate(strategy=other, actor=ops_user, author_kind="reviewer") is None
    other.refresh_from_db()
    assert other.status == "approved"
    assert PolicyVersion.objects.count() == versions  # nothing written for the waiting one
    rollout_manual(rollout_id=canary.pk, action="rollback", actor=ops_user, note="bad")
    # the waiting strategy starts its own canary against the same stable
    nxt = Rollout.objects.get(is_open=True)
    assert nxt.strategy == other and nxt.percent == 1
    assert nxt.created_by == ops_user and nxt.author_kind == "reviewer"


def test_the_database_allows_one_open_rollout(canary: Rollout) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Rollout.objects.create(
            version=PolicyVersion.objects.create(
                number=99, author_kind="reviewer", document="x", checksum="x"
            ),
            strategy=canary.strategy,
            schedule=[1, 100],
            percent=1,
            step_started_at=timezone.now(),
        )


def test_runs_route_by_customer_to_the_canary_share(canary: Rollout) -> None:
    rollout_manual(rollout_id=canary.pk, action="set_percent", percent=25, actor=None, note="more")
    runtime_policy_cache_clear()
    customers = [f"C{i}" for i in range(400)]
    versions = {c: runtime_policy_for_run(customer_id=c, session_id="s").version for c in customers}
    expected = {
        c: rollout_routes_canary(rollout_id=canary.pk, key=routing_key(customer_id=c), percent=25)
        for c in customers
    }
    assert {c for c, v in versions.items() if v == canary.version.label} == {
        c for c, on in expected.items() if on
    }
    assert {v for v in versions.values()} == {canary.version.label, canary.stable.label}
    # the same customer stays on one version, whatever session or run it is in
    for c in customers[:20]:
        assert runtime_policy_for_run(customer_id=c, session_id="other").version == versions[c]


def test_evaluator_promotes_a_significantly_better_canary_with_its_numbers(
    canary: Rollout, support_agent: Any
) -> None:
    runs(support_agent, canary.version.label, ok=28, failed=2, latency_ms=120)
    runs(support_agent, canary.stable.label, ok=60, failed=40, latency_ms=100)
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "promote"
    canary.refresh_from_db()
    assert canary.percent == 5
    assert (decision.canary_n, decision.stable_n) == (30, 100)
    assert decision.canary_error_rate == pytest.approx(2 / 30)
    assert decision.stable_error_rate == pytest.approx(0.4)
    assert decision.canary_success_rate == pytest.approx(28 / 30)
    assert decision.statistic is not None and decision.statistic < -3
    assert decision.p_value is not None and decision.p_value < 0.05
    assert (decision.canary_p95_ms, decision.stable_p50_ms) == (120, 100)
    assert decision.window_start is not None and decision.actor_kind == "evaluator"
    assert AuditLog.objects.filter(action="rollout.promote", actor_kind="evaluator").exists()
    # a promotion starts a fresh window: the same runs do not promote again
    assert rollouts_evaluate() is not None
    canary.refresh_from_db()
    assert canary.percent == 5
    assert canary.decisions.order_by("-pk")[0].action == "hold"


def test_evaluator_rolls_back_a_significantly_worse_canary(
    canary: Rollout, support_agent: Any
) -> None:
    runs(support_agent, canary.version.label, ok=15, failed=15, error_type="TIMEOUT")
    runs(support_agent, canary.stable.label, ok=90, failed=10, error_type="TIMEOUT")
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "rollback"
    canary.refresh_from_db()
    assert (canary.state, canary.is_open, canary.percent) == ("rolled_back", False, 0)
    assert canary.strategy.status == "rejected"
    assert decision.p_value is not None and decision.p_value < 0.05
    # stable is untouched and every run is served stable again
    assert PolicyVersion.objects.get(is_active=True) == canary.stable
    runtime_policy_cache_clear()
    assert runtime_policy_for_run(customer_id="anyone").version == canary.stable.label


def test_a_burst_of_an_error_type_stable_lacks_rolls_back_before_min_samples(
    canary: Rollout, support_agent: Any
) -> None:
    runs(support_agent, canary.version.label, failed=5, error_type="INVALID_PARAMETER")
    runs(support_agent, canary.stable.label, ok=8, failed=2, error_type="TIMEOUT")
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "rollback"
    assert decision.details["burst"] == {"INVALID_PARAMETER": 5}
    assert "burst" in decision.reason


def test_an_error_type_stable_also_shows_is_no_burst(canary: Rollout, support_agent: Any) -> None:
    runs(support_agent, canary.version.label, failed=5, error_type="TIMEOUT")
    runs(support_agent, canary.stable.label, ok=8, failed=2, error_type="TIMEOUT")
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "hold"
    assert decision.details["verdict"] == "wait"
    canary.refresh_from_db()
    assert canary.is_open
    # an unchanged verdict is not written again on the next pass
    assert rollouts_evaluate() is None


def test_a_canary_over_the_latency_budget_is_rolled_back(
    canary: Rollout, support_agent: Any
) -> None:
    runs(support_agent, canary.version.label, ok=30, latency_ms=400)
    runs(support_agent, canary.stable.label, ok=100, latency_ms=200)
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "rollback"
    assert "p95" in decision.reason and decision.canary_p95_ms == 400


def test_reaching_100_makes_the_canary_active_and_deprecates_its_rival(
    canary: Rollout, ops_user: Any
) -> None:
    for _ in range(4):
        rollout_manual(rollout_id=canary.pk, action="promote", actor=ops_user)
    canary.refresh_from_db()
    assert (canary.state, canary.percent, canary.is_open) == ("completed", 100, False)
    assert PolicyVersion.objects.get(is_active=True) == canary.version
    assert canary.strategy.status == "active"
    [rival_id] = canary.replaced
    assert Strategy.objects.get(pk=rival_id).status == "deprecated"
    actions = list(canary.decisions.values_list("action", "to_percent"))
    assert actions == [
        ("start", 1),
        ("promote", 5),
        ("promote", 25),
        ("promote", 50),
        ("complete", 100),
    ]
    runtime_policy_cache_clear()
    assert runtime_policy_for_run(customer_id="x").version == canary.version.label


def test_a_canary_is_rebased_when_stable_moved_under_it(
    canary: Rollout, make_strategy: Any, ops_user: Any
) -> None:
    hint = make_strategy(
        kind="prompt_hint",
        branch={"tool": "get_order", "text": "Quote the order status verbatim."},
        error_type="HALLUCINATED_ANSWER",
        status=Strategy.Status.IN_REVIEW,
    )
    moved = strategy_activate(strategy=hint, author_kind="reviewer", at_once=True)
    assert moved is not None
    rollout_manual(rollout_id=canary.pk, action="set_percent", percent=100, actor=ops_user)
    active = PolicyVersion.objects.get(is_active=True)
    assert active.number > moved.number and active.parent == moved
    assert set(active.strategies.all()) == {hint, canary.strategy}


def test_pause_holds_the_percentage_and_blocks_promotion(
    canary: Rollout, support_agent: Any, ops_user: Any
) -> None:
    rollout_manual(rollout_id=canary.pk, action="pause", actor=ops_user, note="weekend")
    runs(support_agent, canary.version.label, ok=30, latency_ms=100)
    runs(support_agent, canary.stable.label, ok=60, failed=40, latency_ms=100)
    decision = rollouts_evaluate()
    assert decision is not None and decision.action == "hold"
    assert decision.reason.startswith("paused")
    canary.refresh_from_db()
    assert (canary.state, canary.percent) == ("paused", 1)
    with pytest.raises(RolloutError, match="already"):
        rollout_manual(rollout_id=canary.pk, action="pause", actor=ops_user)
    rollout_manual(rollout_id=canary.pk, action="resume", actor=ops_user)
    assert rollouts_evaluate().action == "promote"  # type: ignore[union-attr]


def test_manual_controls_are_audited_with_numbers_and_refuse_an_ended_rollout(
    canary: Rollout, support_agent: Any, ops_user: Any
) -> None:
    runs(support_agent, canary.version.label, ok=3, failed=1)
    rollout_manual(rollout_id=canary.pk, action="rollback", actor=ops_user, note="smells")
    decision = RolloutDecision.objects.get(rollout=canary, action="rollback")
    assert decision.actor == ops_user and decision.canary_n == 4
    assert decision.canary_error_rate == pytest.approx(0.25)
    row = AuditLog.objects.get(action="rollout.rollback")
    assert row.actor == ops_user and row.target == canary.label
    assert row.details["canary_n"] == 4 and "smells" in row.details["reason"]
    with pytest.raises(RolloutError, match="has ended"):
        rollout_manual(rollout_id=canary.pk, action="promote", actor=ops_user)
    with pytest.raises(RolloutError, match="has ended"):
        rollout_promote(rollout=canary, actor=ops_user)


def test_set_percent_refuses_out_of_range(canary: Rollout, ops_user: Any) -> None:
    for bad in (0, 101):
        with pytest.raises(RolloutError, match="1 to 100"):
            rollout_manual(rollout_id=canary.pk, action="set_percent", percent=bad, actor=ops_user)


def test_evaluate_rollouts_is_on_the_beat_schedule(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["policies-evaluate-rollouts"]
    assert entry["task"] == "policies.evaluate_rollouts"
    assert entry["schedule"] == settings.ROLLOUT_EVALUATE_INTERVAL_SECONDS


@pytest.mark.django_db(transaction=True)
def test_the_embedded_worker_loop_judges_rollouts_without_a_broker(
    make_strategy: Any, support_agent: Any
) -> None:
    import time

    from django.conf import settings

    from agents.hooks import PeriodicJob, periodic_jobs
    from agents.inprocess import periodic_job_forever
    from agents.loop_runner import loop_runner

    # The learning loop registered the evaluator with the runtime's embedded worker.
    registered = {job.name: job for job in periodic_jobs()}["policies.evaluate_rollouts"]
    assert registered.interval_seconds == settings.ROLLOUT_EVALUATE_INTERVAL_SECONDS

    version = strategy_activate(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW), author_kind="reviewer"
    )
    rollout = Rollout.objects.get(version=version)
    runs(support_agent, rollout.version.label, failed=5, error_type="INVALID_PARAMETER")
    loop = loop_runner().submit(
        periodic_job_forever(PeriodicJob(registered.name, registered.run, interval_seconds=0.05))
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Rollout.objects.get(pk=rollout.pk).is_open:
            time.sleep(0.05)  # polling the row the loop writes
    finally:
        loop.cancel()
    rollout.refresh_from_db()
    assert rollout.state == "rolled_back"
    assert rollout.decisions.get(action="rollback").actor_kind == "evaluator"


@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_open_one_rollout_and_the_other_waits(make_strategy: Any) -> None:
    import threading

    from django.db import close_old_connections

    strategies = [
        make_strategy(status=Strategy.Status.IN_REVIEW),
        make_strategy(
            kind="prompt_hint",
            branch={"tool": "get_order", "text": "Quote the order status verbatim."},
            error_type="HALLUCINATED_ANSWER",
            status=Strategy.Status.IN_REVIEW,
        ),
    ]
    barrier = threading.Barrier(2)
    results: dict[int, Any] = {}

    def approve(strategy: Strategy) -> None:
        try:
            barrier.wait(timeout=10)
            results[strategy.pk] = strategy_activate(strategy=strategy, author_kind="reviewer")
        except Exception as exc:  # reported below
            results[strategy.pk] = exc
        finally:
            close_old_connections()

    threads = [threading.Thread(target=approve, args=(s,)) for s in strategies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(isinstance(r, Exception) for r in results.values()), results
    started = [pk for pk, version in results.items() if version is not None]
    assert len(started) == 1 and len(results) == 2
    assert Rollout.objects.filter(is_open=True).count() == 1
    assert PolicyVersion.objects.count() == 1  # the waiting approval wrote no version
    waiting = next(s for s in strategies if s.pk not in started)
    waiting.refresh_from_db()
    assert waiting.status == "approved"


def test_publishing_is_audited_with_how_it_was_published(
    stable: PolicyVersion, make_strategy: Any, ops_user: Any
) -> None:
    assert list(
        AuditLog.objects.filter(action="strategy.activate").values_list("details", flat=True)
    ) == [{"version": stable.number}]
    # The version says which strategy made it, in its note.
    (published,) = stable.strategies.all()
    assert stable.note == f"{published.label}: {published.strategy_update}"[:200]

    strategy = make_strategy(status=Strategy.Status.IN_REVIEW)
    strategy_activate(strategy=strategy, actor=ops_user, author_kind="reviewer")

    approved = AuditLog.objects.get(action="strategy.approve")
    assert (approved.target, approved.actor) == (strategy.label, ops_user)
    assert approved.details == {"author_kind": "reviewer", "publish": "canary"}


def test_a_version_note_is_cut_to_its_column(make_strategy: Any) -> None:
    strategy = make_strategy(status=Strategy.Status.IN_REVIEW, strategy_update="x" * 240)

    version = strategy_activate(strategy=strategy, author_kind="reviewer", at_once=True)

    assert version is not None
    assert version.note == f"{strategy.label}: {'x' * 240}"[:200]
    assert len(version.note) == 200


def test_a_new_version_leaves_out_the_members_deprecated_or_rejected_since(
    stable: PolicyVersion, make_strategy: Any
) -> None:
    (kept,) = stable.strategies.all()
    gone = make_strategy(
        branch={"tool": "search_products", "field": "query", "transform": "strip"},
        status=Strategy.Status.ACTIVE,
    )
    stable.strategies.add(gone)
    gone.status = Strategy.Status.DEPRECATED
    gone.save(update_fields=["status"])
    newcomer = make_strategy(
        branch={"tool": "get_customer", "field": "email", "transform": "strip"},
        status=Strategy.Status.IN_REVIEW,
    )

    members, replaced = policy_members_with(current=stable, strategy=newcomer)

    assert (members, replaced) == ([kept, newcomer], [])


def test_a_note_on_a_manual_rollback_keeps_no_secret(canary: Rollout, ops_user: Any) -> None:
    rollout_manual(
        rollout_id=canary.pk, action="rollback", actor=ops_user, note="saw api_key=abcdef123456"
    )
    canary.refresh_from_db()
    decision = RolloutDecision.objects.filter(rollout=canary).latest("pk")
    assert "abcdef123456" not in canary.end_reason + decision.reason
    assert canary.end_reason.endswith("saw api_key=[REDACTED]")
