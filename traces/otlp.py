"""OTLP trace ingest: GenAI spans from agents built with other frameworks become Traces and
Steps, classified by the same rule table as native runs and handed to Reflexion.

Decoding (protobuf or OTLP/JSON) is separate from storing, so the benchmark times the same
mapping path the endpoint uses. Span attributes follow the OpenTelemetry GenAI semantic
conventions: ``invoke_agent`` spans are runs, ``chat`` spans model calls, ``execute_tool``
spans tool calls. Everything in a span is untrusted: lengths are capped and text redacted.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import logging
import math
import re
import uuid
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from typing import Any, Protocol, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Field, Max, Q, Sum
from django.dispatch import Signal
from django.utils import timezone

from traces.bulk import CopyStream, model_new
from traces.classifier import CompiledRule, ErrorEvent, classify_error, error_rules_load
from traces.models import ErrorRule, ErrorType, Step, Trace
from traces.otlp_conventions import genai_read
from traces.recorder import step_data_redact
from traces.redaction import known_secrets, redact_text, untrusted_json
from traces.rollups import (
    RollupAccumulator,
    rollups_record_runs,
    rollups_record_steps,
    trace_dims,
)

logger = logging.getLogger(__name__)

# Sent after commit, once per export request, with ``trace_ids``: the ingested runs that have
# just ended. The learning loop (a layer above, ``policies.apps``) hands them to a worker,
# which scores them and queues Reflexion as for native runs.
external_runs_ended = Signal()

EXTERNAL_SOURCE = "otlp"
# The operations of the GenAI conventions and the phase each one is stored as.
RUN_OPERATIONS = {"invoke_agent", "create_agent"}
PHASE_OF_OPERATION = {
    "chat": Step.Phase.REASONING,
    "text_completion": Step.Phase.REASONING,
    "generate_content": Step.Phase.REASONING,
    "embeddings": Step.Phase.RETRIEVAL,
    "retrieval": Step.Phase.RETRIEVAL,
    "execute_tool": Step.Phase.ACTION,
    # Instrumentations' own names for the same steps (OpenLLMetry's retriever and reranker
    # calls, its name for a model request).
    "vector_db_retrieve": Step.Phase.RETRIEVAL,
    "rerank": Step.Phase.RETRIEVAL,
    "llm_request": Step.Phase.REASONING,
}
_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content", "llm_request")
# Any other operation wraps steps rather than being one: OpenLLMetry's execute_task (a
# LangChain chain, a LangGraph node, a CrewAI task), goto, handoff, guard, realtime, and
# whatever names instrumentations add next. Such a span is stored only to carry a failure
# that no step beneath it explains (``_steps_new``).
STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
TEXT_MAX = 4000
DETAIL_MAX = 2000
ATTRIBUTE_MAX = 1000
# An exporter's text is redacted whole and only then cut to its column (cut first, a secret
# across the cut would keep its head). Past this length it is cut before redacting too: no
# column keeps that much, and redaction costs by the character.
RAW_TEXT_MAX = 65_536
# Names used as cache keys are cut to this length first, so an exporter cannot pin
# megabytes per entry in a process-wide cache.
NAME_KEY_MAX = 1024
# error.type values of the conventions and common client libraries, as executor codes the
# default rules know. Anything else is classified by its own name first (an admin may add a
# rule for it), then as an exception the tool raised.
_EXECUTOR_CODES = {
    "timeout": "TIMEOUT",
    "timeouterror": "TIMEOUT",
    "readtimeout": "TIMEOUT",
    "connecttimeout": "TIMEOUT",
    "deadline_exceeded": "TIMEOUT",
    "connectionerror": "CONNECTION_ERROR",
    "connecterror": "CONNECTION_ERROR",
    "connectionrefusederror": "CONNECTION_ERROR",
}


# Rows (Trace and Step) per COPY batch of a request's new traces: enough that a statement's
# own cost stays small, few enough that the database stores one batch while the next is
# mapped (bench/otlp_ingest.py; 32 to 96 measured alike).
_COPY_BATCH = 48
_NO_COST = Decimal(0)  # ingested runs carry no price; a Decimal is immutable, so one will do
_FORMAT = re.compile(r"format|pars|json|schema|validation", re.IGNORECASE)


class OtlpRequestInvalid(ValueError):
    """The request body is not an OTLP ExportTraceServiceRequest."""


@dataclass(slots=True)
class SpanIn:
    """One decoded span: ids as hex, times in nanoseconds, attributes as plain values."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    exception: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    # The convention the span was written to, when not OpenTelemetry's current GenAI one
    # (``otlp_conventions``): its attributes were read into those.
    convention: str = ""
    # Read many times per span while it is mapped: worked out once, from the attributes.
    operation: str = field(init=False)
    failed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.operation = str(self.attributes.get("gen_ai.operation.name") or "")
        self.failed = self.status_code == STATUS_ERROR or bool(self.attributes.get("error.type"))


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    trace_ids: list[str] = field(default_factory=list)
    # Of ``rejected``: spans whose trace id is a run this installation ran itself.
    rejected_native: int = 0

    @property
    def message(self) -> str:
        reasons = []
        if self.rejected - self.rejected_native:
            reasons.append(
                f"{self.rejected - self.rejected_native} span(s) that are no GenAI "
                "operation were not stored (no gen_ai.operation.name, nor an OpenInference "
                "or OpenLLMetry span kind that maps to one)"
            )
        if self.rejected_native:
            reasons.append(
                f"{self.rejected_native} span(s) name the trace id of a run this "
                "installation ran itself and were not stored (only external traces take "
                "spans over OTLP)"
            )
        return "; ".join(reasons)


# --- decoding ----------------------------------------------------------------------------
def otlp_body_decompress(body: bytes, encoding: str, *, max_bytes: int) -> bytes:
    """The request body without its Content-Encoding, refused past ``max_bytes``."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise OtlpRequestInvalid(f"unsupported Content-Encoding {encoding!r}")
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    parts: list[bytes] = []
    size = 0
    rest = body
    try:
        # A gzip body may hold several members, one after the other (RFC 1952): each is
        # inflated, and each must be whole (its end and checksum read), or nothing is.
        while True:
            inflater = zlib.decompressobj(wbits)
            part = inflater.decompress(rest, max_bytes + 1 - size)
            size += len(part)
            if size > max_bytes:
                raise OtlpBodyTooLarge(max_bytes)
            parts.append(part)
            if not inflater.eof:
                raise OtlpRequestInvalid(f"the {encoding} body is truncated")
            rest = inflater.unused_data
            if not rest:
                break
            if encoding != "gzip":
                raise OtlpRequestInvalid(f"the {encoding} body has bytes after its end")
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise OtlpRequestInvalid(f"the {encoding} body is corrupt: {exc}") from exc
    return b"".join(parts)


class OtlpBodyTooLarge(Exception):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the request body is larger than {max_bytes} bytes")


def _nul_free(text: str) -> str:
    """``text`` without NUL characters, which PostgreSQL stores in no text or jsonb value
    (protobuf and JSON strings may carry them)."""
    return text.replace("\x00", "") if "\x00" in text else text


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return _nul_free(value.string_value)
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {_nul_free(kv.key): _any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if kind == "double_value" and not math.isfinite(value.double_value):
        return str(value.double_value)  # "inf", "nan": JSON and jsonb have no such numbers
    return getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    attributes = {}
    for kv in pairs:
        value = kv.value
        kind = value.WhichOneof("value")
        # Most GenAI attributes are strings or integers: read those without a call.
        if kind == "string_value":
            text = value.string_value
            attributes[kv.key] = text.replace("\x00", "") if "\x00" in text else text
        elif kind == "int_value":
            attributes[kv.key] = value.int_value
        else:
            attributes[kv.key] = _any_value(value)
    return attributes


def otlp_spans_from_protobuf(body: bytes) -> list[SpanIn]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError) as exc:
        raise OtlpRequestInvalid(f"the protobuf body is not an export request: {exc}") from exc
    return _spans_of(request)


def _hex_to_b64(value: Any, size: int, name: str) -> str:
    if not isinstance(value, str):
        raise OtlpRequestInvalid(f"{name} must be a hex string")
    try:
        raw = bytes.fromhex(value) if value else b""
    except ValueError as exc:
        raise OtlpRequestInvalid(f"{name} {value[:40]!r} is not hex") from exc
    if raw and len(raw) != size:
        raise OtlpRequestInvalid(f"{name} must be {size} bytes")
    return base64.b64encode(raw).decode()


# The id fields of a span (and, the first two, of a link): the JSON mapping's lowerCamelCase
# names, and the proto field names, which protobuf's JSON parser (and the Collector's
# receiver) accept too.
_SPAN_IDS = (
    (("traceId", "trace_id"), 16),
    (("spanId", "span_id"), 8),
    (("parentSpanId", "parent_span_id"), 8),
)


def _either(document: Any, camel: str, snake: str) -> Any:
    value = document.get(camel)
    if value is None:
        value = document.get(snake)
    return value or []


def _ids_to_b64(document: Any, fields: tuple[tuple[tuple[str, str], int], ...]) -> None:
    for names, size in fields:
        for key in names:
            # null is the field's default (no parent), as the JSON mapping reads it.
            if document.get(key) is not None:
                document[key] = _hex_to_b64(document[key], size, key)


def otlp_spans_from_json(body: bytes) -> list[SpanIn]:
    """OTLP/JSON: protobuf's JSON mapping, except that trace and span ids are hex."""
    from google.protobuf.json_format import ParseDict, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpRequestInvalid(f"the JSON body does not parse: {exc}") from exc
    if not isinstance(document, dict):
        raise OtlpRequestInvalid("the JSON body must be an object")
    try:
        for resource_spans in _either(document, "resourceSpans", "resource_spans"):
            for scope_spans in _either(resource_spans, "scopeSpans", "scope_spans"):
                for span in _either(scope_spans, "spans", "spans"):
                    _ids_to_b64(span, _SPAN_IDS)
                    for link in _either(span, "links", "links"):
                        _ids_to_b64(link, _SPAN_IDS[:2])
        request = ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (ParseError, AttributeError, TypeError, RecursionError) as exc:
        raise OtlpRequestInvalid(f"the JSON body is not an export request: {exc}") from exc
    return _spans_of(request)


_FRAMEWORK_KINDS = (
    "openinference.span.kind",
    "traceloop.span.kind",
    "mlflow.spanType",
    "langfuse.observation.type",
)


class _Roots:
    """Whether a span is at the root of its run: it has no parent, or none of the spans
    above it in the request is a framework's (OpenInference, OpenLLMetry, MLflow,
    Langfuse). An agent served by an instrumented web app has its top chain under the HTTP
    server's span; that chain is still the run. A span whose parent is not in the request
    is not taken for a root (its parent may be a framework's, exported later)."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self._above: dict[tuple[bytes, bytes], tuple[bytes, bool]] | None = None
        # (trace id, span id) -> whether neither it nor a span above it is a framework's:
        # each span is walked over once per request, however many spans hang below it.
        self._clear: dict[tuple[bytes, bytes], bool] = {}

    def __call__(self, span: Any, attributes: dict[str, Any]) -> bool:
        if not span.parent_span_id:
            return True
        if not any(kind in attributes for kind in _FRAMEWORK_KINDS):
            return False  # read only for a framework's chain or task: no walk for others
        key = (span.trace_id, span.parent_span_id)
        return key in self._map() and self._clear_from(key)

    def _clear_from(self, key: tuple[bytes, bytes]) -> bool:
        above, clear = self._map(), self._clear
        path: list[tuple[bytes, bytes]] = []
        walked: set[tuple[bytes, bytes]] = set()
        while True:
            if key in clear:
                result = clear[key]
                break
            if key in walked:  # an exporter may send a cycle: no root on it
                result = False
                break
            parent, framework = above[key]
            path.append(key)
            walked.add(key)
            if framework:
                result = False
                break
            if not parent or (key[0], parent) not in above:
                result = True  # the top of what the request holds
                break
            key = (key[0], parent)
        for seen in path:
            clear[seen] = result
        return result

    def _map(self) -> dict[tuple[bytes, bytes], tuple[bytes, bool]]:
        """(trace id, span id) -> (its parent's id, whether a framework wrote it)."""
        if self._above is None:
            self._above = {
                (span.trace_id, span.span_id): (
                    span.parent_span_id,
                    any(kv.key in _FRAMEWORK_KINDS for kv in span.attributes),
                )
                for resource_spans in self.request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            }
        return self._above


def _spans_of(request: Any) -> list[SpanIn]:
    spans = []
    is_root = _Roots(request)
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise OtlpRequestInvalid("every span needs a 16-byte traceId and 8-byte spanId")
                exception = exception_type = ""
                for event in span.events:
                    if event.name == "exception":
                        attrs = _attributes(event.attributes)
                        exception_type = _text(attrs.get("exception.type"), ATTRIBUTE_MAX)
                        exception = (
                            f"{attrs.get('exception.type', '')}: "
                            f"{attrs.get('exception.message', '')}"
                        )
                attributes = _attributes(span.attributes)
                name = _nul_free(span.name)
                parent = span.parent_span_id.hex()
                convention = genai_read(attributes, name=name, is_root=is_root(span, attributes))
                if exception_type and span.status.code == STATUS_ERROR:
                    # The conventions' error.type is the exception's type when one was
                    # raised; many instrumentations record only the exception event.
                    attributes.setdefault("error.type", exception_type)
                spans.append(
                    SpanIn(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=parent,
                        name=name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=span.status.code,
                        status_message=_nul_free(span.status.message),
                        attributes=attributes,
                        exception=exception,
                        resource=resource,
                        convention=convention,
                    )
                )
    return spans


# --- mapping -----------------------------------------------------------------------------
def _text(value: Any, limit: int = RAW_TEXT_MAX) -> str:
    """An attribute as text, cut to ``limit``: the raw text to redact (``RAW_TEXT_MAX``),
    or, for a text that is not stored, its column's length."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return value[:limit]


def _clean(value: Any, limit: int, secrets: list[str] | None = None) -> str:
    """An exporter's text for a column of ``limit`` characters: redacted whole, then cut
    (cut first, a secret across the limit would keep its head; redacted first, the
    marker could not overflow the column)."""
    return redact_text(_text(value), secrets=secrets)[:limit]


def _json_value(text: str) -> Any:
    """A JSON text an exporter sent as an attribute (``untrusted_json``); ``ValueError``
    when it is not one that PostgreSQL can store or the redaction can walk."""
    return untrusted_json(text)


# Texts at most this long are remembered, redacted, for the rest of the request: provider,
# model, span and tool names and error messages recur span after span.
_REMEMBERED_TEXT_MAX = 256


class _Redactor:
    """Redaction for the spans of one request: the known secrets looked up once, and each
    short text redacted once however often it recurs (the result depends on the text and
    the secrets alone). It also remembers the error type of each distinct failure: the
    same error, span after span, is classified once."""

    __slots__ = ("_classified", "_done", "secrets")

    def __init__(self, secrets: list[str] | None = None) -> None:
        self.secrets = known_secrets() if secrets is None else secrets
        self._done: dict[str, str] = {}
        self._classified: dict[tuple[Any, ...], str] = {}

    def error_type(self, span: SpanIn, rules: list[CompiledRule]) -> str:
        """``span_classify``, once per distinct failure: the key is everything
        ``span_error_event`` reads of the span."""
        attrs = span.attributes
        key = (
            span.operation,
            attrs.get("error.type"),
            attrs.get("http.response.status_code"),
            attrs.get("gen_ai.tool.call.result"),
            span.status_message,
            span.exception,
        )
        try:
            done = self._classified.get(key)
        except TypeError:  # a list or map attribute: not a key
            return span_classify(span, rules)
        if done is None:
            done = self._classified[key] = span_classify(span, rules)
        return done

    def text(self, text: str) -> str:
        if len(text) > _REMEMBERED_TEXT_MAX:
            return redact_text(text, secrets=self.secrets)
        done = self._done.get(text)
        if done is None:
            done = self._done[text] = redact_text(text, secrets=self.secrets)
        return done

    def clean(self, value: Any, limit: int) -> str:
        """``_clean``: redacted whole, then cut to ``limit``."""
        return self.text(_text(value))[:limit]


def _int(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite double
        return 0
    return max(0, min(number, 2**31 - 1))


def _moment(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


def _error_detail(error_type: str, message: str, exception: str) -> str:
    """The error's type, status message and exception, each said once: an SDK's recorded
    exception sets all three from one error ("ConnectionRefusedError: ConnectionRefusedError:
    connection refused (ConnectionRefusedError: connection refused)")."""
    text = (
        message
        if error_type and error_type in message
        else ": ".join(filter(None, [error_type, message]))
    )
    if not exception or exception in text:
        return text
    if text in exception:
        return exception
    return f"{text} ({exception})"


def _messages_text(value: Any) -> str:
    """The text parts of gen_ai.input/output.messages (a JSON string or structured)."""
    if isinstance(value, str):
        try:
            value = _json_value(value)
        except ValueError:
            return value[:RAW_TEXT_MAX]
    texts: list[str] = []
    for message in value if isinstance(value, list) else []:
        if not isinstance(message, dict):
            continue
        parts = message.get("parts")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(_text(part.get("content", "")))
        if isinstance(message.get("content"), str):
            texts.append(message["content"])
    return "\n".join(texts)[:RAW_TEXT_MAX]


def _first_request(spans: list[SpanIn]) -> str:
    """What the user asked, when the run span does not say (the OpenAI Agents SDK's, for
    one): the last user message of the run's first model call."""
    calls = [
        s
        for s in spans
        if s.operation in _MODEL_OPERATIONS and s.attributes.get("gen_ai.input.messages")
    ]
    if not calls:
        return ""
    value = min(calls, key=lambda s: s.start_ns).attributes["gen_ai.input.messages"]
    if isinstance(value, str):
        try:
            value = _json_value(value)
        except ValueError:
            return ""
    for message in reversed(value if isinstance(value, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _messages_text([message])
    return ""


def span_error_event(span: SpanIn) -> tuple[ErrorEvent, ErrorEvent | None]:
    """What the classifier sees of a failed span, and a fallback when that matches nothing."""
    attrs = span.attributes
    error_type = str(attrs.get("error.type") or "")
    status = _int(attrs.get("http.response.status_code")) or None
    body = " ".join(
        filter(
            None, [span.status_message, span.exception, _text(attrs.get("gen_ai.tool.call.result"))]
        )
    )
    if status is None and error_type.isdigit() and len(error_type) == 3:
        status = int(error_type)
    if span.operation == "execute_tool":
        if status is not None and status >= 400:
            return ErrorEvent(source=ErrorRule.Source.HTTP, status_code=status, body=body), None
        code = _EXECUTOR_CODES.get(error_type.rsplit(".", 1)[-1].lower(), "TOOL_ERROR")
        return (
            ErrorEvent(source=ErrorRule.Source.EXECUTOR, exception_class=error_type, body=body),
            ErrorEvent(source=ErrorRule.Source.EXECUTOR, exception_class=code, body=body),
        )
    wrapper = span.operation not in PHASE_OF_OPERATION and span.operation not in RUN_OPERATIONS
    if (span.operation in _MODEL_OPERATIONS or wrapper) and _FORMAT.search(error_type):
        # The model answered, but not in the shape asked for (a chain's output parser).
        return (
            ErrorEvent(source=ErrorRule.Source.RUNTIME, exception_class=error_type, body=body),
            ErrorEvent(source=ErrorRule.Source.MODEL_OUTPUT, body=body),
        )
    if wrapper:
        # A chain, a graph node, a handoff that raised itself: the agent's own code, not
        # the model, unless it timed out or lost a connection.
        code = _EXECUTOR_CODES.get(error_type.rsplit(".", 1)[-1].lower(), "TOOL_ERROR")
        return (
            ErrorEvent(source=ErrorRule.Source.RUNTIME, exception_class=error_type, body=body),
            ErrorEvent(source=ErrorRule.Source.EXECUTOR, exception_class=code, body=body),
        )
    # A model call or the run itself: the model was unavailable, or the run broke.
    return (
        ErrorEvent(source=ErrorRule.Source.RUNTIME, exception_class=error_type, body=body),
        ErrorEvent(source=ErrorRule.Source.RUNTIME, exception_class="LLM_ERROR", body=body),
    )


def span_classify(span: SpanIn, rules: list[CompiledRule]) -> str:
    event, fallback = span_error_event(span)
    error_type = classify_error(event, rules)
    if error_type == ErrorType.UNKNOWN and fallback is not None:
        error_type = classify_error(fallback, rules)
    return error_type


def span_step_fields(
    span: SpanIn,
    rules: list[CompiledRule],
    *,
    secrets: list[str] | None = None,
    redactor: _Redactor | None = None,
) -> dict[str, Any]:
    """The Step field values of one GenAI span, secrets redacted. ``secrets``: the known
    ones (``known_secrets()``), looked up once for many spans; ``redactor``: the request's,
    which remembers the texts it has redacted."""
    redactor = _Redactor(secrets) if redactor is None else redactor
    clean = redactor.clean
    attrs = span.attributes
    operation = span.operation
    phase = PHASE_OF_OPERATION.get(operation, Step.Phase.STOPPED)
    data: dict[str, Any] = {
        "phase": phase,
        "latency_ms": _int((span.end_ns - span.start_ns) // 1_000_000),
        "llm_backend": clean(attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system"), 20),
        "prompt_tokens": _int(attrs.get("gen_ai.usage.input_tokens")),
        "completion_tokens": _int(attrs.get("gen_ai.usage.output_tokens")),
    }
    if phase == Step.Phase.ACTION:
        arguments = attrs.get("gen_ai.tool.call.arguments")
        if isinstance(arguments, str):
            try:
                arguments = _json_value(arguments)
            except ValueError:
                arguments = {"raw": arguments[:RAW_TEXT_MAX]}  # redacted, then cut, below
        data.update(
            action_type=Step.ActionType.TOOL,
            # Redacted, then cut, below (these texts and the thought, error and result).
            tool_name=_text(attrs.get("gen_ai.tool.name")),
            action_input=arguments if isinstance(arguments, dict) else {},
            endpoint=_text(attrs.get("url.full") or attrs.get("server.address")),
            status_code=_int(attrs.get("http.response.status_code")) or None,
            response_summary=_text(attrs.get("gen_ai.tool.call.result")),
        )
        if data["status_code"] is not None and data["status_code"] > 999:
            data["status_code"] = None
    elif phase == Step.Phase.REASONING:
        data["thought"] = _messages_text(attrs.get("gen_ai.output.messages"))
    if span.failed:
        data["ok"] = False
        data["error_type"] = redactor.error_type(span, rules)
        data["error_detail"] = _text(
            _error_detail(_text(attrs.get("error.type")), span.status_message, span.exception)
        )
    data = step_data_redact(data, secrets=redactor.secrets, redact=redactor.text)
    for name, limit in _CUT_AFTER_REDACTION:
        if len(data.get(name) or "") > limit:
            data[name] = data[name][:limit]
    raw = data.get("action_input", {}).get("raw")
    if isinstance(raw, str) and len(raw) > TEXT_MAX:
        data["action_input"]["raw"] = raw[:TEXT_MAX]
    # Redacted here, string by string: the span ids are hex this module wrote, and a known
    # operation name is one of ours; everything else in them came from the exporter.
    data["details"] = {
        "otel": {
            "span_id": span.span_id,
            "parent_span_id": span.parent_span_id,
            "name": clean(span.name, 200),
            "operation": operation[:40]
            if operation in PHASE_OF_OPERATION or operation in RUN_OPERATIONS
            else clean(operation, 40),
            "model": clean(
                attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model"), 100
            ),
            "tool_call_id": clean(attrs.get("gen_ai.tool.call.id"), 100),
        }
    }
    if span.convention:
        data["details"]["otel"]["convention"] = span.convention
    return data


_CUT_AFTER_REDACTION = (
    ("thought", TEXT_MAX),
    ("response_summary", TEXT_MAX),
    ("error_detail", DETAIL_MAX),
)


def _agent_name(spans: list[SpanIn]) -> str:
    """The name of the agent the spans' run is filed under (an Agent row's name), redacted."""
    run = _run_span(spans)
    for span in spans if run is None else [run, *spans]:  # the run's own name first
        if span.attributes.get("gen_ai.agent.name"):
            name = _text(span.attributes["gen_ai.agent.name"], NAME_KEY_MAX)
            return _agent_label(name, tuple(known_secrets()))
    for span in spans:
        if span.resource.get("service.name"):
            name = _text(span.resource["service.name"], NAME_KEY_MAX)
            return _agent_label(name, tuple(known_secrets()))
    return "otel"


@functools.lru_cache(maxsize=1024)  # the same few names, trace after trace
def _agent_label(name: str, secrets: tuple[str, ...]) -> str:
    return _clean(name, 100, list(secrets))


# Trace.agent is a foreign key to the runtime's Agent model, and the store may not import the
# runtime (DESIGN.md layers): the agents app registers how agent names map to Agent rows
# (``agents.apps``; ``agents.external_runs.external_agent_ids``).
class AgentIdsResolver(Protocol):
    def __call__(self, names: set[str], *, fresh: bool = ...) -> dict[str, int]: ...


_agent_ids_resolver: AgentIdsResolver | None = None


def external_agent_resolver_register(resolver: AgentIdsResolver) -> None:
    """Set the function that files external runs under Agent rows, by agent name."""
    global _agent_ids_resolver
    _agent_ids_resolver = resolver


def _agent_ids(names: set[str], *, fresh: bool = False) -> dict[str, int]:
    if _agent_ids_resolver is None:
        raise ImproperlyConfigured(
            "OTLP ingest files runs under Agent rows: the agents app registers the resolver "
            "(traces.otlp.external_agent_resolver_register) and must be installed."
        )
    return _agent_ids_resolver(names, fresh=fresh)


def _trace_values(spans: list[SpanIn], redactor: _Redactor | None = None) -> dict[str, Any]:
    redactor = _Redactor() if redactor is None else redactor
    clean = redactor.clean
    root = _run_span(spans) or next((s for s in spans if s.operation in RUN_OPERATIONS), None)
    model_span = next((s for s in spans if s.attributes.get("gen_ai.request.model")), None)
    attrs = root.attributes if root else {}
    query = _messages_text(attrs.get("gen_ai.input.messages")) or _first_request(spans)
    query = redactor.text(query or (root.name if root else "") or spans[0].name)[:TEXT_MAX]
    from traces.services import query_hash

    return {
        "query": query,
        "query_hash": query_hash(query),
        "session_id": clean(attrs.get("gen_ai.conversation.id"), 64),
        "llm_backend": clean(
            (model_span or spans[0]).attributes.get("gen_ai.provider.name") or "otel", 20
        ),
        "llm_model": clean(model_span.attributes.get("gen_ai.request.model"), 100)
        if model_span
        else "",
    }


def _span_key(span: SpanIn) -> str:
    return f"otel:{span.trace_id}:{span.span_id}"


def _is_root(span: SpanIn) -> bool:
    return span.operation in RUN_OPERATIONS and (
        not span.parent_span_id or span.operation == "invoke_agent"
    )


def _run_span(spans: list[SpanIn]) -> SpanIn | None:
    """The span that stands for the run: of the run spans, the outermost. An agent may
    call another (a nested ``invoke_agent``, an OpenLLMetry agent inside its workflow), and
    the inner one ends, so is exported, first."""
    run = None
    for span in spans:
        if _is_root(span) and (run is None or _outer(span) < _outer(run)):
            run = span
    return run


def _outer(span: SpanIn) -> tuple[bool, int, int]:
    return (bool(span.parent_span_id), span.start_ns, -span.end_ns)


def _trace_new(
    hex_id: str,
    group: list[SpanIn],
    *,
    agent_id: int,
    user_id: int | None,
    redactor: _Redactor | None = None,
) -> Trace:
    trace_uuid = uuid.UUID(hex=hex_id)
    return model_new(
        Trace,
        {
            "id": trace_uuid,
            "agent_id": agent_id,
            "created_by_id": user_id,
            "source": EXTERNAL_SOURCE,
            "origin": Trace.Origin.EXTERNAL,
            "status": Trace.Status.RUNNING,
            "policy_bucket": trace_uuid.int % 100,
            "started_at": _moment(min(s.start_ns for s in group)),
            **_trace_values(group, redactor),
        },
    )


def _steps_new(
    trace: Trace,
    fresh: list[SpanIn],
    *,
    number: int,
    failed_before: bool,
    rules: list[CompiledRule],
    redactor: _Redactor,
) -> list[Step]:
    """The Step rows of a trace's spans not stored yet, numbered on from ``number``."""
    step_failed = failed_before or any(s.failed for s in fresh if s.operation in PHASE_OF_OPERATION)
    wrapping = _failed_ancestors(fresh)
    steps = []
    for span in sorted(fresh, key=lambda s: (s.start_ns, s.end_ns)):
        # A run span is the trace itself, and any other operation wraps steps (a chain, a
        # graph node, a handoff): such a span is a step only to carry a failure that no
        # model, tool or retrieval span explains, and only the innermost of those that
        # failed (the exception went up through every one of them, a sub-agent's too).
        if span.operation not in PHASE_OF_OPERATION and (
            not span.failed or step_failed or span.span_id in wrapping
        ):
            continue
        number += 1
        fields = span_step_fields(span, rules, redactor=redactor)
        steps.append(
            model_new(
                Step,
                {
                    "trace_id": trace.pk,
                    "step_number": number,
                    "idempotency_key": _span_key(span),
                    "started_at": _moment(span.start_ns),
                    "created_at": _moment(span.end_ns),
                    "cost_usd": _NO_COST,
                    **fields,
                },
            )
        )
    return steps


def _failed_ancestors(spans: list[SpanIn]) -> set[str]:
    """The span ids, among ``spans``, above a failed span (its parent, that one's, …)."""
    by_id = {s.span_id: s for s in spans}
    above: set[str] = set()
    for span in spans:
        if not span.failed:
            continue
        parent = by_id.get(span.parent_span_id)
        # An exporter may send a cycle: no chain is longer than the spans in hand.
        for _ in range(len(by_id)):
            if parent is None or parent.span_id in above:
                break
            above.add(parent.span_id)
            parent = by_id.get(parent.parent_span_id)
    return above


def otlp_spans_ingest(
    spans: list[SpanIn], *, user_id: int | None, rules: list[CompiledRule] | None = None
) -> IngestResult:
    """Store the GenAI spans of one export request; a span already stored is skipped.

    One transaction: either the whole request is stored, or nothing (the exporter retries).
    A trace is terminal after every request that touched it (its totals and status recomputed)
    so the stuck-run sweeper never mistakes it for a native run to execute; its run is
    counted in the rollups and handed to Reflexion once, when its root span arrives.

    Traces this request starts (the usual case: an exporter sends a trace's spans together)
    are settled from the spans in hand and written with ``COPY``; traces an earlier request
    started are locked, and their steps numbered on and totals recomputed from the store.
    """
    result = IngestResult()
    genai = [s for s in spans if s.operation]
    result.rejected = len(spans) - len(genai)
    if not genai:
        return result
    rules = error_rules_load() if rules is None else rules
    grouped: dict[str, list[SpanIn]] = defaultdict(list)
    for span in genai:
        grouped[span.trace_id].append(span)
    # In trace id order: two requests writing the same traces take their row and key locks
    # in one order, so one waits for the other instead of both deadlocking.
    by_trace = dict(sorted(grouped.items()))
    # Spans naming a native run are refused before their agent names are looked up: a
    # refused request files no Agent row.
    stored = _traces_stored([uuid.UUID(hex=hex_id) for hex_id in by_trace])
    by_trace = _external_only(by_trace, stored, result)
    if not by_trace:
        return result
    refused = IngestResult(rejected=result.rejected, rejected_native=result.rejected_native)
    agent_names = {_agent_name(group) for group in by_trace.values()}
    agent_of = _agent_ids(agent_names)
    try:
        with transaction.atomic():
            _spans_store(by_trace, agent_of, user_id, rules, result, stored=stored)
    except IntegrityError:
        # A concurrent request stored some of these traces or spans between the read and
        # the COPY, or an agent the resolver remembered was deleted since: once more,
        # reading what is there.
        result = refused
        agent_of = _agent_ids(agent_names, fresh=True)
        with transaction.atomic():
            _spans_store(by_trace, agent_of, user_id, rules, result, stored=None)
    logger.info(
        "otlp.ingested",
        extra={
            "spans": len(spans),
            "steps": result.accepted,
            "duplicates": result.duplicates,
            "traces": len(result.trace_ids),
        },
    )
    return result


def _spans_store(
    by_trace: dict[str, list[SpanIn]],
    agent_of: dict[str, int],
    user_id: int | None,
    rules: list[CompiledRule],
    result: IngestResult,
    *,
    stored: dict[str, str] | None,
) -> None:
    """Store the spans, by trace, inside the caller's transaction. With ``stored`` (the
    origins of the traces found before, native ones already left out), the traces not found
    are taken to be new and written with ``COPY`` (a concurrent writer makes it fail with
    ``IntegrityError``); without, they are created if missing and locked."""
    optimistic = stored is not None
    ids = [uuid.UUID(hex=hex_id) for hex_id in by_trace]
    redactor = _Redactor()
    if stored is not None:
        new = {h: g for h, g in by_trace.items() if h not in stored}
    else:
        Trace.objects.bulk_create(
            [
                _trace_new(
                    h, g, agent_id=agent_of[_agent_name(g)], user_id=user_id, redactor=redactor
                )
                for h, g in by_trace.items()
            ],
            ignore_conflicts=True,
        )
        new = {}
    ended = _new_traces_store(new, agent_of, user_id, rules, result, redactor) if new else []
    old = {h: g for h, g in by_trace.items() if h not in new}
    if old:
        known = _traces_lock([uuid.UUID(hex=h) for h in old])
        if not optimistic:  # created just now, or found: a native run's is refused here
            old = _external_only(old, {h: t.origin for h, t in known.items()}, result)
            ids = [uuid.UUID(hex=hex_id) for hex_id in old]
            known = {h: known[h] for h in old}
        if old:
            ended += _known_traces_store(old, known, agent_of, rules, result, redactor)
    result.trace_ids = [str(trace_id) for trace_id in ids]
    if ended:
        transaction.on_commit(partial(_runs_ended, ended))


def _traces_stored(ids: list[uuid.UUID]) -> dict[str, str]:
    """The traces among ``ids`` already stored (not locked): their origin, by hex id."""
    if connection.vendor != "postgresql":
        rows = Trace.objects.filter(pk__in=ids).values_list("pk", "origin")
        return {pk.hex: origin for pk, origin in rows}
    with connection.cursor() as cursor:
        # One array parameter: the statement text stays the same, whatever the count.
        cursor.execute(f"SELECT id, origin FROM {Trace._meta.db_table} WHERE id = ANY(%s)", [ids])
        return {row[0].hex: row[1] for row in cursor.fetchall()}


def _external_only(
    by_trace: dict[str, list[SpanIn]], origins: dict[str, str], result: IngestResult
) -> dict[str, list[SpanIn]]:
    """The traces that are new or external: spans naming a run this installation ran
    itself (a native trace's id) are refused, so that no exporter can rewrite its steps,
    status or answer, whether by accident (its own export sent back) or on purpose."""
    native = [h for h, origin in origins.items() if origin != Trace.Origin.EXTERNAL]
    if not native:
        return by_trace
    refused = sum(len(by_trace[h]) for h in native if h in by_trace)
    result.rejected += refused
    result.rejected_native += refused
    logger.warning("otlp.native_trace_refused", extra={"traces": native, "spans": refused})
    return {h: g for h, g in by_trace.items() if h not in native}


def _traces_lock(ids: list[uuid.UUID]) -> dict[str, Trace]:
    """The stored traces among ``ids``, locked for this transaction, by hex id."""
    locked = Trace.objects.select_for_update().filter(pk__in=ids).order_by("pk")  # see above
    return {t.pk.hex: t for t in locked}


def _new_traces_store(
    groups: dict[str, list[SpanIn]],
    agent_of: dict[str, int],
    user_id: int | None,
    rules: list[CompiledRule],
    result: IngestResult,
    redactor: _Redactor,
) -> list[str]:
    """Store traces no request has started: settled from their spans, with no reads.

    Traces are mapped one by one into their Trace and Step rows, and their rollup counters
    added in the same pass. Whenever PostgreSQL has stored the last batch, the rows mapped
    since go to it in ``COPY`` batches (``CopyStream``), ended without waiting: the database
    stores them while the next traces are mapped. (Django's foreign keys are deferred to
    the commit, so the steps may go first.) The rollup upserts are queued behind the last
    batch, rendered while the database stores it."""
    now = timezone.now()
    ended: list[tuple[Trace, int, int]] = []
    rollups = RollupAccumulator()
    steps: list[Step] = []
    traces: list[Trace] = []
    with CopyStream() as stream:
        for hex_id, group in groups.items():
            trace = _trace_new(
                hex_id,
                group,
                agent_id=agent_of[_agent_name(group)],
                user_id=user_id,
                redactor=redactor,
            )
            trace.created_at = now
            fresh = list({_span_key(s): s for s in group}.values())  # a span sent twice
            result.duplicates += len(group) - len(fresh)
            own = _steps_new(
                trace, fresh, number=0, failed_before=False, rules=rules, redactor=redactor
            )
            root = _run_span(fresh)
            totals = _totals_of(own)
            if _trace_settle(trace, root, totals, redactor):
                ended.append((trace, totals["failed"], totals["action_steps"]))
            dims = trace_dims(trace)
            rollups.add_step_rows(own, dims)
            result.accepted += len(own)
            steps += own
            traces.append(trace)
            # The rows mapped so far go to PostgreSQL as soon as it has stored the last
            # batch: it stores them while the next traces are mapped. (The stream takes
            # its steps between two traces: an answer read, the next COPY started.)
            if stream.idle() and len(steps) + len(traces) >= _COPY_BATCH:
                stream.add(Step, steps)
                stream.add(Trace, traces)  # sent when PostgreSQL has stored the steps
                steps, traces = [], []
        stream.add(Step, steps)
        stream.add(Trace, traces)
        # Counted while the database stores the last batches; the upserts go behind them.
        rollups.add_runs(ended)
        for sql, params in rollups.statements():
            stream.execute(sql, params)
    return [str(trace.pk) for trace, _, _ in ended]


def _known_traces_store(
    groups: dict[str, list[SpanIn]],
    traces: dict[str, Trace],
    agent_of: dict[str, int],
    rules: list[CompiledRule],
    result: IngestResult,
    redactor: _Redactor,
) -> list[str]:
    """Store the spans of traces an earlier request started (locked by the caller)."""
    ids = [t.pk for t in traces.values()]
    keys = [_span_key(s) for group in groups.values() for s in group]
    stored = set(
        Step.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True)
    )
    last = dict(
        Step.objects.filter(trace_id__in=ids)
        .values("trace_id")
        .annotate(last=Max("step_number"))
        .values_list("trace_id", "last")
    )
    failed_before = set(
        Step.objects.filter(trace_id__in=ids, ok=False)
        .values_list("trace_id", flat=True)
        .distinct()
    )
    steps: list[Step] = []
    roots: dict[str, SpanIn] = {}
    for hex_id, group in groups.items():
        trace = traces[hex_id]
        fresh = list({_span_key(s): s for s in group if _span_key(s) not in stored}.values())
        result.duplicates += len(group) - len(fresh)
        root = _run_span(fresh)
        if root is not None:
            roots[hex_id] = root
            # Spans are exported as they end, children first: the run span names the
            # query and the agent, whatever an earlier request guessed.
            trace.agent_id = agent_of[_agent_name(group)]
            values = _trace_values(group, redactor)
            trace.query, trace.query_hash = values["query"], values["query_hash"]
            trace.session_id = values["session_id"]
        steps += _steps_new(
            trace,
            fresh,
            number=last.get(trace.pk) or 0,
            failed_before=trace.pk in failed_before,
            rules=rules,
            redactor=redactor,
        )
    Step.objects.bulk_create(steps)
    rollups_record_steps(steps=steps)
    result.accepted += len(steps)
    return _traces_settle(traces, roots)


_SETTLED_FIELDS = [
    "agent_id",
    "query",
    "query_hash",
    "session_id",
    "status",
    "outcome",
    "error_type",
    "total_steps",
    "failed_steps",
    "total_latency_ms",
    "total_tokens",
    "finished_at",
    "final_answer",
    "learning",
]


def _totals_of(steps: list[Step]) -> dict[str, Any]:
    """A trace's totals from all of its steps in hand (as ``_traces_settle`` reads them)."""
    failed = [s for s in steps if not s.ok]
    actions = [s for s in steps if s.phase == Step.Phase.ACTION]
    return {
        "steps": len(steps),
        "latency": sum(s.latency_ms for s in steps),
        "prompt": sum(s.prompt_tokens for s in steps),
        "completion": sum(s.completion_tokens for s in steps),
        "failed": len(failed),
        "tool_successes": sum(1 for s in actions if s.ok),
        "action_steps": len(actions),
        "first_error": next((s.error_type for s in failed if s.error_type), ""),
    }


def _trace_settle(
    trace: Trace, root: SpanIn | None, totals: dict[str, Any], redactor: _Redactor | None = None
) -> bool:
    """Set a trace's status, outcome and totals; True when its run has just ended (its
    root span arrived for the first time)."""
    failed = bool(totals.get("failed")) or (root is not None and root.failed)
    trace.status = Trace.Status.FAILED if failed else Trace.Status.FINISHED
    if failed:
        trace.outcome = Trace.Outcome.FAILED
    elif totals.get("tool_successes"):
        trace.outcome = Trace.Outcome.ANSWERED_FROM_DATA
    else:
        trace.outcome = Trace.Outcome.ANSWERED_WITHOUT_DATA
    trace.error_type = totals.get("first_error") or ""
    # Each span's figures are clamped to an integer column; their sums are clamped too.
    trace.total_steps = _int(totals.get("steps"))
    trace.failed_steps = _int(totals.get("failed"))
    if root is not None:
        trace.total_latency_ms = _int((root.end_ns - root.start_ns) // 1_000_000)
    elif trace.finished_at is None:  # no run span yet: the steps' time so far
        trace.total_latency_ms = _int(totals.get("latency"))
    # else a child that came after its run span: the run's own duration stands
    trace.total_tokens = _int((totals.get("prompt") or 0) + (totals.get("completion") or 0))
    if root is None:
        return False
    just_ended = trace.finished_at is None
    trace.finished_at = _moment(root.end_ns)
    if just_ended:  # owed to the learning loop until it has taken the run
        trace.learning = Trace.Learning.PENDING
    answer = _messages_text(root.attributes.get("gen_ai.output.messages"))
    trace.final_answer = (redactor.text(answer) if redactor else redact_text(answer))[:TEXT_MAX]
    return just_ended


def _traces_settle(traces: dict[str, Trace], roots: dict[str, SpanIn]) -> list[str]:
    """Recompute stored traces' status and totals in a few statements; return the ids of
    the runs that have just ended."""
    ids = [t.pk for t in traces.values()]
    totals = {
        row["trace_id"]: row
        for row in Step.objects.filter(trace_id__in=ids)
        .values("trace_id")
        .annotate(
            steps=Count("id"),
            latency=Sum("latency_ms"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            failed=Count("id", filter=Q(ok=False)),
            tool_successes=Count("id", filter=Q(phase=Step.Phase.ACTION, ok=True)),
            action_steps=Count("id", filter=Q(phase=Step.Phase.ACTION)),
        )
    }
    for trace_id, error_type in (
        Step.objects.filter(trace_id__in=ids, ok=False)
        .exclude(error_type="")
        .order_by("trace_id", "step_number")
        .values_list("trace_id", "error_type")
    ):
        totals.setdefault(trace_id, {}).setdefault("first_error", error_type)
    ended: list[tuple[Trace, int, int]] = []
    for hex_id, trace in traces.items():
        row = totals.get(trace.pk) or {}
        if _trace_settle(trace, roots.get(hex_id), row):
            ended.append((trace, row.get("failed") or 0, row.get("action_steps") or 0))
    # One pipelined statement per trace: bulk_update's CASE expressions cost more CPU to
    # build than the whole rest of the request.
    fields = [cast(Field, Trace._meta.get_field(name)) for name in _SETTLED_FIELDS]
    pk = cast(Field, Trace._meta.pk)
    assignments = ", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in fields)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {Trace._meta.db_table} SET {assignments} WHERE id = %s",
            [
                [f.get_db_prep_save(getattr(t, f.attname), connection) for f in fields]
                + [pk.get_db_prep_value(t.pk, connection)]  # SQLite keeps UUIDs as hex text
                for t in traces.values()
            ],
        )
    rollups_record_runs(runs=ended)
    return [str(trace.pk) for trace, _, _ in ended]


def _runs_ended(trace_ids: list[str]) -> None:
    """Tell the learning loop, once per request, which runs have just ended. The receiver
    only hands them off (a worker scores and reflects on them), so the exporter's request
    does not wait on learning. The runs are marked ``Trace.Learning.PENDING`` in the same
    commit as their spans, so a hand-off lost here is retried by the learning sweep."""
    try:
        external_runs_ended.send(sender=Trace, trace_ids=trace_ids)
    except Exception:  # the spans are stored, the runs marked: the sweep retries them
        logger.exception("otlp.runs_ended_failed", extra={"trace_ids": trace_ids})
