"""Trace.outcome: set when a run ends, consistent with the status, shown and filterable."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from traces.models import Step, Trace
from traces.services import trace_abort, trace_create, trace_finish

Outcome = Trace.Outcome


@pytest.fixture
def trace(support_agent: Any) -> Trace:
    return trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")


def add_tool_step(trace: Trace, *, ok: bool) -> None:
    Step.objects.create(
        trace=trace,
        step_number=trace.steps.count() + 1,
        phase="action",
        action_type="tool",
        ok=ok,
        started_at=timezone.now(),
    )


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (Outcome.ANSWERED_FROM_DATA, Trace.Status.FINISHED),
        (Outcome.ANSWERED_WITHOUT_DATA, Trace.Status.FINISHED),
        (Outcome.ASKED_CUSTOMER, Trace.Status.FINISHED),
        (Outcome.HANDED_OVER, Trace.Status.FALLBACK),
        (Outcome.FAILED, Trace.Status.FAILED),
    ],
)
def test_the_outcome_decides_the_status(trace: Trace, outcome: str, status: str) -> None:
    # given a caller that claims success whatever happened
    finished = trace_finish(
        trace_id=str(trace.pk), status="finished", final_answer="a", outcome=outcome
    )
    trace.refresh_from_db()
    assert (finished.status, finished.outcome) == (status, outcome)
    assert (trace.status, trace.outcome) == (status, outcome)


@pytest.mark.parametrize(
    ("status", "tool_ok", "outcome"),
    [
        (Trace.Status.FINISHED, True, Outcome.ANSWERED_FROM_DATA),
        (Trace.Status.FINISHED, False, Outcome.ANSWERED_WITHOUT_DATA),
        (Trace.Status.FALLBACK, True, Outcome.HANDED_OVER),
        (Trace.Status.FAILED, True, Outcome.FAILED),
    ],
)
def test_without_an_outcome_one_is_derived_from_status_and_steps(
    trace: Trace, status: str, tool_ok: bool, outcome: str
) -> None:
    add_tool_step(trace, ok=tool_ok)
    trace_finish(trace_id=str(trace.pk), status=status, final_answer="a")
    trace.refresh_from_db()
    assert (trace.status, trace.outcome) == (status, outcome)


def test_an_aborted_run_failed(trace: Trace, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="traces.services")
    trace_abort(trace_id=str(trace.pk), error_type="UNKNOWN", detail="boom")
    trace.refresh_from_db()
    assert (trace.status, trace.outcome, trace.error_type) == ("failed", "failed", "UNKNOWN")
    # the abort asks for the status its outcome implies: nothing had to be corrected
    assert "trace.status_follows_outcome" not in [r.getMessage() for r in caplog.records]


def test_a_running_trace_has_no_outcome(trace: Trace) -> None:
    assert trace.outcome == ""


def test_api_shows_and_filters_by_outcome(support_agent: Any, ops_user: Any) -> None:
    ops = ops_user
    asked = trace_create(agent_id=support_agent.pk, query="a", llm_backend="simulated")
    failed = trace_create(agent_id=support_agent.pk, query="b", llm_backend="simulated")
    running = trace_create(agent_id=support_agent.pk, query="c", llm_backend="simulated")
    trace_finish(
        trace_id=str(asked.pk), status="finished", final_answer="?", outcome="asked_customer"
    )
    trace_finish(trace_id=str(failed.pk), status="failed", final_answer="x", outcome="failed")
    client = APIClient()
    client.force_authenticate(ops)
    listed = {t["id"]: t["outcome"] for t in client.get("/api/traces/").json()["results"]}
    only_asked = client.get("/api/traces/?outcome=asked_customer").json()["results"]
    assert listed == {
        str(asked.pk): "asked_customer",
        str(failed.pk): "failed",
        str(running.pk): "",
    }
    assert [t["id"] for t in only_asked] == [str(asked.pk)]
    assert client.get(f"/api/traces/{failed.pk}/").json()["outcome"] == "failed"


def test_schema_allows_a_blank_outcome_while_running() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    outcome = schema["components"]["schemas"]["Trace"]["properties"]["outcome"]
    refs = {ref["$ref"].rsplit("/", 1)[1] for ref in outcome["oneOf"]}
    assert refs == {"OutcomeEnum", "BlankEnum"}
    assert set(schema["components"]["schemas"]["OutcomeEnum"]["enum"]) == set(Outcome.values)


def test_trace_list_page_shows_and_filters_by_outcome(
    client: Any, support_agent: Any, django_user_model: Any
) -> None:
    admin = django_user_model.objects.create_superuser("root", password="x" * 10)
    asked = trace_create(agent_id=support_agent.pk, query="where is it", llm_backend="simulated")
    other = trace_create(agent_id=support_agent.pk, query="hello", llm_backend="simulated")
    trace_finish(
        trace_id=str(asked.pk), status="finished", final_answer="?", outcome="asked_customer"
    )
    trace_finish(trace_id=str(other.pk), status="finished", final_answer="hi")
    client.force_login(admin)
    page = client.get("/traces/?outcome=asked_customer").content.decode()
    detail = client.get(f"/traces/{asked.pk}/").content.decode()
    assert "Asked the customer for information" in page
    assert "where is it" in page
    assert "hello" not in page
    assert "Asked the customer for information" in detail


def test_admin_lists_and_filters_outcome() -> None:
    from django.contrib import admin

    model_admin = admin.site._registry[Trace]
    assert "outcome" in model_admin.list_display
    assert "outcome" in model_admin.list_filter


def test_the_migration_backfills_ended_runs(support_agent: Any) -> None:
    import importlib

    from django.apps import apps

    backfill = importlib.import_module("traces.migrations.0004_trace_outcome").backfill_outcomes
    made = {}
    for name, status, tool_ok in [
        ("data", "finished", True),
        ("nodata", "finished", False),
        ("fallback", "fallback", False),
        ("failed", "failed", True),
        ("running", "running", False),
    ]:
        trace = trace_create(agent_id=support_agent.pk, query=name, llm_backend="simulated")
        add_tool_step(trace, ok=tool_ok)
        made[name] = trace.pk
        Trace.objects.filter(pk=trace.pk).update(status=status, outcome="")
    backfill(apps, None)
    outcomes = {name: Trace.objects.get(pk=pk).outcome for name, pk in made.items()}
    assert outcomes == {
        "data": "answered_from_data",
        "nodata": "answered_without_data",
        "fallback": "handed_over",
        "failed": "failed",
        "running": "",
    }
