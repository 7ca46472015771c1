"""The runtime's error paths: policy error handlers, model errors in the reflection phase,
the timeout-suspension breaker, and resuming a run that died mid-round.

Scripted model output over the real OpenAI wire protocol, real in-process tools, the real
database; policies are compiled by the real compiler from branches as Reflexion writes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.llm.factory import llm_client_build
from agents.models import Tool, ToolAlert
from agents.policy_runtime import RuntimePolicy
from agents.runtime import RunOutcome, RuntimeConfig
from agents.services import _react, runtime_config, tool_snapshots, tool_suspend
from agents.sink import RunSink
from policies.branches import runtime_policy_compile
from tests.agents.runtime_helpers import (
    answer,
    declared_tool,
    phases,
    reason,
    reflect,
    tools_registered,
    use_fake_llm,
)
from traces.classifier import error_rules_aload
from traces.models import Step, Trace
from traces.services import trace_create

CALLS: list[tuple[str, dict[str, Any]]] = []
OUTAGE = {"failures_left": 0}
# Honest reflections on the failed calls (one without a cause is sent back once).
RAISED = "INTERNAL_SERVER_ERROR: the lookup's connection was refused"
STALLED = "TIMEOUT: stalled_lookup did not answer in time"
CODE_SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string"}},
    "required": ["code"],
    "additionalProperties": False,
}


@declared_tool(
    name="flaky_lookup",
    description="Test tool: looks a code up; raises while an outage lasts.",
    params_schema=CODE_SCHEMA,
)
def flaky_lookup(*, code: str) -> dict[str, Any]:
    CALLS.append(("flaky_lookup", {"code": code}))
    if OUTAGE["failures_left"]:
        OUTAGE["failures_left"] -= 1
        raise ConnectionError("[Errno 111] Connection refused")
    return {"code": code, "source": "primary"}


@declared_tool(
    name="backup_lookup",
    description="Test tool: the same lookup from a replica.",
    params_schema=CODE_SCHEMA,
)
def backup_lookup(*, code: str) -> dict[str, Any]:
    CALLS.append(("backup_lookup", {"code": code}))
    return {"code": code, "source": "replica"}


@declared_tool(
    name="stalled_lookup",
    description="Test tool that never answers in time.",
    params_schema={"type": "object", "properties": {}, "additionalProperties": False},
    timeout_seconds=0.05,
)
async def stalled_lookup() -> dict[str, str]:
    import asyncio

    await asyncio.sleep(1)
    return {"late": "yes"}


@pytest.fixture
def agent(db: None, error_rules: None, settings: Any, openai_server: Any) -> Iterator[Any]:
    from agents.services import agent_ensure_default, tools_sync

    use_fake_llm(settings, openai_server)
    CALLS.clear()
    OUTAGE["failures_left"] = 0
    with tools_registered(flaky_lookup, backup_lookup, stalled_lookup):
        agent = agent_ensure_default()
        tools_sync(agents=[agent])
        yield agent
    OUTAGE["failures_left"] = 0


def handler(**branch: Any) -> RuntimePolicy:
    """A policy of one error handler on flaky_lookup for the error a raising tool gets."""
    strategies = [(11, "error_handler", {"tool": "flaky_lookup", **branch}, "")]
    policy = runtime_policy_compile(version="test-handlers", strategies=strategies)
    assert policy.error_handlers, "the branch must compile"
    return policy


def run(
    agent: Any,
    query: str,
    *,
    policy: RuntimePolicy | None = None,
    config: RuntimeConfig | None = None,
) -> Trace:
    from agents.services import run_execute

    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="openai")
    async_to_sync(run_execute)(trace_id=str(trace.pk), policy=policy, config=config, reflect=False)
    trace.refresh_from_db()
    return trace


def actions(trace: Trace) -> list[Step]:
    return list(trace.steps.filter(phase="action").order_by("step_number"))


# --- error handlers ----------------------------------------------------------------------


def test_retry_once_retries_with_the_transformed_input_and_keeps_the_failed_call(
    agent: Any, openai_server: Any
) -> None:
    # given one failing call and a handler that retries once, upper-casing the code
    OUTAGE["failures_left"] = 1
    policy = handler(on="INTERNAL_SERVER_ERROR", action="retry_once", transform={"code": "upper"})
    openai_server.enqueue(
        reason("flaky_lookup", {"code": "ab12"}), reflect(), answer("Code AB12 is on primary.")
    )
    # when
    trace = run(agent, "Look up code ab12", policy=policy)
    # then the failed call is on the record for Reflexion, and the retry is the observation
    assert CALLS == [("flaky_lookup", {"code": "ab12"}), ("flaky_lookup", {"code": "AB12"})]
    failed, retried = actions(trace)
    assert failed.details["auxiliary"] and failed.details["handled_by"] == 11
    assert (failed.ok, failed.error_type) == (False, "INTERNAL_SERVER_ERROR")
    assert retried.ok and retried.details["handler"] == "retry_once"
    # each step keeps the executor's result code (the failing tool raised: TOOL_ERROR)
    assert (failed.details["code"], retried.details["code"]) == ("TOOL_ERROR", "OK")
    assert "primary" in retried.response_summary
    assert {"id": 11, "kind": "error_handler"} in retried.strategies_applied
    assert trace.status == Trace.Status.FINISHED


def test_retry_once_whose_transformed_input_is_invalid_is_not_sent(
    agent: Any, openai_server: Any
) -> None:
    # given a handler whose transform turns the code into a number the schema refuses
    OUTAGE["failures_left"] = 1
    policy = handler(
        on="INTERNAL_SERVER_ERROR", action="retry_once", transform={"code": "digits_to_int"}
    )
    openai_server.enqueue(reason("flaky_lookup", {"code": "ab12"}), reflect(False, cause=RAISED))
    # when
    trace = run(agent, "Look up code ab12", policy=policy, config=_one_round())
    # then no second call went out, and the round's observation is the failure
    assert CALLS == [("flaky_lookup", {"code": "ab12"})]
    observed = actions(trace)[-1]
    assert not observed.ok
    assert (observed.details["handler"], observed.details["retry"]) == ("retry_once", "invalid")
    assert observed.error_type == "INTERNAL_SERVER_ERROR"


def test_call_tool_asks_the_other_tool_with_the_first_argument(
    agent: Any, openai_server: Any
) -> None:
    OUTAGE["failures_left"] = 1
    policy = handler(
        on="INTERNAL_SERVER_ERROR",
        action="call_tool",
        call="backup_lookup",
        input={"code": "$arg"},
    )
    openai_server.enqueue(
        reason("flaky_lookup", {"code": "ZX9"}), reflect(), answer("Code ZX9 is on the replica.")
    )
    trace = run(agent, "Look up code ZX9", policy=policy)
    assert CALLS == [("flaky_lookup", {"code": "ZX9"}), ("backup_lookup", {"code": "ZX9"})]
    observed = actions(trace)[-1]
    assert observed.ok and observed.details["handler"] == "call_tool"
    assert "replica" in observed.response_summary
    assert trace.status == Trace.Status.FINISHED


def test_call_tool_naming_a_tool_the_agent_may_not_call_keeps_the_failure(
    agent: Any, openai_server: Any
) -> None:
    OUTAGE["failures_left"] = 1
    policy = handler(
        on="INTERNAL_SERVER_ERROR", action="call_tool", call="drop_tables", input={"x": "$arg"}
    )
    openai_server.enqueue(reason("flaky_lookup", {"code": "ZX9"}), reflect(False, cause=RAISED))
    trace = run(agent, "Look up code ZX9", policy=policy, config=_one_round())
    assert CALLS == [("flaky_lookup", {"code": "ZX9"})]
    observed = actions(trace)[-1]
    assert not observed.ok and observed.details["call"] == "invalid"


def test_degrade_cache_with_nothing_cached_shows_the_model_the_error(
    agent: Any, openai_server: Any
) -> None:
    OUTAGE["failures_left"] = 1
    policy = handler(on="INTERNAL_SERVER_ERROR", action="degrade_cache")
    openai_server.enqueue(reason("flaky_lookup", {"code": "Q1"}), reflect(False, cause=RAISED))
    trace = run(agent, "Look up code Q1", policy=policy, config=_one_round())
    observed = actions(trace)[-1]
    assert not observed.ok and observed.error_type == "INTERNAL_SERVER_ERROR"
    assert observed.details["handler"] == "degrade_cache"
    assert observed.details["degraded"] is False
    assert not observed.response_summary.startswith("(cached")


def test_degrade_cache_serves_what_the_last_good_call_returned(
    agent: Any, openai_server: Any
) -> None:
    policy = handler(on="INTERNAL_SERVER_ERROR", action="degrade_cache")
    openai_server.enqueue(reason("flaky_lookup", {"code": "Q1"}), reflect(), answer("Q1: primary."))
    run(agent, "Look up code Q1", policy=policy)  # a good call fills the cache
    OUTAGE["failures_left"] = 1
    openai_server.enqueue(reason("flaky_lookup", {"code": "Q1"}), reflect(), answer("Q1: primary."))
    trace = run(agent, "Look up code Q1", policy=policy)
    observed = actions(trace)[-1]
    assert observed.ok and observed.details["degraded"] is True
    assert observed.status_code is None
    assert observed.response_summary.startswith("(cached, may be out of date)")


def test_a_handler_for_another_error_type_does_not_fire(agent: Any, openai_server: Any) -> None:
    OUTAGE["failures_left"] = 1
    policy = handler(on="TIMEOUT", action="retry_once")
    openai_server.enqueue(reason("flaky_lookup", {"code": "Q1"}), reflect(False, cause=RAISED))
    trace = run(agent, "Look up code Q1", policy=policy, config=_one_round())
    assert CALLS == [("flaky_lookup", {"code": "Q1"})]
    (observed,) = actions(trace)
    assert not observed.ok and "handler" not in observed.details


# --- model errors in the reflection phase ------------------------------------------------


def _one_round() -> RuntimeConfig:
    return RuntimeConfig(**{**runtime_config().__dict__, "max_iterations": 1})


def test_llm_error_while_reflecting_stops_the_run(agent: Any, openai_server: Any) -> None:
    openai_server.enqueue(reason("backup_lookup", {"code": "R2"}), ("status", 500))
    trace = run(agent, "Look up code R2")
    assert phases(trace) == ["reasoning", "action", "stopped"]
    stopped = trace.steps.get(phase="stopped")
    assert stopped.error_type == "LLM_ERROR"
    assert stopped.error_detail.startswith("reflection: ")
    assert (trace.status, trace.error_type) == (Trace.Status.FAILED, "LLM_ERROR")


def test_unusable_reflection_is_recorded_and_the_run_goes_on(
    agent: Any, openai_server: Any
) -> None:
    openai_server.enqueue(
        reason("backup_lookup", {"code": "R2"}),
        ("ok", "I reflect in prose, not JSON"),
        answer("Code R2 is on the replica."),
    )
    trace = run(agent, "Look up code R2")
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]
    reflection = trace.steps.get(phase="reflection")
    assert not reflection.ok and reflection.error_type == "MODEL_FORMAT_ERROR"
    assert reflection.error_detail.startswith("Reflection format error: ")
    assert reflection.response_summary == "(no usable reflection)"
    assert trace.status == Trace.Status.FINISHED


# --- the timeout-suspension breaker ------------------------------------------------------


def _earlier_timeouts(agent: Any, count: int, *, age: timedelta = timedelta(0)) -> None:
    earlier = trace_create(agent_id=agent.pk, query="earlier", llm_backend="openai")
    Step.objects.bulk_create(
        [
            Step(
                trace=earlier,
                step_number=i + 1,
                phase="action",
                tool_name="stalled_lookup",
                ok=False,
                error_type="TIMEOUT",
                started_at=timezone.now(),
            )
            for i in range(count)
        ]
    )
    Step.objects.filter(trace=earlier).update(created_at=timezone.now() - age)


def test_fourth_timeout_in_an_hour_does_not_suspend(agent: Any, openai_server: Any) -> None:
    # given three earlier timeouts within the hour (the breaker trips at five)
    _earlier_timeouts(agent, 3)
    openai_server.enqueue(reason("stalled_lookup", {}), reflect(False, cause=STALLED))
    # when the fourth times out
    trace = run(agent, "Be slow", config=_one_round())
    # then the tool stays in service
    assert [s.error_type for s in actions(trace)] == ["TIMEOUT"]
    tool = Tool.objects.get(name="stalled_lookup")
    assert not tool.is_suspended() and tool.suspended_until is None
    assert not ToolAlert.objects.filter(tool=tool).exists()


def test_timeouts_older_than_an_hour_do_not_count(agent: Any, openai_server: Any) -> None:
    _earlier_timeouts(agent, 10, age=timedelta(minutes=61))
    openai_server.enqueue(reason("stalled_lookup", {}), reflect(False, cause=STALLED))
    run(agent, "Be slow", config=_one_round())
    assert Tool.objects.get(name="stalled_lookup").suspended_until is None


def test_fifth_timeout_suspends_and_the_suspension_expires(
    agent: Any, openai_server: Any, settings: Any
) -> None:
    # given four earlier timeouts: the fifth suspends the tool for the configured time
    settings.AGENT_TOOL_SUSPEND_MINUTES = 30
    _earlier_timeouts(agent, 4)
    openai_server.enqueue(reason("stalled_lookup", {}), reflect(False, cause=STALLED))
    before = timezone.now()
    run(agent, "Be slow", config=_one_round())
    tool = Tool.objects.get(name="stalled_lookup")
    assert tool.suspended_until is not None
    assert (
        before + timedelta(minutes=29)
        < tool.suspended_until
        <= timezone.now() + timedelta(minutes=30)
    )
    assert tool_snapshots(agent_id=agent.pk)["stalled_lookup"].suspended
    # when the suspension time has passed (and the old timeouts left the hour)
    Tool.objects.filter(pk=tool.pk).update(suspended_until=timezone.now() - timedelta(seconds=1))
    Step.objects.filter(tool_name="stalled_lookup").update(
        created_at=timezone.now() - timedelta(hours=2)
    )
    # then the next run may call the tool again
    assert not tool_snapshots(agent_id=agent.pk)["stalled_lookup"].suspended
    openai_server.enqueue(reason("stalled_lookup", {}), reflect(False, cause=STALLED))
    trace = run(agent, "Be slow again", config=_one_round())
    assert [s.error_type for s in actions(trace)] == ["TIMEOUT"]


def test_suspending_a_suspended_tool_writes_no_second_alert(agent: Any) -> None:
    tool_suspend(name="stalled_lookup", minutes=5, timeouts=5)
    until = Tool.objects.get(name="stalled_lookup").suspended_until
    tool_suspend(name="stalled_lookup", minutes=60, timeouts=6)
    tool = Tool.objects.get(name="stalled_lookup")
    assert tool.suspended_until == until
    assert ToolAlert.objects.filter(tool=tool, kind="suspended").count() == 1


# --- resuming a run that died mid-round --------------------------------------------------


def _crashed_after(agent: Any, openai_server: Any, keep: int, *, policy: Any = None) -> Trace:
    """A run whose worker died after writing its first ``keep`` steps."""
    openai_server.enqueue(
        reason("flaky_lookup", {"code": "M7"}), reflect(), answer("Code M7 is on primary.")
    )
    trace = run(agent, "Look up code M7", policy=policy)
    trace.steps.filter(step_number__gt=keep).delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="", outcome="")
    openai_server.requests.clear()
    return trace


def test_a_run_that_died_executing_its_tool_resumes_from_the_recorded_decision(
    agent: Any, openai_server: Any
) -> None:
    # given a run that died while its tool call was in flight: only the reasoning is recorded
    trace = _crashed_after(agent, openai_server, keep=1)
    assert CALLS == [("flaky_lookup", {"code": "M7"})]
    # when it is delivered again
    openai_server.enqueue(reflect(), answer("Code M7 is on primary."))
    from agents.services import run_execute

    async_to_sync(run_execute)(trace_id=str(trace.pk), reflect=False)
    trace.refresh_from_db()
    # then the decision is not asked for again: the unrecorded call is made (at least once)
    # and the run goes on from there with unbroken step numbers
    assert CALLS == [("flaky_lookup", {"code": "M7"})] * 2
    assert len(openai_server.requests) == 2  # the reflection and the final reasoning
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]
    numbers = list(trace.steps.order_by("step_number").values_list("step_number", flat=True))
    assert numbers == [1, 2, 3, 4, 5]
    assert trace.status == Trace.Status.FINISHED


def test_a_run_that_died_processing_a_handled_failure_resumes_and_calls_again(
    agent: Any, openai_server: Any
) -> None:
    # given a run that died after its error handler recorded the failed call, before the
    # handler's own call was recorded
    OUTAGE["failures_left"] = 1
    policy = handler(on="INTERNAL_SERVER_ERROR", action="retry_once")
    trace = _crashed_after(agent, openai_server, keep=2, policy=policy)
    assert trace.steps.get(step_number=2).details["auxiliary"]
    # when it is delivered again (the outage is over)
    openai_server.enqueue(reflect(), answer("Code M7 is on primary."))
    from agents.services import run_execute

    async_to_sync(run_execute)(trace_id=str(trace.pk), policy=policy, reflect=False)
    trace.refresh_from_db()
    # then the call is validated and made again, after the recorded failure
    steps = list(trace.steps.order_by("step_number"))
    assert [s.phase for s in steps] == [
        "reasoning",
        "action",
        "action",
        "reflection",
        "reasoning",
        "final",
    ]
    assert not steps[1].ok and steps[2].ok and "handler" not in steps[2].details
    assert trace.status == Trace.Status.FINISHED


def test_a_redelivery_that_finds_the_call_recorded_meanwhile_does_not_repeat_it(
    agent: Any, openai_server: Any
) -> None:
    # given delivery A recorded the tool call after delivery B had loaded the steps
    trace = _crashed_after(agent, openai_server, keep=2)
    loaded_by_b = list(trace.steps.filter(step_number=1))
    assert CALLS == [("flaky_lookup", {"code": "M7"})]
    # when B carries on from what it loaded (its next free step number is after A's)
    openai_server.enqueue(reflect(), answer("Code M7 is on primary."))
    trace.refresh_from_db()

    async def deliver_b() -> RunOutcome:
        return await _react(
            trace,
            await _snapshots(agent),
            loaded_by_b,
            RunSink(trace_id=str(trace.pk), next_step_number=3),
            llm_client_build(backend="openai"),
            await _rules(),
            runtime_config(),
            RuntimePolicy(),
        )

    outcome = async_to_sync(deliver_b)()
    # then B took the recorded result instead of calling the tool a second time
    assert CALLS == [("flaky_lookup", {"code": "M7"})]
    assert outcome.status == "finished"
    assert phases(trace) == ["reasoning", "action", "reflection", "reasoning", "final"]


async def _snapshots(agent: Any) -> Any:
    from asgiref.sync import sync_to_async

    return await sync_to_async(tool_snapshots)(agent_id=agent.pk)


async def _rules() -> Any:
    return await error_rules_aload()
