"""Confidence arithmetic and its thresholds (seeds/000 §4.4)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from policies.models import Strategy, StrategyConfidenceEvent
from policies.selectors import strategies_citable
from policies.services import (
    confidence_next,
    run_ended,
    run_outcomes_record,
    strategy_evidence_record,
    strategy_outcome_record,
)
from reviews.models import AuditLog, ReviewItem
from traces.models import Step, Trace
from traces.services import trace_create


@pytest.mark.parametrize(
    ("start", "success", "expected"),
    [
        (0.7, True, 0.75),
        (0.7, False, 0.55),
        (0.98, True, 1.0),
        (0.1, False, 0.0),
        (0.55, False, 0.4),
    ],
)
def test_confidence_moves_plus_five_minus_fifteen(
    start: float, success: bool, expected: float
) -> None:
    assert confidence_next(start, success=success) == expected


def test_new_strategies_start_at_point_seven(make_strategy: Any) -> None:
    assert make_strategy().confidence == 0.7


def test_a_strategy_that_makes_things_worse_is_deprecated_within_three_applications(
    make_strategy: Any,
) -> None:
    strategy = make_strategy()
    for _ in range(3):
        strategy = strategy_outcome_record(strategy_id=strategy.pk, success=False)
    assert strategy.confidence == pytest.approx(0.25)
    assert strategy.status == Strategy.Status.DEPRECATED
    assert strategy.applications == 3
    deprecated = AuditLog.objects.get(action="strategy.deprecate")
    assert deprecated.details == {"confidence": 0.25, "trace": ""}


def test_two_consecutive_failures_send_it_to_review_once(make_strategy: Any) -> None:
    strategy = make_strategy()
    strategy_outcome_record(strategy_id=strategy.pk, success=False)
    assert not ReviewItem.objects.exists()
    strategy = strategy_outcome_record(strategy_id=strategy.pk, success=False)
    assert strategy.needs_review
    assert ReviewItem.objects.filter(strategy=strategy, reason="consecutive_failures").count() == 1
    assert AuditLog.objects.get(action="strategy.send_to_review").details == {"trace": ""}


@pytest.mark.parametrize(
    ("passed", "reason", "confidence"),
    [(True, "replay passed", 0.75), (False, "replay failed", 0.55)],
)
def test_a_replay_moves_confidence_with_an_event_not_tied_to_a_run(
    make_strategy: Any, passed: bool, reason: str, confidence: float
) -> None:
    strategy = strategy_evidence_record(strategy_id=make_strategy().pk, passed=passed)

    assert strategy.confidence == confidence and strategy.applications == 0
    assert _history(strategy) == [(0.7, confidence, reason)]
    assert StrategyConfidenceEvent.objects.get(strategy=strategy).trace_id is None


def test_every_success_is_counted(make_strategy: Any) -> None:
    strategy = make_strategy()
    for _ in range(2):
        strategy = strategy_outcome_record(strategy_id=strategy.pk, success=True)
    assert (strategy.applications, strategy.successes) == (2, 2)


def test_a_success_resets_the_failure_streak(make_strategy: Any) -> None:
    strategy = make_strategy()
    strategy_outcome_record(strategy_id=strategy.pk, success=False)
    strategy = strategy_outcome_record(strategy_id=strategy.pk, success=True)
    strategy = strategy_outcome_record(strategy_id=strategy.pk, success=False)
    assert strategy.consecutive_failures == 1
    assert not ReviewItem.objects.exists()


def test_below_point_five_a_strategy_is_never_cited_as_history(make_strategy: Any) -> None:
    good = make_strategy(confidence=0.5)
    make_strategy(confidence=0.49, branch={"tool": "get_order", "field": "x", "transform": "strip"})
    assert list(strategies_citable(error_type="TYPE_MISMATCH")) == [good]


def test_run_outcomes_score_step_level_and_run_level_strategies(
    make_strategy: Any, support_agent: Any
) -> None:
    adapter = make_strategy()
    hint = make_strategy(
        kind="prompt_hint",
        branch={"text": "Call a tool before answering.", "error_type": "HALLUCINATED_ANSWER"},
        error_type="HALLUCINATED_ANSWER",
    )
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    now = timezone.now()
    Step.objects.bulk_create(
        [
            Step(
                trace=trace,
                step_number=1,
                phase="reasoning",
                started_at=now,
                strategies_applied=[
                    {"id": hint.pk, "kind": "prompt_hint", "error_type": "HALLUCINATED_ANSWER"}
                ],
            ),
            Step(
                trace=trace,
                step_number=2,
                phase="action",
                ok=False,
                error_type="TYPE_MISMATCH",  # the adapter's own target, still failing
                started_at=now,
                strategies_applied=[{"id": adapter.pk, "kind": "adapter"}],
            ),
            Step(
                trace=trace,
                step_number=3,
                phase="reasoning",
                started_at=now,
                strategies_applied=[
                    {"id": hint.pk, "kind": "prompt_hint", "error_type": "HALLUCINATED_ANSWER"}
                ],
            ),
        ]
    )
    Trace.objects.filter(pk=trace.pk).update(status="finished", outcome="answered_from_data")
    outcomes = run_outcomes_record(trace_id=str(trace.pk))
    assert outcomes == {adapter.pk: False, hint.pk: True}
    hint.refresh_from_db()
    assert hint.applications == 1 and hint.confidence == 0.75


@pytest.mark.parametrize(
    ("error_type", "scored"),
    [
        ("RESOURCE_NOT_FOUND", None),  # a well-formed call for an order that does not exist
        ("SERVICE_UNAVAILABLE", None),  # the upstream was down
        ("TIMEOUT", None),
        ("TYPE_MISMATCH", False),  # its own target: it did not fix it
        ("INVALID_PARAMETER", False),  # the call it shaped was malformed
        ("UNKNOWN", False),  # nothing says it was not the strategy's doing
    ],
)
def test_a_step_that_failed_for_an_unrelated_reason_does_not_score_its_strategy(
    make_strategy: Any, support_agent: Any, error_type: str, scored: bool | None
) -> None:
    """An adapter that turned a TYPE_MISMATCH into a well-formed request is not blamed for
    what no strategy could change: a canary's runs for orders that do not exist retired a
    correct fix before this."""
    adapter = make_strategy()  # targets TYPE_MISMATCH
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        ok=False,
        error_type=error_type,
        started_at=timezone.now(),
        strategies_applied=[{"id": adapter.pk, "kind": "adapter"}],
    )
    Trace.objects.filter(pk=trace.pk).update(status="failed", outcome="failed")

    outcomes = run_outcomes_record(trace_id=str(trace.pk))

    assert outcomes == ({} if scored is None else {adapter.pk: scored})
    adapter.refresh_from_db()
    assert (adapter.applications, adapter.confidence) == (
        (0, 0.7) if scored is None else (1, pytest.approx(0.55))
    )


def _scored_run(
    support_agent: Any, steps: list[tuple[bool, str, list[dict[str, Any]]]], *, outcome: str
) -> Trace:
    """A run that ended with ``outcome``; each step (ok, error detail, strategies applied)."""
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    now = timezone.now()
    Step.objects.bulk_create(
        [
            Step(
                trace=trace,
                step_number=number,
                phase="action",
                action_type="tool",
                ok=ok,
                error_type="" if ok else "SCHEMA_VIOLATION",
                error_detail=detail,
                started_at=now,
                strategies_applied=applied,
            )
            for number, (ok, detail, applied) in enumerate(steps, 1)
        ]
    )
    status = Trace.OUTCOME_STATUS[Trace.Outcome(outcome)]
    Trace.objects.filter(pk=trace.pk).update(
        status=status, outcome=outcome, finished_at=now, learning=Trace.Learning.PENDING
    )
    return trace


@pytest.mark.parametrize(
    ("outcome", "success"),
    [
        ("answered_from_data", True),
        ("answered_without_data", True),
        ("asked_customer", False),
        ("handed_over", False),
        ("failed", False),
    ],
)
def test_a_step_that_succeeded_counts_only_when_the_run_ends_with_a_grounded_answer(
    make_strategy: Any, support_agent: Any, outcome: str, success: bool
) -> None:
    adapter = make_strategy()
    trace = _scored_run(
        support_agent, [(True, "", [{"id": adapter.pk, "kind": "adapter"}])], outcome=outcome
    )

    assert run_outcomes_record(trace_id=str(trace.pk)) == {adapter.pk: success}


def test_the_end_of_a_run_scores_the_strategies_it_applied(
    make_strategy: Any, support_agent: Any, settings: Any
) -> None:
    settings.REFLEXION_ENABLED = True  # its check reads the steps too
    adapter = make_strategy()
    trace = _scored_run(
        support_agent,
        [(True, "", [{"id": adapter.pk, "kind": "adapter"}])],
        outcome="answered_from_data",
    )

    with CaptureQueriesContext(connection) as queries:
        run_ended(trace_id=str(trace.pk))

    # Scoring and the check for Reflexion read the run's steps once, together.
    step_reads = [q["sql"] for q in queries if 'FROM "traces_step"' in q["sql"]]
    assert len(step_reads) == 1, step_reads
    adapter.refresh_from_db()
    assert (adapter.applications, adapter.successes, adapter.confidence) == (1, 1, 0.75)
    assert list(
        StrategyConfidenceEvent.objects.filter(strategy=adapter).values_list("trace_id", flat=True)
    ) == [trace.pk]


@pytest.mark.parametrize(("outcome", "success"), [("answered_from_data", True), ("failed", False)])
def test_a_validation_rule_is_scored_on_the_runs_where_it_blocked_a_call(
    make_strategy: Any, support_agent: Any, outcome: str, success: bool
) -> None:
    rule = make_strategy(
        kind="validation_rule",
        branch={"tool": "search_products", "schema": {"required": ["q"]}},
        error_type="MISSING_REQUIRED_FIELD",
    )
    other = make_strategy(
        kind="validation_rule",
        branch={"tool": "get_order", "schema": {"required": ["order_id"]}},
        error_type="MISSING_REQUIRED_FIELD",
    )
    applied = [{"id": rule.pk, "kind": "validation_rule"}]
    checked = [{"id": other.pk, "kind": "validation_rule"}]
    blocked = f"SCHEMA_VIOLATION: policy rule S{rule.pk}: validator=required path=(root): 'q'"
    trace = _scored_run(
        support_agent,
        # blocked once, then a call it accepted; the other rule only checked a call
        [(False, blocked, applied), (True, "", applied), (True, "", checked)],
        outcome=outcome,
    )

    assert run_outcomes_record(trace_id=str(trace.pk)) == {rule.pk: success}
    other.refresh_from_db()
    assert other.applications == 0


@pytest.mark.parametrize(
    ("target", "step_error", "outcome", "success"),
    [
        # the run answered, but the error the hint is there to prevent happened on the way
        ("TIMEOUT", "TIMEOUT", "answered_from_data", False),
        ("TIMEOUT", "RATE_LIMITED", "answered_from_data", True),
        # without the error but without an answer either
        ("TIMEOUT", "RATE_LIMITED", "failed", False),
        # a hint tied to no error type: an answered run without errors is its success
        ("", "", "answered_from_data", True),
    ],
)
def test_a_prompt_hint_succeeds_on_an_answered_run_without_its_error(
    make_strategy: Any,
    support_agent: Any,
    target: str,
    step_error: str,
    outcome: str,
    success: bool,
) -> None:
    hint = make_strategy(
        kind="prompt_hint", branch={"text": "Wait before retrying."}, error_type=target
    )
    trace = _scored_run(
        support_agent,
        [(True, "", [{"id": hint.pk, "kind": "prompt_hint", "error_type": target}])],
        outcome=outcome,
    )
    Step.objects.filter(trace=trace).update(error_type=step_error)

    assert run_outcomes_record(trace_id=str(trace.pk)) == {hint.pk: success}


def test_a_validation_rule_is_not_scored_on_a_call_that_failed_for_another_reason(
    make_strategy: Any, support_agent: Any
) -> None:
    rule = make_strategy(
        kind="validation_rule",
        branch={"tool": "search_products", "schema": {"required": ["q"]}},
        error_type="MISSING_REQUIRED_FIELD",
    )
    applied = [{"id": rule.pk, "kind": "validation_rule"}]
    # The rule checked the call and let it through; the tool then failed on its own.
    trace = _scored_run(
        support_agent, [(False, "HTTP 500: upstream down", applied)], outcome="failed"
    )

    assert run_outcomes_record(trace_id=str(trace.pk)) == {}
    rule.refresh_from_db()
    assert (rule.applications, rule.confidence) == (0, 0.7)


def _history(strategy: Strategy) -> list[tuple[float, float, str]]:
    return [
        (event.old, event.new, event.reason)
        for event in StrategyConfidenceEvent.objects.filter(strategy=strategy).order_by("at", "id")
    ]


def test_every_confidence_move_appends_an_event_down_to_deprecation(make_strategy: Any) -> None:
    strategy = make_strategy()

    for success in (True, False, False, False, False):
        strategy_outcome_record(strategy_id=strategy.pk, success=success)

    strategy.refresh_from_db()
    assert strategy.status == Strategy.Status.DEPRECATED
    assert _history(strategy) == [
        (0.7, 0.75, "success"),
        (0.75, 0.6, "failure"),
        (0.6, 0.45, "failure"),
        (0.45, 0.3, "failure"),
        (0.3, 0.15, "failure"),
    ]
    assert _history(strategy)[-1][1] == strategy.confidence


def test_run_outcomes_record_one_event_per_application_linked_to_the_run(
    make_strategy: Any, support_agent: Any
) -> None:
    adapter = make_strategy()
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    now = timezone.now()
    Step.objects.bulk_create(
        [
            Step(
                trace=trace,
                step_number=number,
                phase="action",
                ok=ok,
                error_type="" if ok else "INVALID_PARAMETER",
                started_at=now,
                strategies_applied=[{"id": adapter.pk, "kind": "adapter"}],
            )
            for number, ok in ((1, False), (2, True))
        ]
    )
    Trace.objects.filter(pk=trace.pk).update(status="finished", outcome="answered_from_data")

    run_outcomes_record(trace_id=str(trace.pk))

    events = list(StrategyConfidenceEvent.objects.filter(strategy=adapter).order_by("id"))
    adapter.refresh_from_db()
    assert [(e.reason, e.trace_id) for e in events] == [
        ("failure", trace.pk),
        ("success", trace.pk),
    ]
    assert len(events) == adapter.applications
    assert events[-1].new == adapter.confidence


@pytest.mark.django_db(transaction=True)
def test_a_confidence_move_that_rolls_back_leaves_no_event(make_strategy: Any) -> None:
    strategy = make_strategy()

    with pytest.raises(RuntimeError), transaction.atomic():
        strategy_outcome_record(strategy_id=strategy.pk, success=True)
        raise RuntimeError("the caller's transaction fails after the move")

    strategy.refresh_from_db()
    assert strategy.confidence == 0.7
    assert not StrategyConfidenceEvent.objects.filter(strategy=strategy).exists()
