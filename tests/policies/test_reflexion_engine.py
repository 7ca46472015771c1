"""The Reflexion engine end to end: what reaches it, the quality gates inside it, the LLM
reflexion failing, and the jobs that run it (in process and on a real Celery worker).

The model is the fake OpenAI server (real HTTP); nothing here depends on the simulated
reflexion's script.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.cache import cache
from django.utils import timezone

from config.celery import app as celery_app
from policies import tasks
from policies.models import ReflexionProposal, Strategy
from policies.reflexion import (
    NOT_LEARNABLE,
    Proposal,
    failures_of_trace,
    quality_gates,
    reflexion_run,
    trace_needs_reflexion,
)
from reviews.models import ReviewItem
from tests.agents.runtime_helpers import use_fake_llm
from tests.fakes.openai_server import FakeOpenAIServer
from traces.models import Job, Step, Trace
from traces.services import trace_create

API_KEY = "sk-proj-Zq8V3xN1pL5mR7tY9wB2cD4fG6hJ"


@pytest.fixture
def model(settings: Any, openai_server: FakeOpenAIServer) -> FakeOpenAIServer:
    use_fake_llm(settings, openai_server)
    settings.LLM_API_KEY = API_KEY
    return openai_server


def _unexplained(failed_trace: Any) -> Trace:
    """A failure no deterministic analyzer explains: a well-formed SKU that is not found."""
    return failed_trace(
        tool="check_inventory",
        action_input={"sku": "ZZZ-0000-XX"},
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
    )


def _answer(**overrides: Any) -> tuple[str, str]:
    output: dict[str, Any] = {
        "root_cause": "check_inventory got an unknown sku ZZZ-0000-XX",
        "strategy_update": "Search products for the sku before calling check_inventory",
        "kind": "prompt_hint",
        "branch": {"text": "Search products first.", "error_type": "RESOURCE_NOT_FOUND"},
        "cited_trace_ids": [],
        "cited_fields": ["error_type", "tool"],
    }
    output.update(overrides)
    return ("ok", json.dumps(output))


def _nothing_learned() -> None:
    assert not Strategy.objects.exists()
    assert not ReviewItem.objects.exists()
    assert not Job.objects.filter(kind=Job.Kind.REPLAY).exists()


# --- quality gates inside the engine ---------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {
                "kind": "error_handler",
                "branch": {
                    "tool": "check_inventory",
                    "on": "RESOURCE_NOT_FOUND",
                    "action": "call_tool",
                    "call": "nuke_db",
                    "input": {"q": "$arg"},
                },
            },
            "actionable: names unknown tools: nuke_db",
        ),
        (
            {"cited_fields": ["customer_password"]},
            "facts_anchored: cites fields not in the trace: customer_password",
        ),
        (
            {"cited_trace_ids": ["00000000-0000-0000-0000-000000000000"]},
            "history_real: cites trace ids that do not exist",
        ),
        (
            {"strategy_update": "Retry check_inventory twice before answering"},
            "constraints: a retry storm: at most 1 retry",
        ),
    ],
    ids=["actionable", "facts_anchored", "history_real", "constraints"],
)
def test_a_proposal_failing_a_gate_is_recorded_as_rejected_and_never_replayed(
    model: FakeOpenAIServer, failed_trace: Any, overrides: dict[str, Any], reason: str
) -> None:
    model.enqueue(_answer(**overrides))
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    assert record.reason == reason
    gate = reason.split(":", 1)[0]
    assert set(record.gate_results) == {
        "facts_anchored",
        "actionable",
        "constraints",
        "history_real",
    }
    assert [name for name, why in record.gate_results.items() if why] == [gate]
    assert record.origin == "llm:openai"
    assert record.payload["kind"] == json.loads(_answer(**overrides)[1])["kind"]
    assert record.error_signature == "RESOURCE_NOT_FOUND|check_inventory"
    assert len(model.requests) == 1
    _nothing_learned()


@pytest.mark.django_db
def test_every_failed_gate_is_named_in_the_rejection(
    model: FakeOpenAIServer, failed_trace: Any
) -> None:
    model.enqueue(
        _answer(
            cited_fields=["password"],
            cited_trace_ids=["not-a-uuid"],
            strategy_update="Try again until it works",
        )
    )
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    assert record.reason == (
        "facts_anchored: cites fields not in the trace: password; "
        "constraints: a retry storm: at most 1 retry; "
        "history_real: cites trace ids that do not exist"
    )
    _nothing_learned()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {
                "kind": "error_handler",
                "branch": {
                    "tool": "check_inventory",
                    "on": "RESOURCE_NOT_FOUND",
                    "action": "retry_once",
                    "max_retries": 2,
                },
            },
            "actionable: does not compile: at most 1 retry is allowed; "
            "constraints: more than 1 retry",
        ),
        (
            {"branch": {"text": "Retry the lookup 3 times.", "error_type": "RESOURCE_NOT_FOUND"}},
            "constraints: a retry storm: at most 1 retry",
        ),
        (
            {"strategy_update": "Retry check_inventory repeatedly"},
            "constraints: a retry storm: at most 1 retry",
        ),
    ],
    ids=["max_retries", "hint-text", "repeatedly"],
)
def test_the_engine_refuses_a_retry_storm(
    model: FakeOpenAIServer, failed_trace: Any, overrides: dict[str, Any], reason: str
) -> None:
    model.enqueue(_answer(**overrides))
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    assert (record.outcome, record.reason) == ("rejected", reason)
    _nothing_learned()


def _gate_facts(failed_trace: Any, error_type: str = "RESOURCE_NOT_FOUND") -> Any:
    [facts] = failures_of_trace(
        failed_trace(
            tool="check_inventory",
            action_input={"sku": "ZZZ-0000-XX"},
            status_code=500 if error_type == "INTERNAL_SERVER_ERROR" else 404,
            error_type=error_type,
        )
    )
    return facts


def _handler(on: str, action: str, **extra: Any) -> Proposal:
    branch = {"tool": "check_inventory", "on": on, "action": action, **extra}
    if action == "call_tool":
        branch |= {"call": "search_products", "input": {"query": "$arg"}}
    return Proposal(
        kind="error_handler",
        branch=branch,
        root_cause="check_inventory upstream failed",
        strategy_update="Handle the check_inventory failure",
        origin="test",
        cited_fields=["error_type"],
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("on", "action", "extra", "refused"),
    [
        ("INTERNAL_SERVER_ERROR", "retry_once", {}, "a 500 must degrade to cache or a human"),
        ("INTERNAL_SERVER_ERROR", "call_tool", {}, "a 500 must degrade to cache or a human"),
        ("INTERNAL_SERVER_ERROR", "degrade_cache", {}, ""),
        ("INTERNAL_SERVER_ERROR", "handover", {}, ""),
        ("TIMEOUT", "retry_once", {}, ""),
        ("TIMEOUT", "retry_once", {"max_retries": 1}, ""),
        ("TIMEOUT", "retry_once", {"max_retries": 2}, "more than 1 retry"),
    ],
)
def test_the_retry_gate_allows_one_retry_and_never_on_a_500(
    failed_trace: Any, on: str, action: str, extra: dict[str, Any], refused: str
) -> None:
    facts = _gate_facts(failed_trace, on)

    verdict = quality_gates(_handler(on, action, **extra), facts)["constraints"]

    assert verdict.startswith(refused) and bool(verdict) == bool(refused)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "storm"),
    [
        ("Retry once with the SKU code", False),
        ("Try again once the customer confirms", False),
        ("Retry at most 1 time", False),
        ("Retry 2 times", True),
        ("retry twice", True),
        ("Retry three times", True),
        ("retry 10 times", True),
        ("Try again until it answers", True),
        ("retry repeatedly", True),
    ],
)
def test_the_retry_gate_reads_the_hint_text(failed_trace: Any, text: str, storm: bool) -> None:
    facts = _gate_facts(failed_trace)
    hint = Proposal(
        kind="prompt_hint",
        branch={"text": text},
        root_cause="check_inventory failed",
        strategy_update="Use the hint",
        origin="test",
        cited_fields=["error_type"],
    )

    verdict = quality_gates(hint, facts)["constraints"]

    assert verdict == ("a retry storm: at most 1 retry" if storm else "")


# --- the LLM reflexion failing ---------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("step", "reason_start"),
    [
        (("status", 500), "LLM reflexion failed: "),
        (("echo_key", 401), "LLM reflexion failed: "),
        (("ok", "I think the sku was wrong."), "unparseable reflexion output: "),
        (("ok", json.dumps({"root_cause": "x"})), "unparseable reflexion output: "),
    ],
    ids=["server-error", "rejected-key-echoed", "prose", "incomplete"],
)
def test_a_failed_llm_reflexion_is_recorded_as_rejected_without_a_proposal(
    model: FakeOpenAIServer, failed_trace: Any, step: tuple[Any, ...], reason_start: str
) -> None:
    model.enqueue(step)
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    assert record.reason.startswith(reason_start), record.reason
    assert (record.origin, record.payload, record.gate_results) == ("none", {}, {})
    assert API_KEY not in record.reason
    _nothing_learned()
    # the batch job still finished and says what happened
    job = Job.objects.get(kind=Job.Kind.REFLEXION)
    assert (job.status, job.message) == ("finished", "RESOURCE_NOT_FOUND|check_inventory: rejected")


@pytest.mark.django_db
def test_a_fenced_json_answer_is_read(model: FakeOpenAIServer, failed_trace: Any) -> None:
    fenced = "```json\n" + _answer(cited_fields=["password"])[1] + "\n```"
    model.enqueue(("ok", fenced))
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    # parsed (it reached the gates), not refused as unparseable
    assert record.reason.startswith("facts_anchored: cites fields not in the trace")
    # and the call's connection is closed with the loop it ran on
    assert model.connections_closed()


# --- what reaches Reflexion --------------------------------------------------------------
def _trace_with_steps(support_agent: Any, *failures: tuple[str, str], status: str) -> Trace:
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    for number, (tool, error_type) in enumerate(failures, 1):
        Step.objects.create(
            trace=trace,
            step_number=number,
            phase="action",
            action_type="tool",
            tool_name=tool,
            action_input={"sku": "ZZZ-0000-XX"},
            status_code=404,
            ok=False,
            error_type=error_type,
            started_at=timezone.now(),
        )
    Trace.objects.filter(pk=trace.pk).update(status=status)
    trace.refresh_from_db()
    return trace


@pytest.mark.django_db
@pytest.mark.parametrize("error_type", sorted(NOT_LEARNABLE))
def test_failures_the_runtime_ends_on_never_reach_reflexion(
    model: FakeOpenAIServer, support_agent: Any, error_type: str
) -> None:
    trace = _trace_with_steps(support_agent, ("check_inventory", error_type), status="failed")

    assert failures_of_trace(trace) == []
    assert not trace_needs_reflexion(trace)
    assert reflexion_run(trace_id=str(trace.pk), auto_approve=True) == []
    assert not model.requests and not ReflexionProposal.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_only_the_learnable_failures_of_a_run_reach_reflexion_once_per_signature(
    support_agent: Any,
) -> None:
    trace = _trace_with_steps(
        support_agent,
        ("check_inventory", "LLM_ERROR"),
        ("check_inventory", "RESOURCE_NOT_FOUND"),
        ("get_sku_price", "TOOL_SUSPENDED"),
        ("check_inventory", "RESOURCE_NOT_FOUND"),
        ("get_sku_price", "RESOURCE_NOT_FOUND"),
        status="failed",
    )

    facts = failures_of_trace(trace)

    assert [(f.step_number, f.signature) for f in facts] == [
        (2, "RESOURCE_NOT_FOUND|check_inventory"),
        (5, "RESOURCE_NOT_FOUND|get_sku_price"),
    ]
    assert trace_needs_reflexion(trace)


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["queued", "running"])
def test_an_unfinished_run_is_not_reflected_on(
    model: FakeOpenAIServer, support_agent: Any, status: str
) -> None:
    # given a run still going (its failure may yet be recovered from)
    assert status in Trace.Status.values
    trace = _trace_with_steps(
        support_agent, ("check_inventory", "RESOURCE_NOT_FOUND"), status=status
    )
    assert not trace.is_terminal

    assert reflexion_run(trace_id=str(trace.pk), auto_approve=True) == []
    assert not model.requests and not ReflexionProposal.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_replay_run_and_a_missing_run_are_not_reflected_on(
    model: FakeOpenAIServer, support_agent: Any
) -> None:
    trace = _trace_with_steps(
        support_agent, ("check_inventory", "RESOURCE_NOT_FOUND"), status="failed"
    )
    Trace.objects.filter(pk=trace.pk).update(source="replay")
    trace.refresh_from_db()

    assert not trace_needs_reflexion(trace)
    assert reflexion_run(trace_id=str(trace.pk)) == []
    assert reflexion_run(trace_id="00000000-0000-0000-0000-000000000000") == []
    assert not model.requests and not ReflexionProposal.objects.exists()


# --- the jobs that run it ---------------------------------------------------------------
@pytest.fixture
def reflexion_on(settings: Any) -> Iterator[Any]:
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 30
    cache.delete_many([f"reflexion:RESOURCE_NOT_FOUND|{t}" for t in ("check_inventory",)])
    yield settings
    cache.delete_many([f"reflexion:RESOURCE_NOT_FOUND|{t}" for t in ("check_inventory",)])


@pytest.mark.django_db(transaction=True)
def test_enqueue_runs_reflexion_in_process_once_per_signature_window(
    model: FakeOpenAIServer, failed_trace: Any, reflexion_on: Any
) -> None:
    reflexion_on.AGENT_EXECUTOR = "inprocess"
    model.enqueue(_answer(cited_fields=["password"]))
    first, second = _unexplained(failed_trace), _unexplained(failed_trace)

    assert tasks.reflexion_enqueue(trace_id=str(first.pk)) is True
    # the same error signature again within the window is debounced
    assert tasks.reflexion_enqueue(trace_id=str(second.pk)) is False
    assert tasks.reflexion_inprocess_drain() == 1

    [record] = ReflexionProposal.objects.all()
    assert record.trace_id == first.pk and record.outcome == "rejected"
    assert len(model.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_refuses_what_needs_no_reflexion(
    model: FakeOpenAIServer, failed_trace: Any, support_agent: Any, reflexion_on: Any
) -> None:
    reflexion_on.AGENT_EXECUTOR = "inprocess"
    learnable = _unexplained(failed_trace)
    unlearnable = _trace_with_steps(
        support_agent, ("check_inventory", "RUN_TIME_LIMIT"), status="failed"
    )

    assert tasks.reflexion_enqueue(trace_id="00000000-0000-0000-0000-000000000000") is False
    assert tasks.reflexion_enqueue(trace_id=str(unlearnable.pk)) is False
    reflexion_on.REFLEXION_ENABLED = False
    assert tasks.reflexion_enqueue(trace_id=str(learnable.pk)) is False
    assert tasks.reflexion_inprocess_drain() == 0
    assert not model.requests


@pytest.mark.django_db(transaction=True)
def test_a_crashing_in_process_job_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="policies.tasks"):
        tasks._inprocess.submit(tasks._reflect_inprocess, "not-a-uuid").result(timeout=30)

    [crash] = [r for r in caplog.records if r.getMessage() == "reflexion.crashed"]
    assert crash.trace_id == "not-a-uuid"  # type: ignore[attr-defined]
    assert crash.exc_info is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.celery_worker
def test_enqueue_sends_reflexion_to_a_celery_worker(
    model: FakeOpenAIServer, failed_trace: Any, reflexion_on: Any
) -> None:
    reflexion_on.AGENT_EXECUTOR = "celery"
    model.enqueue(_answer(cited_fields=["password"]))
    trace = _unexplained(failed_trace)
    assert celery_app.conf.broker_url.startswith("redis://")

    with start_worker(
        celery_app,
        pool="threads",
        concurrency=1,
        queues=["reflexion"],
        perform_ping_check=False,
        shutdown_timeout=30,
    ):
        assert tasks.reflexion_enqueue(trace_id=str(trace.pk)) is True
        deadline = time.monotonic() + 60
        while not ReflexionProposal.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the rows the worker writes

    [record] = ReflexionProposal.objects.all()
    assert record.trace_id == trace.pk and record.outcome == "rejected"
    assert record.reason.startswith("facts_anchored: ")


@pytest.mark.django_db
def test_the_reflexion_request_constrains_branch_tools_to_the_registered_names(
    model: FakeOpenAIServer, failed_trace: Any
) -> None:
    from agents.models import Tool

    model.enqueue(_answer())
    trace = _unexplained(failed_trace)

    reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    [request] = model.requests
    schema = request.json["response_format"]["json_schema"]["schema"]
    tool_enums = [
        shape["properties"]["tool"]["enum"]
        for shape in schema["properties"]["branch"]["anyOf"]
        if "tool" in shape["properties"]
    ]
    names = sorted(Tool.objects.values_list("name", flat=True))
    assert names and tool_enums and all(enum == names for enum in tool_enums)


def test_a_gate_quoting_a_secret_the_model_cited_stores_it_redacted(
    model: FakeOpenAIServer, failed_trace: Any
) -> None:
    model.enqueue(_answer(cited_fields=["password=hunter2secret"]))
    trace = _unexplained(failed_trace)

    [record] = reflexion_run(trace_id=str(trace.pk), auto_approve=True)

    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    assert "hunter2secret" not in json.dumps(record.gate_results) + record.reason
    assert record.gate_results["facts_anchored"].endswith("password=[REDACTED]")
