"""Runs ingested over OTLP are learned from like native ones, off the exporter's request:
the request hands its ended runs to the worker in one task, and the worker scores them and
queues Reflexion."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from policies import tasks
from policies.models import ReflexionProposal
from tests.traces.test_otlp_ingest import _agent_trace
from traces.models import Trace
from traces.otlp import external_runs_ended, otlp_spans_from_protobuf, otlp_spans_ingest


def _export_body(count: int) -> tuple[bytes, list[str]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "helpdesk"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    ids = [_agent_trace(provider.get_tracer("t")) for _ in range(count)]
    return encode_spans(memory.get_finished_spans()).SerializeToString(), ids


pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def learning(error_rules: None, settings: Any) -> None:
    """Reflexion on (the test settings switch it off), every failure reflected on."""
    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 0


def test_an_export_request_hands_its_ended_runs_off_once_and_the_worker_reflects(
    learning: None,
) -> None:
    handed: list[list[str]] = []

    def remember(sender: Any, *, trace_ids: list[str], **_: Any) -> None:
        handed.append(list(trace_ids))

    body, ids = _export_body(3)
    external_runs_ended.connect(remember)
    try:
        result = otlp_spans_ingest(otlp_spans_from_protobuf(body), user_id=None)
    finally:
        external_runs_ended.disconnect(remember)
    assert result.accepted == 6
    # One hand-off for the whole request, naming every run that ended in it.
    assert len(handed) == 1 and sorted(handed[0]) == sorted(ids)

    tasks.reflexion_inprocess_drain(timeout=120)
    for trace_id in ids:
        assert Trace.objects.get(pk=trace_id).status == Trace.Status.FAILED
        assert ReflexionProposal.objects.filter(trace_id=trace_id).exists(), trace_id
    # Their agent runs elsewhere (an "anthropic" provider this installation cannot even
    # build): the analysis is kept, but no replay here could verify a strategy for it, and
    # after two such failures on one signature the negative-feedback guard stops.
    outcomes = list(
        ReflexionProposal.objects.filter(trace_id__in=ids).values_list("outcome", "reason")
    )
    rejected = [reason for outcome, reason in outcomes if outcome == "rejected"]
    assert rejected and all("ingested over OTLP" in reason for reason in rejected)
    assert {outcome for outcome, _ in outcomes} <= {"rejected", "stopped"}


def ingest_without_hand_off(body: bytes) -> None:
    """Ingest ``body`` as if the request's hand-off were lost (the learning loop's receiver
    of ``external_runs_ended`` disconnected meanwhile)."""
    from policies.apps import _external_runs_ended

    external_runs_ended.disconnect(dispatch_uid="policies.external_runs")
    try:
        otlp_spans_ingest(otlp_spans_from_protobuf(body), user_id=None)
    finally:
        external_runs_ended.connect(_external_runs_ended, dispatch_uid="policies.external_runs")


def test_one_run_failing_to_learn_does_not_stop_the_others(learning: None) -> None:
    body, ids = _export_body(2)
    ingest_without_hand_off(body)
    missing = "00000000-0000-0000-0000-000000000000"
    tasks.external_runs_learn([missing, *ids])
    tasks.reflexion_inprocess_drain(timeout=120)
    for trace_id in ids:
        assert ReflexionProposal.objects.filter(trace_id=trace_id).exists(), trace_id
