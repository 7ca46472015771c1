"""The trace detail page: one timeline row per round, the validated input, the strategies
that fired, latency and tokens per step, the raw toggle, at a fixed query count."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.agents.runtime_helpers import answer, reason, reflect, run_query
from tests.agents.test_runtime import agent, module_tools  # noqa: F401  (fake LLM + echo tools)
from tests.policies.conftest import make_strategy  # noqa: F401
from tests.traces.timeline_helpers import recorded_run
from traces.models import Step, Trace
from traces.selectors import steps_group_by_round, strategy_ids_applied, trace_timeline
from traces.services import trace_create

pytestmark = pytest.mark.django_db


def _step(trace: Any, number: int, rnd: int, phase: str, **values: Any) -> Step:
    return Step.objects.create(
        trace=trace,
        step_number=number,
        round_number=rnd,
        phase=phase,
        started_at=timezone.now(),
        **values,
    )


def test_steps_group_into_rounds_with_each_phase_in_its_slot(support_agent: Any) -> None:
    # given a round with a pre-condition lookup, the main call and a reflection, then an answer
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _step(trace, 1, 1, "reasoning", tool_name="get_stock", action_input={"sku": "red mug"})
    _step(
        trace,
        2,
        1,
        "action",
        tool_name="search_products",
        action_input={"q": "red mug"},
        details={"auxiliary": True, "pre_condition": 4},
    )
    _step(trace, 3, 1, "action", tool_name="get_stock", action_input={"sku": "SKU-1"})
    _step(trace, 4, 1, "reflection", details={"expectation_met": True})
    _step(trace, 5, 2, "reasoning", action_type="final_answer")
    _step(trace, 6, 2, "final", response_summary="In stock.")
    # when
    rounds = trace_timeline(trace=trace)
    # then
    assert [r.number for r in rounds] == [1, 2]
    first, second = rounds
    assert first.reasoning is not None and first.reasoning.step_number == 1
    assert [s.step_number for s in first.lookups] == [2]
    assert first.action is not None and first.action.step_number == 3
    assert first.reflection is not None and first.reflection.step_number == 4
    assert first.proposed_input == {"sku": "red mug"}
    assert first.validated_input == {"sku": "SKU-1"} and first.input_changed
    assert [s.step_number for s in first.steps] == [1, 2, 3, 4]
    assert second.action is None and second.validated_input is None
    assert [s.phase for s in second.others] == ["final"]


def test_a_rejected_action_has_no_validated_input(support_agent: Any) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _step(trace, 1, 1, "reasoning", tool_name="get_order", action_input={"order_id": "x"})
    _step(
        trace,
        2,
        1,
        "action",
        tool_name="get_order",
        action_input={"order_id": "x"},
        ok=False,
        error_type="INVALID_PARAMETER",
        details={"rejected": True},
    )
    (rnd,) = steps_group_by_round(trace.steps.all())
    assert rnd.validated_input is None and not rnd.input_changed


def test_a_step_recorded_twice_in_one_slot_is_kept_not_dropped(support_agent: Any) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _step(trace, 1, 1, "reflection")
    _step(trace, 2, 1, "reflection")
    (rnd,) = steps_group_by_round(trace.steps.all())
    assert [s.step_number for s in rnd.steps] == [1, 2]


def test_fired_strategy_ids_are_collected_once_in_order(support_agent: Any) -> None:
    trace = recorded_run(
        support_agent,
        rounds=2,
        applied=[{"id": 7, "kind": "adapter"}, {"id": 3, "kind": "validation_rule"}],
    )
    assert strategy_ids_applied(trace_timeline(trace=trace)) == [7, 3]


def test_detail_shows_the_validated_input_next_to_the_thought_and_observation(
    agent: Any,  # noqa: F811
    openai_server: Any,
    ops_user: Any,
    client: Any,
) -> None:
    # given a real run where an adapter turns the model's "42" into the number the tool needs
    from agents.models import Tool

    Tool.objects.filter(name="echo_counter").update(adapters=["numeric_string_to_int"])
    openai_server.enqueue(
        reason("echo_counter", {"n": "42"}, thought="Echo what was asked"),
        reflect(True),
        answer("Echoed 42."),
    )
    trace, _ = run_query(agent, "Echo 42")
    client.force_login(ops_user)
    # when
    page = html.unescape(client.get(trace.get_absolute_url()).content.decode())
    # then the round shows thought, the validated input, the observation and the reflection
    round_one = page[page.index('id="round-1"') : page.index('id="round-2"')]
    assert "Echo what was asked" in round_one
    assert '<code class="input proposed-input">{"n": "42"}</code>' in round_one
    assert '<pre class="input validated-input">{\n  "n": 42\n}</pre>' in round_one
    assert "changed from what the model asked for" in round_one
    assert "expectation met" in round_one
    assert '<div class="obs">{"n":42,"calls":1}</div>' in round_one
    assert "{}" not in round_one
    assert "{'" not in page


def test_detail_shows_per_step_latency_tokens_fired_strategies_and_raw_toggle(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    trace = recorded_run(support_agent, rounds=1, applied=[{"id": 9, "kind": "adapter"}])
    client.force_login(ops_user)
    page = client.get(trace.get_absolute_url()).content.decode()
    round_one = page[page.index('id="round-1"') : page.index('id="round-2"')]
    assert '<span class="tokens" title="prompt + completion tokens">121 tokens</span>' in round_one
    assert '<span class="latency" title="latency">41 ms</span>' in round_one
    assert '<a href="#strategy-9">S9</a> adapter' in round_one
    assert round_one.count('<details class="raw">') == 3
    assert "<summary>Raw request and response</summary>" in round_one
    assert "http://127.0.0.1/sandbox/api/orders/" in round_one


def test_detail_shows_a_thought_the_think_validator_sent_back_with_its_correction(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    trace = trace_create(agent_id=support_agent.pk, query="Where is W1234567?", llm_backend="x")
    _step(
        trace,
        1,
        1,
        "reasoning",
        ok=False,
        thought="Order W7654321 <is> theirs.",
        tool_name="get_order",
        error_type="UNGROUNDED_THOUGHT",
        error_detail="Thought rejected: the thought states 'W7654321'.",
        details={"guard": "think"},
    )
    client.force_login(ops_user)
    page = client.get(trace.get_absolute_url()).content.decode()
    round_one = page[page.index('id="round-1"') :]
    assert '<p class="thought rejected-thought">Order W7654321 &lt;is&gt; theirs.</p>' in round_one
    assert '<span class="err">UNGROUNDED_THOUGHT</span> Thought rejected' in round_one


def test_detail_query_count_does_not_grow_with_steps(
    support_agent: Any,
    ops_user: Any,
    client: Any,
    make_strategy: Any,  # noqa: F811
) -> None:
    # given a short and a long run, strategies that fired in every round, and one learned
    fired = [make_strategy(), make_strategy(kind="prompt_hint", branch={"text": "Ask for the id"})]
    applied = [{"id": s.pk, "kind": s.kind} for s in fired]
    runs = [recorded_run(support_agent, rounds=n, applied=applied) for n in (1, 12)]
    produced = make_strategy(status="in_review")
    produced.source_traces.add(*runs)
    client.force_login(ops_user)
    counts = []
    for trace in runs:
        # when
        with CaptureQueriesContext(connection) as queries:
            response = client.get(trace.get_absolute_url())
        # then
        assert response.status_code == 200
        assert f'id="strategy-{produced.pk}"' in response.content.decode()
        counts.append(len(queries))
    # session, user, the user's and the groups' permissions, trace, its feedback, steps,
    # strategies, their source traces
    assert counts == [9, 9]


def test_detail_shows_lookups_rejections_and_other_phases_in_their_round(
    support_agent: Any, ops_user: Any, client: Any
) -> None:
    # given a round whose pre-condition looked a value up, a round whose call was rejected,
    # and a Self-RAG retrieval
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    _step(trace, 1, 1, "reasoning", tool_name="get_stock", action_input={"sku": "red mug"})
    _step(
        trace,
        2,
        1,
        "action",
        tool_name="search_products",
        action_input={"q": "red mug"},
        status_code=200,
        details={"auxiliary": True, "pre_condition": 4},
    )
    _step(trace, 3, 1, "action", tool_name="get_stock", action_input={"sku": "SKU-1"})
    _step(trace, 4, 2, "reasoning", tool_name="get_order", action_input={"order_id": "abc"})
    _step(
        trace,
        5,
        2,
        "action",
        tool_name="get_order",
        action_input={"order_id": "abc"},
        ok=False,
        error_type="INVALID_PARAMETER",
        error_detail="SCHEMA_VIOLATION: 'abc' does not match '^#W\\d{7}$'",
        details={"rejected": True},
    )
    _step(trace, 6, 3, "retrieval", action_input={"query": "returns", "top_k": 3})
    client.force_login(ops_user)
    # when
    page = html.unescape(client.get(trace.get_absolute_url()).content.decode())
    # then
    round_one = page[page.index('id="round-1"') : page.index('id="round-2"')]
    assert "pre-condition S4 looked up" in round_one
    assert '<code class="input">{"q": "red mug"}</code>' in round_one
    assert '<pre class="input validated-input">{\n  "sku": "SKU-1"\n}</pre>' in round_one
    round_two = page[page.index('id="round-2"') : page.index('id="round-3"')]
    assert "Rejected before the call" in round_two
    assert "validated-input" not in round_two
    assert "INVALID_PARAMETER" in round_two
    round_three = page[page.index('id="round-3"') :]
    assert "<h4>Retrieval</h4>" in round_three
    assert '{"query": "returns", "top_k": 3}' in round_three


def test_a_support_agent_sees_which_strategies_fired_without_links_to_nowhere(
    support_agent: Any, support_user: Any, client: Any
) -> None:
    """The strategies block is for those who read policies; a support agent's page names
    the strategy, and links only what it shows."""
    trace = recorded_run(support_agent, rounds=1, applied=[{"id": 9, "kind": "adapter"}])
    Trace.objects.filter(pk=trace.pk).update(created_by=support_user)
    client.force_login(support_user)

    page = client.get(trace.get_absolute_url()).content.decode()

    assert "strategies: S9 adapter" in page
    assert 'href="#strategy-9"' not in page
