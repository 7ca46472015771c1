"""The edges of scoring a run's strategies and of building a policy's member list: a run
that has not ended scores nothing, applications that name no known strategy are skipped,
and a strategy already in the policy is neither duplicated nor counted as its own rival."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from policies.models import Strategy, StrategyConfidenceEvent
from policies.services import policy_members_with, run_outcomes_record, strategy_activate
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db


def _run(support_agent: Any, applied: list[dict[str, Any]], *, ok: bool) -> Trace:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="action",
        ok=ok,
        error_type="" if ok else "TYPE_MISMATCH",  # what the adapters target
        started_at=timezone.now(),
        strategies_applied=applied,
    )
    return trace


def test_a_run_that_has_not_ended_scores_nothing_until_it_ends(
    make_strategy: Any, support_agent: Any
) -> None:
    adapter = make_strategy()
    trace = _run(support_agent, [{"id": adapter.pk, "kind": "adapter"}], ok=True)
    Trace.objects.filter(pk=trace.pk).update(status="running")

    assert run_outcomes_record(trace_id=str(trace.pk)) == {}

    adapter.refresh_from_db()
    assert adapter.applications == 0 and adapter.confidence == 0.7
    assert not StrategyConfidenceEvent.objects.exists()

    Trace.objects.filter(pk=trace.pk).update(status="finished", outcome="answered_from_data")
    assert run_outcomes_record(trace_id=str(trace.pk)) == {adapter.pk: True}
    adapter.refresh_from_db()
    assert adapter.applications == 1 and adapter.confidence == 0.75


def test_applications_naming_no_known_strategy_are_skipped(
    make_strategy: Any, support_agent: Any
) -> None:
    adapter = make_strategy()
    gone = make_strategy(branch={"tool": "get_sku", "field": "sku", "transform": "upper"})
    gone_id = gone.pk
    gone.delete()
    trace = _run(
        support_agent,
        [
            {"id": str(adapter.pk), "kind": "adapter"},  # not an int: not ours to score
            {"kind": "adapter"},
            {"id": gone_id, "kind": "adapter"},
            {"id": adapter.pk, "kind": "adapter"},
        ],
        ok=False,
    )
    Trace.objects.filter(pk=trace.pk).update(status="failed")

    assert run_outcomes_record(trace_id=str(trace.pk)) == {adapter.pk: False}

    adapter.refresh_from_db()
    assert adapter.applications == 1 and adapter.confidence == 0.55
    assert list(StrategyConfidenceEvent.objects.values_list("strategy_id", "reason")) == [
        (adapter.pk, "failure")
    ]


def test_a_strategy_already_in_the_policy_is_not_added_twice_nor_its_own_rival(
    make_strategy: Any,
) -> None:
    kept = make_strategy()
    other = make_strategy(branch={"tool": "get_sku", "field": "sku", "transform": "upper"})
    strategy_activate(strategy=kept, author_kind="reviewer", at_once=True)
    current = strategy_activate(strategy=other, author_kind="reviewer", at_once=True)

    members, replaced = policy_members_with(current=current, strategy=kept)

    assert replaced == []
    assert sorted(m.pk for m in members) == sorted([kept.pk, other.pk])
    assert Strategy.objects.get(pk=kept.pk).status == Strategy.Status.ACTIVE
