"""Failures the runtime itself ends on (the model unreachable, a time limit, a suspended
tool, a crash) never reach Reflexion: no branch of a policy could fix them, and learning
from them would fill the review queue with noise.

Runs go through the real runtime (scripted model over the OpenAI wire protocol, real
in-process tools) and hand their ending to Reflexion as in production; a Reflexion job is
a message on the ``reflexion`` queue of a broker of the test's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.utils import timezone

from agents.models import Tool
from agents.services import run_execute
from policies.reflexion import NOT_LEARNABLE, failures_of_trace, trace_needs_reflexion
from tests.agents.runtime_helpers import (
    declared_tool,
    reason,
    tools_registered,
    use_fake_llm,
)
from tests.celery_process import broker_fixture  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture  # noqa: F401
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string"}},
    "required": ["code"],
    "additionalProperties": False,
}


@declared_tool(name="code_lookup", description="Test tool: a code's record.", params_schema=SCHEMA)
def code_lookup(*, code: str) -> dict[str, str]:
    return {"code": code}


@declared_tool(name="broken_lookup", description="Test tool that raises.", params_schema=SCHEMA)
def broken_lookup(*, code: str) -> dict[str, str]:
    raise RuntimeError("upstream said no")


@pytest.fixture
def agent(
    support_agent: Any,
    error_rules: None,
    settings: Any,
    openai_server: Any,
    broker: RedisServer,
) -> Iterator[Any]:
    from agents.services import tools_sync

    use_fake_llm(settings, openai_server)
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 0
    with tools_registered(code_lookup, broken_lookup):
        tools_sync(agents=[support_agent])
        yield support_agent


def reflexion_jobs(broker: RedisServer) -> int:
    return int(redis.Redis(port=broker.port).llen("reflexion"))


def run(agent: Any, query: str) -> Trace:
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend="openai")
    async_to_sync(run_execute)(trace_id=str(trace.pk))  # reflect=True: as in production
    trace.refresh_from_db()
    return trace


def test_a_run_that_lost_its_model_is_not_learned_from(
    agent: Any, openai_server: Any, broker: RedisServer
) -> None:
    openai_server.enqueue(reason("code_lookup", {"code": "A1"}), ("status", 500))
    trace = run(agent, "Look up code A1")
    assert trace.error_type == "LLM_ERROR"
    assert not trace_needs_reflexion(trace) and failures_of_trace(trace) == []
    assert reflexion_jobs(broker) == 0


def test_a_call_of_a_suspended_tool_is_not_learned_from(
    agent: Any, openai_server: Any, broker: RedisServer
) -> None:
    Tool.objects.filter(name="code_lookup").update(
        suspended_until=timezone.now() + timedelta(minutes=30)
    )
    openai_server.enqueue(reason("code_lookup", {"code": "A1"}), ("status", 500))
    trace = run(agent, "Look up code A1")
    errors = set(trace.steps.filter(ok=False).values_list("error_type", flat=True))
    assert errors == {"TOOL_SUSPENDED", "LLM_ERROR"}
    assert failures_of_trace(trace) == []
    assert reflexion_jobs(broker) == 0


def test_a_learnable_failure_in_the_same_kind_of_run_is_learned_from(
    agent: Any, openai_server: Any, broker: RedisServer
) -> None:
    # the contrast that keeps the two tests above honest: the same path does queue a job
    openai_server.enqueue(reason("broken_lookup", {"code": "A1"}), ("status", 500))
    trace = run(agent, "Look up code A1")
    facts = failures_of_trace(trace)
    assert [f.error_type for f in facts] == ["INTERNAL_SERVER_ERROR"]
    assert reflexion_jobs(broker) == 1


def test_only_the_learnable_failures_of_a_mixed_trace_are_kept(agent: Any) -> None:
    trace = trace_create(agent_id=agent.pk, query="q", llm_backend="openai")
    errors = [*sorted(NOT_LEARNABLE), "TYPE_MISMATCH"]
    for number, error_type in enumerate(errors, start=1):
        Step.objects.create(
            trace=trace,
            step_number=number,
            phase="action",
            action_type="tool",
            tool_name="code_lookup",
            action_input={"code": str(number)},
            ok=False,
            error_type=error_type,
            started_at=timezone.now(),
        )
    assert [f.error_type for f in failures_of_trace(trace)] == ["TYPE_MISMATCH"]
    assert trace_needs_reflexion(trace)
    Step.objects.filter(error_type="TYPE_MISMATCH").delete()
    assert not trace_needs_reflexion(trace)
    assert {"LLM_ERROR", "RUN_TIME_LIMIT", "TOOL_SUSPENDED", "UNKNOWN"} <= NOT_LEARNABLE
