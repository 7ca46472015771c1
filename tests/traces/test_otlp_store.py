"""How ingested spans are stored: a trace sent whole is settled from its spans and written
with COPY; a trace sent in pieces is numbered on and settled from the store; both give the
same rows. A concurrent writer that wins the race costs a retry, never a duplicate."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.models import Sum

from traces import otlp
from traces.bulk import model_new, rows_copy
from traces.models import Step, Trace
from traces.otlp import STATUS_ERROR, SpanIn, otlp_spans_ingest

T0 = 1_700_000_000_000_000_000


def _spans(trace_hex: str, *, tool_status: int = 404) -> list[SpanIn]:
    """invoke_agent (root) -> chat, execute_tool (failing with ``tool_status``)."""

    def span(span_id: str, operation: str, start: int, end: int, **attrs: Any) -> SpanIn:
        failed = "error.type" in attrs
        return SpanIn(
            trace_id=trace_hex,
            span_id=span_id,
            parent_span_id="" if operation == "invoke_agent" else "00000000000000a1",
            name=f"{operation} x",
            start_ns=T0 + start * 1_000_000,
            end_ns=T0 + end * 1_000_000,
            status_code=STATUS_ERROR if failed else 0,
            status_message="not found" if failed else "",
            attributes={"gen_ai.operation.name": operation, **attrs},
        )

    return [
        span("00000000000000a2", "chat", 10, 400, **{
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-x",
            "gen_ai.usage.input_tokens": 300,
            "gen_ai.usage.output_tokens": 40,
        }),
        span("00000000000000a3", "execute_tool", 410, 800, **{
            "gen_ai.tool.name": "get_order",
            "http.response.status_code": tool_status,
            "error.type": str(tool_status),
        }),
        span("00000000000000a1", "invoke_agent", 0, 900, **{
            "gen_ai.agent.name": "Store Bot",
            "gen_ai.input.messages": "order 7?",
        }),
    ]  # fmt: skip


SETTLED = [
    "status",
    "outcome",
    "error_type",
    "total_steps",
    "failed_steps",
    "total_latency_ms",
    "total_tokens",
    "finished_at",
    "query",
    "agent_id",
    "learning",
]
STEP_FIELDS = ["step_number", "phase", "tool_name", "ok", "error_type", "prompt_tokens"]


def _stored(trace_hex: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    trace = Trace.objects.values(*SETTLED).get(pk=uuid.UUID(hex=trace_hex))
    steps = list(
        Step.objects.filter(trace_id=uuid.UUID(hex=trace_hex))
        .order_by("step_number")
        .values_list(*STEP_FIELDS)
    )
    return trace, steps


def _runs_counted() -> int:
    from traces.models import RunRollupHourly

    return RunRollupHourly.objects.aggregate(n=Sum("runs"))["n"] or 0


@pytest.mark.django_db
def test_a_trace_sent_whole_and_one_sent_in_pieces_are_stored_alike(error_rules: None) -> None:
    counted = _runs_counted()
    whole, pieces = uuid.uuid4().hex, uuid.uuid4().hex
    result = otlp_spans_ingest(_spans(whole), user_id=None)
    assert (result.accepted, result.duplicates) == (2, 0)

    children, root = _spans(pieces)[:2], _spans(pieces)[2:]
    otlp_spans_ingest(children[:1], user_id=None)
    running = Trace.objects.get(pk=uuid.UUID(hex=pieces))
    # Terminal after each request (the stuck-run sweeper must not take it), not yet ended.
    assert running.status == Trace.Status.FINISHED and running.finished_at is None
    assert running.learning == ""  # nothing owed to the learning loop before the run ends
    otlp_spans_ingest(children[1:], user_id=None)
    assert _runs_counted() == counted + 1  # only the whole trace has ended so far
    otlp_spans_ingest(root, user_id=None)

    whole_trace, whole_steps = _stored(whole)
    pieces_trace, pieces_steps = _stored(pieces)
    assert whole_trace == pieces_trace
    assert whole_steps == pieces_steps
    assert whole_trace["status"] == Trace.Status.FAILED
    # owed to the learning loop from the commit that ended it (no commit hook runs here)
    assert whole_trace["learning"] == Trace.Learning.PENDING
    assert whole_trace["error_type"] == "RESOURCE_NOT_FOUND"
    assert (whole_trace["total_steps"], whole_trace["failed_steps"]) == (2, 1)
    assert whole_trace["total_latency_ms"] == 900 and whole_trace["total_tokens"] == 340
    assert [s[:2] for s in whole_steps] == [(1, Step.Phase.REASONING), (2, Step.Phase.ACTION)]
    assert _runs_counted() == counted + 2  # each run counted once, when its root span arrived


@pytest.mark.django_db
def test_traces_stored_already_are_told_apart_from_new_ones_in_one_request(
    error_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that carries traces started by earlier requests among new ones, wherever
    they come in it: the new ones are written with COPY in one pass, the others numbered
    on from the store, and every run is settled and counted once."""
    counted = _runs_counted()
    first, middle, last = (uuid.uuid4().hex for _ in range(3))
    for started in (first, middle, last):
        otlp_spans_ingest(_spans(started)[:1], user_id=None)  # the chat span alone
    new = [uuid.uuid4().hex for _ in range(40)]  # enough rows for several COPY batches
    spans = [s for hex_id in new[:20] for s in _spans(hex_id)]
    spans = _spans(first)[1:] + spans + _spans(middle)[1:]
    spans += [s for hex_id in new[20:] for s in _spans(hex_id)] + _spans(last)[1:]

    passes: list[bool] = []
    store = otlp._spans_store

    def spans_store(*args: Any, stored: dict[str, str] | None) -> None:
        passes.append(stored is not None)  # optimistic: the traces found were read first
        store(*args, stored=stored)

    monkeypatch.setattr(otlp, "_spans_store", spans_store)
    result = otlp_spans_ingest(spans, user_id=None)

    assert passes == [True]  # no COPY refused, no second pass
    assert (result.accepted, result.duplicates) == (2 * 40 + 3, 0)
    assert sorted(result.trace_ids) == sorted(
        str(uuid.UUID(hex=h)) for h in [first, middle, last, *new]
    )
    whole, whole_steps = _stored(new[0])
    for hex_id in (first, middle, last, *new):
        assert _stored(hex_id) == (whole, whole_steps)
    assert [s[:2] for s in whole_steps] == [(1, Step.Phase.REASONING), (2, Step.Phase.ACTION)]
    assert _runs_counted() == counted + 43  # each run counted once


@pytest.mark.django_db
def test_a_span_sent_twice_in_one_request_is_stored_once(error_rules: None) -> None:
    trace_hex = uuid.uuid4().hex
    spans = _spans(trace_hex)
    result = otlp_spans_ingest([*spans, spans[1]], user_id=None)
    assert (result.accepted, result.duplicates) == (2, 1)
    assert Step.objects.filter(trace_id=uuid.UUID(hex=trace_hex)).count() == 2


@pytest.mark.django_db
def test_a_writer_that_wins_the_race_costs_a_retry_not_a_duplicate(
    error_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    before = _stored(trace_hex)
    # The race: another request commits the trace between this one's read and its COPY.
    monkeypatch.setattr(otlp, "_traces_stored", lambda ids: {})
    result = otlp_spans_ingest(_spans(trace_hex), user_id=None)
    assert (result.accepted, result.duplicates) == (0, 2)  # the root span is no step
    assert result.trace_ids == [str(uuid.UUID(hex=trace_hex))]
    assert _stored(trace_hex) == before


@pytest.mark.django_db
def test_rows_copy_raises_integrity_error_and_model_new_refuses_unknown_fields() -> None:
    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    number_one = {"trace_id": trace.pk, "step_number": 1, "started_at": trace.started_at}
    again = model_new(Step, {**number_one, "phase": Step.Phase.REASONING})
    with pytest.raises(IntegrityError), transaction.atomic():
        rows_copy(Step, [again])
    with pytest.raises(TypeError, match="Step has no field trace"):
        model_new(Step, {"trace": trace})
    first, second = model_new(Step, {}), model_new(Step, {})
    assert first.details == {} and first.details is not second.details
    assert first.action_type == Step.ActionType.NONE and first.ok is True


@pytest.mark.django_db
def test_the_agent_of_an_exporter_is_looked_up_once_per_process(error_rules: None) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import Agent

    otlp_spans_ingest(_spans(uuid.uuid4().hex), user_id=None)
    with CaptureQueriesContext(connection) as queries:
        otlp_spans_ingest(_spans(uuid.uuid4().hex), user_id=None)
    assert not [q["sql"] for q in queries if Agent._meta.db_table in q["sql"]]
    # A change of any Agent in this process is seen at once.
    Agent.objects.filter(slug="store-bot").update(slug="store-bot-old")
    Agent.objects.get(slug="store-bot-old").save()
    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    filed = Trace.objects.get(pk=uuid.UUID(hex=trace_hex)).agent
    assert filed.slug == "store-bot" and not filed.is_active


@pytest.mark.django_db(transaction=True)
def test_an_agent_deleted_by_another_process_costs_a_retry_not_the_request(
    error_rules: None,
) -> None:
    from django.db import connection

    from agents.external_runs import external_agent_ids
    from agents.models import Agent

    remembered = external_agent_ids({"Store Bot"})["Store Bot"]
    with connection.cursor() as cursor:  # no post_delete here: another process deleted it
        cursor.execute(f"DELETE FROM {Agent._meta.db_table} WHERE id = %s", [remembered])
    trace_hex = uuid.uuid4().hex
    result = otlp_spans_ingest(_spans(trace_hex), user_id=None)
    assert result.accepted == 2
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    assert trace.agent_id != remembered and trace.agent.slug == "store-bot"
    assert Step.objects.filter(trace_id=trace.pk).count() == 2


@pytest.mark.django_db
def test_a_secret_anywhere_in_a_span_reaches_no_stored_row(
    error_rules: None, settings: Any
) -> None:
    """Every text an exporter controls is redacted: the span's name, operation, model, tool
    call id, arguments, result, error and messages; a known secret verbatim, a card
    number and a ``password=`` pair by their shape."""
    from django.core import serializers

    settings.LLM_API_KEY = "Zq8-llm-key-in-a-span"
    key, card = settings.LLM_API_KEY, "4111 1111 1111 1111"
    trace_hex = uuid.uuid4().hex
    spans = _spans(trace_hex)
    chat, tool, root = spans
    chat.name = f"chat {key}"
    chat.attributes.update(
        {
            "gen_ai.request.model": f"gpt-{key}",
            "gen_ai.provider.name": f"p-{key}",
            "gen_ai.output.messages": f"use password=hunter2secret and {card}",
        }
    )
    tool.attributes.update(
        {
            "gen_ai.tool.call.id": f"call-{key}",
            "gen_ai.tool.name": f"get_{key}",
            "gen_ai.tool.call.arguments": json.dumps({"card": card, "api_key": "kept-out-1"}),
            "gen_ai.tool.call.result": f"echo {key}",
            "url.full": f"https://shop.example/orders?token={key}",
        }
    )
    tool.status_message = f"refused {key}"
    root.attributes["gen_ai.input.messages"] = f"my card is {card}, key {key}"
    root.attributes["gen_ai.agent.name"] = f"Bot {key}"
    # An operation of the exporter's own naming is stored when it carries a failure of its
    # own (in a trace of its own: no model or tool span there explains it).
    odd_hex = uuid.uuid4().hex
    odd = SpanIn(
        trace_id=odd_hex,
        span_id="00000000000000a4",
        parent_span_id="00000000000000a1",
        name="custom",
        start_ns=T0 + 850 * 1_000_000,
        end_ns=T0 + 860 * 1_000_000,
        status_code=2,
        status_message="",
        attributes={"gen_ai.operation.name": f"custom_{key}"},
    )
    result = otlp_spans_ingest([*spans, odd], user_id=None)
    assert result.accepted == 3
    traces = Trace.objects.filter(pk__in=[uuid.UUID(hex=trace_hex), uuid.UUID(hex=odd_hex)])
    stored = serializers.serialize(
        "json",
        [
            *traces,
            *(trace.agent for trace in traces),
            *Step.objects.filter(trace__in=traces),
        ],
    )
    odd_step = Step.objects.get(trace_id=uuid.UUID(hex=odd_hex))
    assert odd_step.details["otel"]["operation"] == "custom_[REDACTED]"
    for secret in (key, "4111", "hunter2secret", "kept-out-1"):
        assert secret not in stored, secret
    assert stored.count("[REDACTED]") >= 14


@pytest.mark.django_db
def test_a_text_redacted_once_per_request_is_redacted_afresh_in_the_next(
    error_rules: None, settings: Any
) -> None:
    """The ingest redacts each recurring short text (provider, model, span and tool names,
    error messages) once per request. A secret configured after one request is redacted
    from the same text in the next: what a request remembers is not kept for later ones."""
    settings.LLM_API_KEY = "Zq8-first-configured-key"
    later = "Zq8-later-key"  # short: the provider column holds 20 characters
    first_hex, second_hex = uuid.uuid4().hex, uuid.uuid4().hex
    batches = []
    for trace_hex in (first_hex, second_hex):
        chat, tool, root = _spans(trace_hex)
        chat.attributes["gen_ai.provider.name"] = f"p {later}"
        tool.status_message = f"refused {later}"
        batches.append([chat, tool, root])
    twin_hex = uuid.uuid4().hex
    twin = _spans(twin_hex)
    twin[0].attributes["gen_ai.provider.name"] = f"p {later}"

    otlp_spans_ingest([*batches[0], *twin], user_id=None)
    settings.LLM_API_KEY = later
    otlp_spans_ingest(batches[1], user_id=None)

    def stored(trace_hex: str) -> str:
        return json.dumps(
            list(
                Step.objects.filter(trace_id=uuid.UUID(hex=trace_hex)).values(
                    "llm_backend", "error_detail"
                )
            )
        )

    # Not a secret yet: kept, the same in both traces of the first request.
    assert stored(first_hex).count(later) == 2
    assert later in stored(twin_hex)
    # A secret by the second request: redacted, though the first request redacted (and
    # remembered) the very same texts without it.
    assert later not in stored(second_hex)
    assert stored(second_hex).count("[REDACTED]") == 2


def test_the_request_redactor_gives_what_redact_text_gives() -> None:
    from traces.redaction import known_secrets, redact_text

    redactor = otlp._Redactor()
    texts = [
        "openai",
        "password=hunter2secret",
        "card 4111 1111 1111 1111",
        "x" * 300 + " token=abcdef123456",
        "",
    ]
    for text in texts * 2:  # the second time from what the redactor remembers
        assert redactor.text(text) == redact_text(text, secrets=known_secrets())
    assert redactor.clean("password=hunter2secret", 12) == "password=[RE"
    assert redactor.clean(None, 5) == ""


def _step_rows(trace: Trace, numbers: range) -> list[Step]:
    return [
        model_new(
            Step,
            {
                "trace_id": trace.pk,
                "step_number": n,
                "started_at": trace.started_at,
                "phase": Step.Phase.REASONING,
                "details": {"n": n},
            },
        )
        for n in numbers
    ]


@pytest.mark.django_db(transaction=True)
def test_a_copy_stream_stores_every_batch_while_the_caller_goes_on(error_rules: None) -> None:
    """Batches go one COPY at a time, each ended without waiting for the database; leaving
    the block waits for all of them."""
    from traces.bulk import CopyStream

    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    with transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(10, 40)))
        stream.add(Step, _step_rows(trace, range(40, 45)))  # queued, or sent once it is stored
        stream.add(Step, [])
        assert len(stream.queued) <= 2
        while not stream.idle():  # the caller's work, meanwhile
            pass
        # Both stored, and the next batch's COPY started ahead: its rows go as they come.
        assert stream.opening is Step or stream.open is Step
        while stream.opening is not None:
            stream.poll()
        stream.add(Step, _step_rows(trace, range(45, 50)))
        assert not stream.queued  # sent at once, into the COPY under way
        while not stream.idle():
            pass
        assert stream.opening is Step or stream.open is Step  # not needed: ends empty
    numbers = list(
        Step.objects.filter(trace=trace, step_number__gte=10).values_list("step_number", flat=True)
    )
    assert sorted(numbers) == list(range(10, 50))
    assert Step.objects.get(trace=trace, step_number=47).details == {"n": 47}


@pytest.mark.django_db(transaction=True)
def test_a_copy_stream_raises_a_refused_batch_and_leaves_the_connection_usable(
    error_rules: None,
) -> None:
    """A unique violation in a batch surfaces as Django's IntegrityError, the transaction
    rolls back whole, and an error of the caller's own while a COPY is in flight is the one
    raised: the stream reads the answer and drops it, so the rollback can run."""
    from traces.bulk import CopyStream

    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    before = Step.objects.count()
    with pytest.raises(IntegrityError), transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(10, 20)))
        stream.add(Step, _step_rows(trace, range(1, 3)))  # numbers the trace already has
    assert Step.objects.count() == before

    # Without reading the answer in flight, the rollback would fail and Django would drop
    # the connection: the same one must serve on.
    from django.db import connection

    raw = connection.connection
    with pytest.raises(ZeroDivisionError), transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(20, 30)))
        stream.add(Step, _step_rows(trace, range(30, 35)))  # queued, or sent
        _ = 1 / 0
    assert Step.objects.count() == before  # rolled back, and the connection answers

    # Refused: its answer is read while the caller goes on (and raised there), or not yet
    # when the caller fails (the caller's error is raised). The connection serves on.
    with pytest.raises((ValueError, IntegrityError)), transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(1, 3)))
        raise ValueError("the caller's own error")
    assert Step.objects.filter(trace=trace).count() == 2
    assert connection.connection is raw

    # An error while a COPY is under way, waiting for rows: it is ended as failed. Or
    # while one was just started ahead, its go-ahead not read yet.
    for go_ahead_read in (True, False):
        with pytest.raises(ValueError), transaction.atomic(), CopyStream() as stream:
            stream.add(Step, _step_rows(trace, range(60, 70)))
            while not stream.idle():
                pass
            if go_ahead_read:
                while stream.opening is not None:
                    stream.poll()
                assert stream.open is Step
            raise ValueError("the caller's own error")
        assert Step.objects.filter(trace=trace).count() == 2
        assert connection.connection is raw


def _details_of(trace: Trace) -> set[str]:
    return set(
        Step.objects.filter(trace=trace, step_number__gte=10).values_list("error_detail", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_a_copy_stream_runs_a_queued_statement_after_the_batches_before_it(
    error_rules: None,
) -> None:
    """A statement queued behind batches (the ingest's rollup upserts) is sent once they
    are stored, its values bound into its text, in the same transaction."""
    from traces.bulk import CopyStream

    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    detail = 'it\'s "quoted", 50% of it; -- not a comment'
    update = (
        f"UPDATE {Step._meta.db_table} SET error_detail = %s "
        "WHERE trace_id = %s AND step_number >= %s"
    )
    with transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(10, 40)))
        stream.add(Step, _step_rows(trace, range(40, 45)))
        # It reads the rows of the batches before it: it runs after them.
        stream.execute(update, [detail, trace.pk, 10])
    assert _details_of(trace) == {detail}

    # Behind a COPY started ahead for rows that never came: that one ends empty first.
    with transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(45, 50)))
        while not stream.idle():
            pass
        assert stream.opening is Step or stream.open is Step
        stream.execute(update, ["after", trace.pk, 45])
    assert _details_of(trace) == {detail, "after"}

    # Sent first in its transaction, a statement still runs inside it.
    with pytest.raises(ValueError), transaction.atomic(), CopyStream() as stream:
        stream.execute(update, ["rolled back", trace.pk, 10])
        stream.flush()
        raise ValueError("the caller's own error")
    assert _details_of(trace) == {detail, "after"}

    # A refused statement raises as Django's error on leaving, and everything rolls back.
    from django.db import DataError

    with pytest.raises(DataError), transaction.atomic(), CopyStream() as stream:
        stream.add(Step, _step_rows(trace, range(50, 60)))
        stream.execute("SELECT 1 / %s", [0])
    assert not Step.objects.filter(trace=trace, step_number__gte=50).exists()


@pytest.mark.django_db
def test_a_copy_stream_on_another_database_runs_a_statement_at_once(
    error_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elsewhere than PostgreSQL nothing is in flight: batches are written when added, and a
    statement runs when queued."""
    from traces.bulk import CopyStream

    trace_hex = uuid.uuid4().hex
    otlp_spans_ingest(_spans(trace_hex), user_id=None)
    trace = Trace.objects.get(pk=uuid.UUID(hex=trace_hex))
    with CopyStream() as stream:
        monkeypatch.setattr(stream.connection, "vendor", "sqlite")
        stream.add(Step, _step_rows(trace, range(10, 15)))
        stream.execute(
            f"UPDATE {Step._meta.db_table} SET error_detail = %s WHERE trace_id = %s "
            "AND step_number >= %s",
            ["now", trace.pk, 10],
        )
        assert stream.idle() and not stream.in_flight
        assert _details_of(trace) == {"now"}


@pytest.mark.django_db
def test_ingested_steps_are_counted_in_the_step_rollups_once(error_rules: None) -> None:
    """The upserts of a request's new traces go behind their last COPY: each step counted
    once, each failure as failed."""
    from traces.models import StepRollupDaily, StepRollupHourly

    def counted(model: Any) -> tuple[int, int, int]:
        totals = model.objects.aggregate(
            steps=Sum("steps"), failed=Sum("failed_steps"), actions=Sum("action_steps")
        )
        return (totals["steps"] or 0, totals["failed"] or 0, totals["actions"] or 0)

    before = counted(StepRollupHourly), counted(StepRollupDaily)
    spans = [span for _ in range(40) for span in _spans(uuid.uuid4().hex)]
    result = otlp_spans_ingest(spans, user_id=None)
    assert result.accepted == 80
    for model, (steps, failed, actions) in zip(
        (StepRollupHourly, StepRollupDaily), before, strict=True
    ):
        assert counted(model) == (steps + 80, failed + 40, actions + 40)


@pytest.mark.django_db
def test_the_request_remembers_each_distinct_failure_classified_once(error_rules: None) -> None:
    from traces.classifier import error_rules_load

    rules = error_rules_load()
    redactor = otlp._Redactor()
    tool = _spans(uuid.uuid4().hex)[1]
    same = _spans(uuid.uuid4().hex)[1]
    other = _spans(uuid.uuid4().hex, tool_status=503)[1]
    listed = _spans(uuid.uuid4().hex)[1]
    listed.attributes["gen_ai.tool.call.result"] = ["not", "hashable"]
    for span in (tool, same, other, listed):
        assert redactor.error_type(span, rules) == otlp.span_classify(span, rules)
    assert redactor.error_type(tool, rules) != redactor.error_type(other, rules)
    assert len(redactor._classified) == 2  # the list-valued one is classified, not kept
