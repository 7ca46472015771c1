"""The ReAct state machine, its breakers and resume, driven by scripted model output
served over the real OpenAI wire protocol, with real in-process tools and the real DB."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agents.models import Tool, ToolAlert
from agents.runtime import (
    TRANSITIONS,
    InvalidTransition,
    RunMemory,
    RunState,
    RuntimeConfig,
)
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    phases,
    reason,
    reflect,
    run_query,
    tools_registered,
    use_fake_llm,
)
from traces.models import Step, Trace

CALLS: list[dict[str, Any]] = []


@declared_tool(
    name="echo_counter",
    description="Test tool: echoes its argument and counts calls.",
    params_schema={
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
)
def echo_counter(*, n: int) -> dict[str, int]:
    CALLS.append({"n": n})
    return {"n": n, "calls": len(CALLS)}


@declared_tool(
    name="sleepy",
    description="Test tool that never answers in time.",
    params_schema={"type": "object", "properties": {}, "additionalProperties": False},
    timeout_seconds=0.05,
)
async def sleepy() -> dict[str, str]:
    await asyncio.sleep(1)
    return {"late": "yes"}


@pytest.fixture
def module_tools() -> Iterator[None]:
    """This module's tools, registered for one test at a time (never at import)."""
    with tools_registered(echo_counter, sleepy):
        yield


@pytest.fixture
def agent(
    module_tools: None, db: None, error_rules: None, settings: Any, openai_server: Any
) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    CALLS.clear()
    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    return agent


def test_happy_path_walks_every_phase_and_finishes(agent: Any, openai_server: Any) -> None:
    # given a model that calls one tool, reflects, then answers from the observation
    openai_server.enqueue(
        reason("echo_counter", {"n": 7}), reflect(True), answer("The tool echoed 7.")
    )
    # when
    trace, _ = run_query(agent, "Echo seven please")
    # then
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]
    assert trace.status == Trace.Status.FINISHED
    assert trace.final_answer == "The tool echoed 7."
    assert trace.total_steps == 5
    action = trace.steps.get(phase="action")
    assert action.ok and action.tool_name == "echo_counter"
    assert action.endpoint == "python:echo_counter"
    assert action.idempotency_key
    assert '"n":7' in action.response_summary.replace(" ", "")
    assert CALLS == [{"n": 7}]


def test_the_reflection_is_asked_to_compare_the_observation_with_the_stated_expectation(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        reason("echo_counter", {"n": 7}, expectation="the number seven, echoed"),
        reflect(True),
        answer("The tool echoed 7."),
    )
    run_query(agent, "Echo seven please")
    reflection_prompt = openai_server.requests[1].json["messages"][-1]["content"]
    assert "Expectation: the number seven, echoed\n" in reflection_prompt


def test_the_reasoning_request_constrains_the_action_to_the_agent_s_tools(
    agent: Any, openai_server: Any
) -> None:
    from agents.services import tool_snapshots

    openai_server.enqueue(reason("echo_counter", {"n": 7}), reflect(), answer("Echoed 7."))
    run_query(agent, "Echo seven")
    # constrained decoding can only pick one of the agent's tools or the final answer
    response_format = openai_server.requests[0].json["response_format"]
    assert response_format["json_schema"]["name"] == "ReasoningStep"
    schema = response_format["json_schema"]["schema"]
    allowed = schema["properties"]["action"]["enum"]
    assert allowed == [*sorted(tool_snapshots(agent_id=agent.pk)), "final_answer"]
    assert "echo_counter" in allowed and schema["required"] == ["thought", "action"]


def test_two_unparseable_outputs_give_the_canned_fallback(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(("ok", "I think I should {broken"), ("ok", "still not json"))
    trace, _ = run_query(agent, "Echo something")
    assert phases(trace) == ["reasoning", "reasoning", "fallback"]
    assert trace.status == Trace.Status.FALLBACK
    assert trace.final_answer.startswith("Sorry")
    errors = list(trace.steps.filter(phase="reasoning").values_list("error_type", flat=True))
    assert errors == ["MODEL_FORMAT_ERROR", "MODEL_FORMAT_ERROR"]


def test_format_error_is_shown_to_the_model_and_the_run_recovers(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        ("ok", "nonsense"), reason("echo_counter", {"n": 1}), reflect(), answer("Echoed 1.")
    )
    trace, _ = run_query(agent, "Echo one")
    assert trace.status == Trace.Status.FINISHED
    second_prompt = openai_server.requests[1].json["messages"][1]["content"]
    assert "Format error" in second_prompt


def test_lenient_text_action_is_parsed(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(
        ("ok", "Thought: I will echo.\nAction: echo_counter（n＝3）"),
        reflect(),
        answer("Echoed 3."),
    )
    trace, _ = run_query(agent, "Echo three")
    reasoning = trace.steps.filter(phase="reasoning").first()
    assert reasoning is not None and reasoning.parse_mode == "lenient"
    assert CALLS == [{"n": 3}]


@pytest.mark.parametrize(
    ("action", "action_input", "error_type"),
    [
        ("delete_all_orders", {}, "TOOL_NOT_ALLOWED"),
        ("echo_counter", {}, "MISSING_REQUIRED_FIELD"),
        ("echo_counter", {"n": "seven"}, "TYPE_MISMATCH"),
        ("echo_counter", {"n": 1, "extra": 2}, "INVALID_PARAMETER"),
    ],
)
def test_two_rejected_actions_give_the_fallback(
    agent: Any, openai_server: Any, action: str, action_input: dict, error_type: str
) -> None:
    openai_server.enqueue(reason(action, action_input), reason(action, action_input))
    trace, _ = run_query(agent, "Do it")
    assert phases(trace) == ["reasoning", "action", "reasoning", "action", "fallback"]
    assert trace.status == Trace.Status.FALLBACK
    rejected = trace.steps.filter(phase="action")
    assert {s.error_type for s in rejected} == {error_type}
    assert all(not s.ok and s.status_code is None for s in rejected)
    assert CALLS == []


def test_adapter_repairs_a_numeric_string_and_records_the_firing(
    agent: Any, openai_server: Any
) -> None:
    Tool.objects.filter(name="echo_counter").update(adapters=["numeric_string_to_int"])
    openai_server.enqueue(reason("echo_counter", {"n": "42"}), reflect(), answer("Echoed 42."))
    trace, _ = run_query(agent, "Echo 42")
    action = trace.steps.get(phase="action")
    assert action.ok
    assert action.action_input == {"n": 42}
    assert action.adapters_fired[0]["adapter"] == "numeric_string_to_int"
    assert CALLS == [{"n": 42}]


def test_max_iterations_stops_the_run(agent: Any, openai_server: Any) -> None:
    agent.max_iterations = 2
    agent.save()
    openai_server.enqueue(
        reason("echo_counter", {"n": 1}), reflect(), reason("echo_counter", {"n": 2}), reflect()
    )
    trace, _ = run_query(agent, "Keep echoing")
    assert trace.status == Trace.Status.FAILED
    assert trace.error_type == "MAX_STEPS"
    assert phases(trace)[-1] == "stopped"


def test_repeat_warns_then_the_third_identical_call_stops(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(
        reason("echo_counter", {"n": 5}),
        reflect(),
        reason("echo_counter", {"n": 5}),
        reflect(),
        reason("echo_counter", {"n": 5}),
    )
    trace, _ = run_query(agent, "Echo five")
    assert trace.status == Trace.Status.FAILED
    assert trace.error_type == "LOOP_DETECTED"
    assert len(CALLS) == 2  # the third identical call never ran
    third_prompt = openai_server.requests[4].json["messages"][1]["content"]
    assert "Do not repeat it" in third_prompt
    first_prompt = openai_server.requests[0].json["messages"][1]["content"]
    assert "Do not repeat it" not in first_prompt


def test_answer_without_tool_result_is_rejected_as_hallucinated(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        answer("Your order #W1234567 shipped yesterday."),
        answer("Your order #W1234567 shipped yesterday."),
    )
    trace, _ = run_query(agent, "Where is my order #W1234567?")
    assert trace.status == Trace.Status.FALLBACK
    rejected = list(trace.steps.filter(phase="action").values_list("error_type", flat=True))
    assert rejected == ["HALLUCINATED_ANSWER", "HALLUCINATED_ANSWER"]


def test_llm_client_error_fails_the_run(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(("status", 400))
    trace, _ = run_query(agent, "Echo")
    assert trace.status == Trace.Status.FAILED
    assert trace.error_type == "LLM_ERROR"


def test_run_time_limit_ends_the_run_cleanly(agent: Any, openai_server: Any) -> None:
    from agents.services import runtime_config

    openai_server.enqueue(("hang", 3))
    config = RuntimeConfig(**{**runtime_config().__dict__, "run_time_limit_seconds": 0.3})
    trace, _ = run_query(agent, "Echo", config=config)
    assert trace.status == Trace.Status.FAILED
    assert trace.error_type == "RUN_TIME_LIMIT"


def test_fifth_timeout_in_an_hour_suspends_the_tool_and_writes_an_alert(
    agent: Any, openai_server: Any
) -> None:
    # given four earlier timeouts of the tool within the hour
    earlier = run_query.__globals__["trace_create"](
        agent_id=agent.pk, query="earlier", llm_backend="openai"
    )
    from django.utils import timezone

    Step.objects.bulk_create(
        [
            Step(
                trace=earlier,
                step_number=i + 1,
                phase="action",
                tool_name="sleepy",
                ok=False,
                error_type="TIMEOUT",
                started_at=timezone.now(),
            )
            for i in range(4)
        ]
    )
    openai_server.enqueue(
        reason("sleepy", {}),
        reflect(False, cause="TIMEOUT: sleepy did not answer in time"),
        reason("sleepy", {}),
    )
    # when the fifth times out
    trace, _ = run_query(agent, "Be slow")
    # then the tool is suspended, an alert is written, and the next call is refused
    tool = Tool.objects.get(name="sleepy")
    assert tool.is_suspended()
    assert ToolAlert.objects.filter(tool=tool, kind="suspended").count() == 1
    errors = list(trace.steps.filter(phase="action").values_list("error_type", flat=True))
    assert errors == ["TIMEOUT", "TOOL_SUSPENDED"]


def test_redelivered_run_resumes_without_repeating_the_recorded_tool_call(
    agent: Any, openai_server: Any
) -> None:
    # given a run that crashed right after its tool call was recorded
    openai_server.enqueue(reason("echo_counter", {"n": 9}), reflect(), answer("Echoed 9."))
    trace, _ = run_query(agent, "Echo nine")
    trace.steps.filter(step_number__gt=2).delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="")
    assert CALLS == [{"n": 9}]
    # when the task is delivered again
    openai_server.enqueue(reflect(), answer("Echoed 9 again."))
    from asgiref.sync import async_to_sync

    from agents.services import run_execute

    async_to_sync(run_execute)(trace_id=str(trace.pk))
    trace.refresh_from_db()
    # then it carried on from the reflection and the tool ran only once
    assert CALLS == [{"n": 9}]
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]
    assert trace.status == Trace.Status.FINISHED
    assert trace.attempts == 2


def test_terminal_trace_is_not_run_again(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(reason("echo_counter", {"n": 1}), reflect(), answer("Echoed 1."))
    trace, _ = run_query(agent, "Echo one")
    from asgiref.sync import async_to_sync

    from agents.services import run_execute

    assert async_to_sync(run_execute)(trace_id=str(trace.pk)) is None
    assert trace.steps.count() == 5


def test_history_keeps_three_rounds_verbatim_and_summarises_older(
    agent: Any, openai_server: Any
) -> None:
    script = []
    for n in range(1, 6):
        script += [reason("echo_counter", {"n": n}), reflect()]
    openai_server.enqueue(*script, answer("Done."))
    run_query(agent, "Echo five numbers")
    last_prompt = openai_server.requests[-1].json["messages"][1]["content"]
    earlier = last_prompt.split("## Earlier rounds")[1].split("## Recent rounds")[0]
    recent = last_prompt.split("## Recent rounds")[1].split("## Warnings")[0]
    assert "Round 1:" in earlier and "Round 2:" in earlier
    assert "### Round 3" in recent and "### Round 5" in recent
    assert "### Round 2" not in recent
    key_facts = last_prompt.split("## Key facts")[1].split("## Earlier rounds")[0]
    assert key_facts.count("echo_counter") == 5


@pytest.mark.parametrize("state", list(RunState))
def test_terminal_states_have_no_exits_and_others_do(state: RunState) -> None:
    terminal = state in {RunState.FINISHED, RunState.FALLBACK, RunState.FAILED}
    assert (len(TRANSITIONS[state]) == 0) is terminal


def test_illegal_transition_raises() -> None:
    from agents.runtime import AgentRun

    run = AgentRun.__new__(AgentRun)
    run.memory = RunMemory(state=RunState.REFLECTING)
    with pytest.raises(InvalidTransition):
        run._move(RunState.EXECUTING_TOOL)
