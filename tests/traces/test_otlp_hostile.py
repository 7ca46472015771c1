"""OTLP ingest against a hostile, or merely unusual, exporter: every well-formed export
request is stored (or refused with a clear 4xx reason), never a 500; no NUL character,
non-finite number or secret reaches a row; and no exporter can rewrite a run this
installation ran itself."""

from __future__ import annotations

import gzip
import json
import uuid
import zlib
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Agent
from traces.models import Step, Trace
from traces.otlp import (
    TEXT_MAX,
    OtlpRequestInvalid,
    otlp_body_decompress,
    otlp_spans_from_json,
    otlp_spans_from_protobuf,
    otlp_spans_ingest,
)
from traces.redaction import redact_value

from .test_otlp_store import T0, _spans

INT_MAX = 2**31 - 1


def _steps(trace_hex: str) -> list[Step]:
    return list(Step.objects.filter(trace_id=uuid.UUID(hex=trace_hex)).order_by("step_number"))


def _trace(trace_hex: str) -> Trace:
    return Trace.objects.get(pk=uuid.UUID(hex=trace_hex))


@pytest.mark.django_db
def test_numbers_no_column_holds_are_clamped_not_a_500(error_rules: None) -> None:
    trace_hex = uuid.uuid4().hex
    chat, tool, root = _spans(trace_hex)
    chat.attributes["gen_ai.usage.input_tokens"] = float("inf")
    chat.attributes["gen_ai.usage.output_tokens"] = INT_MAX
    tool.attributes["http.response.status_code"] = float("nan")
    second_chat = _spans(trace_hex)[0]
    second_chat.span_id = "00000000000000b1"
    second_chat.attributes["gen_ai.usage.input_tokens"] = INT_MAX  # the sum overflows

    result = otlp_spans_ingest([chat, second_chat, tool, root], user_id=None)

    assert result.accepted == 3
    trace = _trace(trace_hex)
    assert trace.total_tokens == INT_MAX
    assert [s.prompt_tokens for s in _steps(trace_hex) if s.phase == "reasoning"] == [0, INT_MAX]


@pytest.mark.django_db
def test_json_texts_that_do_not_parse_as_storable_json_are_kept_as_text(
    error_rules: None,
) -> None:
    """Nested past the recursion limit, NaN (no JSON, and no jsonb), or message parts that
    are not a list: the span is stored, its text kept as text."""
    trace_hex = uuid.uuid4().hex
    chat, tool, root = _spans(trace_hex)
    chat.attributes["gen_ai.output.messages"] = "[" * 100_000
    tool.attributes["gen_ai.tool.call.arguments"] = '{"order_id": NaN}'
    root.attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": 1}])
    root.attributes["gen_ai.output.messages"] = json.dumps(
        [{"role": "assistant", "parts": {"type": "text"}, "content": "done"}]
    )

    assert otlp_spans_ingest([chat, tool, root], user_id=None).accepted == 2

    reasoning, action = _steps(trace_hex)
    assert reasoning.thought == ("[" * 100_000)[:TEXT_MAX]
    assert action.action_input == {"raw": '{"order_id": NaN}'}
    assert _trace(trace_hex).final_answer == "done"


@pytest.mark.django_db
def test_nul_characters_from_either_encoding_reach_no_row(error_rules: None) -> None:
    """PostgreSQL stores no NUL in text or jsonb: a protobuf string may carry one, and a
    JSON string its ``\\u0000`` escape, in a name, an attribute, a map key or a value."""
    trace_hex = uuid.uuid4().hex
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for span_id, operation, name, extra in (
        ("00000000000000a1", "invoke_agent", "invoke_agent a\x00b", {}),
        (
            "00000000000000a2",
            "execute_tool",
            "execute_tool x\x00",
            {
                "gen_ai.tool.name": "get\x00order",
                "gen_ai.tool.call.arguments": '{"id\\u0000": "4\\u00002"}',
                "gen_ai.tool.call.result": "no\x00pe",
                "error.type": "Timeout\x00Error",
            },
        ),
    ):
        span = scope.spans.add(
            trace_id=bytes.fromhex(trace_hex),
            span_id=bytes.fromhex(span_id),
            name=name,
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + 10**9,
        )
        if operation != "invoke_agent":
            span.parent_span_id = bytes.fromhex("00000000000000a1")
            span.status.code = 2
            span.status.message = "broke\x00n"
        for key, value in {"gen_ai.operation.name": operation, **extra}.items():
            span.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    kvlist = AnyValue()
    kvlist.kvlist_value.values.append(
        KeyValue(key="k\x00", value=AnyValue(double_value=float("inf")))
    )
    scope.spans[0].attributes.append(KeyValue(key="gen_ai.agent.name", value=kvlist))

    result = otlp_spans_ingest(otlp_spans_from_protobuf(request.SerializeToString()), user_id=None)

    assert result.accepted == 1
    (step,) = _steps(trace_hex)
    trace = _trace(trace_hex)
    agent_name = trace.agent.name if trace.agent else ""
    texts = [step.tool_name, step.action_input, step.response_summary, step.error_detail]
    stored = json.dumps([*texts, step.details, trace.query, agent_name])
    assert "\x00" not in stored and "\\u0000" not in stored
    assert step.action_input == {"id": "42"}
    assert step.tool_name == "getorder"
    assert step.error_type  # classified from the cleaned error.type


def test_json_bodies_lose_their_nul_escapes_too() -> None:
    body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "chat \u0000",
                                "attributes": [
                                    {
                                        "key": "gen_ai.operation.name",
                                        "value": {"stringValue": "chat\u0000"},
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (span,) = otlp_spans_from_json(json.dumps(body).encode())
    assert (span.name, span.operation) == ("chat ", "chat")


@pytest.mark.django_db
def test_spans_that_name_a_native_run_are_refused_and_the_run_is_untouched(
    error_rules: None, support_agent: Any, ops_user: Any
) -> None:
    from traces.services import trace_create

    native = trace_create(agent_id=support_agent.pk, query="where is order 7?", llm_backend="sim")
    before = Trace.objects.values().get(pk=native.pk)
    foreign = uuid.uuid4().hex
    hostile = _spans(native.pk.hex)
    for span in hostile:
        if "gen_ai.agent.name" in span.attributes:
            span.attributes["gen_ai.agent.name"] = "Impostor Bot"
    spans = hostile + _spans(foreign)

    result = otlp_spans_ingest(spans, user_id=None)

    assert (result.accepted, result.rejected, result.rejected_native) == (2, 3, 3)
    # The refused spans' agent is filed nowhere (the foreign trace's is).
    names = set(Agent.objects.values_list("name", flat=True))
    assert "Store Bot" in names and "Impostor Bot" not in names
    # Only refused spans: nothing stored, still no Agent row.
    again = otlp_spans_ingest(hostile, user_id=None)
    assert (again.accepted, again.rejected_native) == (0, 3)
    assert not Agent.objects.filter(name="Impostor Bot").exists()
    assert result.trace_ids == [str(uuid.UUID(hex=foreign))]
    assert "ran itself" in result.message
    assert Trace.objects.values().get(pk=native.pk) == before
    assert not Step.objects.filter(trace=native).exists()
    # Through the endpoint: 200 with a partial success that says why.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=ops_user).key)
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=native.pk.bytes, span_id=b"\x01" * 8, name="chat")
    )
    span.attributes.append(
        KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat"))
    )
    response = client.post(
        "/otlp/v1/traces",
        request.SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200
    assert not Step.objects.filter(trace=native).exists()


@pytest.mark.django_db
def test_a_secret_across_a_columns_cut_or_used_as_a_key_is_not_stored(
    error_rules: None, settings: Any
) -> None:
    settings.LLM_API_KEY = "Zq8-llm-key-across-the-cut"
    key = settings.LLM_API_KEY
    trace_hex = uuid.uuid4().hex
    chat, tool, root = _spans(trace_hex)
    tool.attributes["gen_ai.tool.call.result"] = "x" * (TEXT_MAX - 10) + key
    tool.attributes["url.full"] = "https://shop.example/" + "p" * 495 + f"?k={key}"
    tool.attributes["gen_ai.tool.call.arguments"] = json.dumps({key: 1, "order": "7"})
    tool.status_message = "y" * 1995 + key

    otlp_spans_ingest([chat, tool, root], user_id=None)

    action = _steps(trace_hex)[1]
    stored = json.dumps(
        [action.response_summary, action.endpoint, action.action_input, action.error_detail]
    )
    for head in (key[:5], key[:10]):
        assert head not in stored
    assert len(action.response_summary) == TEXT_MAX and len(action.endpoint) == 500
    assert action.action_input == {"[REDACTED]": 1, "order": "7"}


def test_keys_redacted_alike_all_keep_their_values(settings: Any) -> None:
    settings.LLM_API_KEY = "Zq8-another-key"
    key = settings.LLM_API_KEY
    assert redact_value({key: 1, "[REDACTED]": 4, f"a {key}": {key: 3}}) == {
        "[REDACTED] #2": 1,
        "[REDACTED]": 4,
        "a [REDACTED]": {"[REDACTED]": 3},
    }


@pytest.mark.django_db
def test_a_child_that_arrives_after_its_run_span_keeps_the_runs_duration(
    error_rules: None,
) -> None:
    trace_hex = uuid.uuid4().hex
    chat, tool, root = _spans(trace_hex)
    otlp_spans_ingest([chat, root], user_id=None)
    assert _trace(trace_hex).total_latency_ms == 900
    otlp_spans_ingest([tool], user_id=None)
    assert _trace(trace_hex).total_latency_ms == 900
    assert _trace(trace_hex).total_steps == 2


def test_a_compressed_body_must_be_whole_and_every_gzip_member_counts() -> None:
    one, two = b"first member;", b"second member"
    assert otlp_body_decompress(gzip.compress(one) + gzip.compress(two), "gzip", max_bytes=100) == (
        one + two
    )
    with pytest.raises(OtlpRequestInvalid, match="truncated"):
        otlp_body_decompress(gzip.compress(one * 50)[:-12], "gzip", max_bytes=10_000)
    with pytest.raises(OtlpRequestInvalid, match="after its end"):
        otlp_body_decompress(zlib.compress(one) + b"junk", "deflate", max_bytes=100)
    with pytest.raises(OtlpRequestInvalid, match="corrupt"):
        otlp_body_decompress(gzip.compress(one) + b"junk", "gzip", max_bytes=100)
    from traces.otlp import OtlpBodyTooLarge

    with pytest.raises(OtlpBodyTooLarge):  # the limit holds across members
        otlp_body_decompress(gzip.compress(one) * 10, "gzip", max_bytes=100)
