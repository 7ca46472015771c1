"""A run ingested over OTLP is analysed, never replayed, and kept apart from what this
installation learned: an agent elsewhere whose tool shares a name (get_order) must neither
stop nor move the learning of this installation's own failures."""

from __future__ import annotations

from typing import Any

import pytest

from policies.models import ReflexionProposal
from traces.otlp import otlp_spans_ingest

pytestmark = pytest.mark.django_db


def _failing_get_order_export() -> bytes:
    """An agent elsewhere whose tool happens to be called get_order, failing with a 400 that
    names a type mismatch: the same error signature as a native failure of get_order."""
    import json
    import secrets

    def attr(key: str, value: Any) -> dict[str, Any]:
        if isinstance(value, int):
            return {"key": key, "value": {"intValue": str(value)}}
        return {"key": key, "value": {"stringValue": value}}

    trace_id, root, tool = secrets.token_hex(16), secrets.token_hex(8), secrets.token_hex(8)
    spans = [
        {
            "traceId": trace_id,
            "spanId": root,
            "name": "invoke_agent helpdesk",
            "startTimeUnixNano": "1000000000",
            "endTimeUnixNano": "3000000000",
            "attributes": [
                attr("gen_ai.operation.name", "invoke_agent"),
                attr("gen_ai.agent.name", "helpdesk"),
            ],
            "status": {"code": 2},
        },
        {
            "traceId": trace_id,
            "spanId": tool,
            "parentSpanId": root,
            "name": "execute_tool get_order",
            "startTimeUnixNano": "1100000000",
            "endTimeUnixNano": "1200000000",
            "attributes": [
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", "get_order"),
                attr("gen_ai.tool.call.arguments", json.dumps({"order_id": "#W1000001"})),
                attr("http.response.status_code", 400),
                attr(
                    "gen_ai.tool.call.result",
                    '{"error": "type_mismatch", "expected_type": "integer"}',
                ),
            ],
            "status": {"code": 2},
        },
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def _ingest_and_reflect() -> list[ReflexionProposal]:
    from policies.reflexion import reflexion_run
    from traces.otlp import otlp_spans_from_json

    result = otlp_spans_ingest(otlp_spans_from_json(_failing_get_order_export()), user_id=None)
    return reflexion_run(trace_id=result.trace_ids[0])


def test_ingested_failures_never_stop_native_learning_of_the_same_signature(
    error_rules: None, failed_trace: Any
) -> None:
    """Two ingested runs (not replayable here) used to count as two refuted proposals for
    TYPE_MISMATCH|get_order, and the negative-feedback guard then held the native signature
    until a person closed the review item."""
    from policies.reflexion import reflexion_run
    from reviews.models import ReviewItem

    for _ in range(3):
        [external] = _ingest_and_reflect()
        assert external.outcome == ReflexionProposal.Outcome.REJECTED
        assert external.reason.startswith("not replayed: the run was ingested over OTLP")

    native = failed_trace(
        tool="get_order", error_type="TYPE_MISMATCH", body='{"error": "type_mismatch"}'
    )
    [record] = reflexion_run(trace_id=str(native.pk))

    assert record.outcome != ReflexionProposal.Outcome.STOPPED, record.reason
    assert not ReviewItem.objects.filter(reason="negative_feedback").exists()


def test_an_ingested_failure_does_not_agree_with_a_native_strategy(
    error_rules: None, make_strategy: Any, support_agent: Any
) -> None:
    """Same words, another agent: no confidence moved, no evidence or source trace added."""
    from policies.models import Strategy

    [probe] = _ingest_and_reflect()
    ReflexionProposal.objects.all().delete()
    native = make_strategy(
        kind=probe.payload["kind"],
        branch=probe.payload["branch"],
        error_type="TYPE_MISMATCH",
        status=Strategy.Status.IN_REVIEW,
        confidence=0.8,
    )

    [record] = _ingest_and_reflect()

    native.refresh_from_db()
    assert record.outcome == ReflexionProposal.Outcome.REJECTED
    assert (native.confidence, native.agree_count) == (0.8, 1)  # its own derivation
    assert not native.source_traces.exists()


def test_an_ingested_failure_does_not_debounce_a_native_one_of_the_same_signature(
    error_rules: None, failed_trace: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outside agent exporting a TYPE_MISMATCH|get_order every few seconds held back,
    debounced, every native failure of that signature."""
    from django.core.cache import cache

    from policies import tasks
    from traces.models import Trace
    from traces.otlp import otlp_spans_from_json

    settings.REFLEXION_ENABLED = True
    settings.REFLEXION_DEBOUNCE_SECONDS = 30
    settings.AGENT_EXECUTOR = "celery"
    queued: list[str] = []
    monkeypatch.setattr(tasks.reflect_trace, "delay", queued.append)
    keys = ["reflexion:TYPE_MISMATCH|get_order", "reflexion:external:TYPE_MISMATCH|get_order"]
    cache.delete_many(keys)
    try:
        result = otlp_spans_ingest(otlp_spans_from_json(_failing_get_order_export()), user_id=None)
        external = Trace.objects.get(pk=result.trace_ids[0])
        native = failed_trace(
            tool="get_order", error_type="TYPE_MISMATCH", body='{"error": "type_mismatch"}'
        )
        assert tasks.reflexion_queue(trace_id=str(external.pk), trace=external) is True
        assert tasks.reflexion_queue(trace_id=str(native.pk), trace=native) is True
        assert queued == [str(external.pk), str(native.pk)]
    finally:
        cache.delete_many(keys)


@pytest.mark.parametrize(
    ("met", "verdict"),
    [
        ({"INTERNAL_SERVER_ERROR"}, "replay inconclusive"),
        ({"TIMEOUT", "SERVICE_UNAVAILABLE"}, "replay inconclusive"),
        ({"RESOURCE_NOT_FOUND"}, "replay failed"),  # a wrong repair of an id makes one
        ({"LOOP_DETECTED"}, "replay failed"),  # the agent's own failure
        ({"INTERNAL_SERVER_ERROR", "HALLUCINATED_ANSWER"}, "replay failed"),
        (set(), "replay failed"),
    ],
)
def test_only_a_replay_that_met_the_upstream_alone_is_inconclusive(
    error_rules: None,
    failed_trace: Any,
    monkeypatch: pytest.MonkeyPatch,
    met: set[str],
    verdict: str,
) -> None:
    from policies import replay
    from policies.reflexion import reflexion_run

    monkeypatch.setattr(
        replay,
        "strategy_replay_outcome",
        lambda **_: replay.ReplayOutcome(False, "replayed", frozenset(met)),
    )
    trace = failed_trace(tool="get_order", error_type="TYPE_MISMATCH")
    [record] = reflexion_run(trace_id=str(trace.pk))
    assert record.reason.startswith(f"{verdict}: "), record.reason
