"""Model output that no column stores as it is (a NUL character, a lone surrogate, NaN) or
that nests without end is untrusted input like any other: the run goes on, its steps are
stored, and one such value never fails the steps other runs wrote in the same batch."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.parsing import ModelFormatError, model_json, parse_reasoning
from tests.agents.runtime_helpers import answer, reflect
from tests.agents.test_runtime_guards import agent, order_lookup, run  # noqa: F401
from traces.models import Step, Trace
from traces.redaction import storable_text, storable_value

NUL, LONE, RLO = "\x00", "\ud800", "\u202e"


def _reply(body: dict[str, Any]) -> tuple[str, str]:
    return ("ok", json.dumps(body))  # json.dumps writes NUL and a lone surrogate as escapes


def test_nul_surrogates_and_bidi_overrides_from_the_model_reach_no_row(
    agent: Any,  # noqa: F811
    openai_server: Any,
) -> None:
    openai_server.enqueue(
        _reply(
            {
                "thought": f"look it up{NUL}",
                "action": "order_lookup",
                "action_input": {"code": f"W1234567{NUL}{LONE}"},
                "expectation": "a status",
            }
        ),
        reflect(),
        answer(f"Order W1234567 has shipped{NUL} via {RLO}SPU."),
    )
    trace = run(agent)
    assert trace.status == Trace.Status.FINISHED, list(
        trace.steps.values_list("phase", "error_type", "error_detail")
    )
    stored = json.dumps(
        [
            [s.thought, s.action_input, s.response_summary, s.details]
            for s in trace.steps.order_by("step_number")
        ]
        + [trace.final_answer],
        ensure_ascii=False,
    )
    for bad in (NUL, LONE):
        assert bad not in stored
    assert RLO not in trace.final_answer  # what the customer reads; the raw reply keeps it
    assert "W1234567\ufffd" in stored  # a lone surrogate becomes U+FFFD, the rest is kept
    assert "via SPU" in trace.final_answer


@pytest.mark.parametrize(
    "reply",
    [
        '{"thought": "t", "action": "order_lookup", "action_input": {"code": NaN}}',
        '{"thought": "t", "action": "order_lookup", "action_input": '
        + '{"a": ' * 200
        + "1"
        + "}" * 201,
        '{"thought": "t", "action": "order_lookup", "action_input": {"a": '
        + "[" * 5000
        + "]" * 5000
        + "}}",
    ],
    ids=["nan", "nested-200", "nested-5000"],
)
def test_json_that_storage_refuses_is_a_format_error_the_model_can_fix(reply: str) -> None:
    with pytest.raises(ModelFormatError):
        parse_reasoning(reply)


def test_a_lenient_reply_with_a_huge_number_or_nan_keeps_it_as_text() -> None:
    step, _ = parse_reasoning(
        f"Thought: look up\nAction: order_lookup(code={'9' * 5000}, ratio=nan)"
    )
    assert step.action_input == {"code": "9" * 5000, "ratio": "nan"}


def test_storable_values_keep_everything_else() -> None:
    assert storable_text("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"
    assert storable_text(f"a{NUL}b{LONE}c") == "ab\ufffdc"
    assert storable_value({f"k{NUL}": [float("nan"), 1.5, {"x": float("inf")}]}) == {
        "k": ["nan", 1.5, {"x": "inf"}]
    }
    assert model_json('{"a": "\\u0000b"}') == {"a": "b"}


@pytest.mark.django_db(transaction=True)  # the batch writes on the database threads
def test_a_step_the_database_refuses_fails_alone_not_the_batch_it_shared(
    agent: Any,  # noqa: F811
) -> None:
    """Two runs' steps in one batch; one carries a value psycopg cannot even send (it got
    past every cleaner: a writer that skipped them). Only its run hears."""
    from traces.recorder import StepBatcher
    from traces.services import trace_create

    good, bad = (trace_create(agent_id=agent.pk, query=q, llm_backend="sim") for q in "ab")

    def step(trace: Trace, thought: str) -> Step:
        return Step(
            trace=trace,
            step_number=1,
            phase=Step.Phase.REASONING,
            thought=thought,
            started_at=timezone.now(),
        )

    async def both() -> list[Any]:
        batcher = StepBatcher()
        return await asyncio.gather(
            batcher.write(step(good, "fine")),
            batcher.write(step(bad, f"broken {LONE}")),
            return_exceptions=True,
        )

    stored, refused = async_to_sync(both)()
    assert isinstance(stored, Step) and stored.pk is not None
    assert isinstance(refused, ValueError | Exception) and not isinstance(refused, Step)
    assert list(Step.objects.filter(trace=good).values_list("thought", flat=True)) == ["fine"]
    assert not Step.objects.filter(trace=bad).exists()
