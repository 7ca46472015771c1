"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Max, Min, OuterRef, Q, QuerySet, Subquery

from traces.models import Feedback, Job, Step, Trace

VIEW_ALL_TRACES = "traces.view_all_traces"
VIEW_JOBS = "traces.view_job"
# Sending OpenTelemetry traces to /otlp/v1/traces (ops and admins, or a service account).
INGEST_TRACES = "traces.ingest_traces"


def user_sees_all_traces(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(VIEW_ALL_TRACES))  # type: ignore[union-attr]


def traces_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Trace]:
    """Holders of ``traces.view_all_traces`` (ops, admins) see every trace; anyone else
    signed in sees only the runs they started, so another user's trace id is a 404."""
    qs = Trace.objects.select_related("agent")
    if not user.is_authenticated:
        return qs.none()
    if user_sees_all_traces(user):
        return qs
    return qs.filter(created_by_id=user.pk)


def steps_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Step]:
    if not user.is_authenticated:
        return Step.objects.none()
    if user_sees_all_traces(user):
        # Not `trace IN (every trace)`: that semi-join over the whole table was most of the
        # steps API's time.
        return Step.objects.all()
    return Step.objects.filter(trace__in=traces_visible_to(user=user).values("pk"))


def conversations_of(*, user: AbstractBaseUser | AnonymousUser, limit: int = 20) -> list[dict]:
    """The user's own chat conversations, latest activity first: one row per session with
    its first question, its run count and when it started and last moved.

    Scoped to runs the user started, whatever their role: this is a personal history.
    """
    if not user.is_authenticated:
        return []
    own = Trace.objects.filter(created_by_id=user.pk, source="chat").exclude(session_id="")
    first_query = (
        Trace.objects.filter(created_by_id=user.pk, session_id=OuterRef("session_id"))
        .order_by("created_at")
        .values("query")[:1]
    )
    return list(
        own.order_by()
        .values("session_id")
        .annotate(
            started_at=Min("created_at"),
            last_at=Max("created_at"),
            runs=Count("id"),
            first_query=Subquery(first_query),
        )
        .order_by("-last_at")[:limit]
    )


def conversation_exists(*, user: AbstractBaseUser | AnonymousUser, session_id: str) -> bool:
    if not user.is_authenticated or not session_id:
        return False
    return Trace.objects.filter(created_by_id=user.pk, session_id=session_id).exists()


def steps_after(*, trace_id: str, after: int) -> list[Step]:
    """A run's steps numbered above ``after``, in order (a live view catching up)."""
    return list(
        Step.objects.filter(trace_id=trace_id, step_number__gt=after).order_by("step_number")
    )


def runs_for_chat(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Trace]:
    """Runs the user may see, each with ``my_rating``: the user's own thumbs up/down."""
    mine = Feedback.objects.filter(trace_id=OuterRef("pk"), user=user.pk or 0).values("rating")
    return traces_visible_to(user=user).annotate(my_rating=Subquery(mine[:1]))


def run_for_chat(*, user: AbstractBaseUser | AnonymousUser, trace_id: str) -> Trace | None:
    return runs_for_chat(user=user).filter(pk=trace_id).first()


# The phases of one ReAct round, in the order the timeline shows them side by side.
_ROUND_SLOTS = {Step.Phase.REASONING: "reasoning", Step.Phase.REFLECTION: "reflection"}
TEXT_FILTER_MAX_LENGTH = 200


@dataclass
class TimelineRound:
    """One round of a run: the thought, the action with its validated input, the
    observation and the reflection, plus whatever else the round recorded."""

    number: int
    reasoning: Step | None = None
    action: Step | None = None
    # Calls made on the round's behalf: pre-condition lookups, failed calls a handler took over.
    lookups: list[Step] = field(default_factory=list)
    reflection: Step | None = None
    # Final answer, fallback, stop, Self-RAG phases, and anything recorded twice.
    others: list[Step] = field(default_factory=list)

    @property
    def proposed_input(self) -> dict[str, Any] | None:
        """What the model asked for, before schema validation, pre-conditions and adapters."""
        if self.reasoning is None or not self.reasoning.ok or not self.reasoning.tool_name:
            return None
        return self.reasoning.action_input

    @property
    def validated_input(self) -> dict[str, Any] | None:
        """The input the tool was called with; None when the call was rejected or not made.

        The runtime stores it on the round's action step (``Step.action_input``) after the
        schema check, the policy's pre-conditions and adapters; a rejected action step
        keeps the model's proposal instead, marked ``details.rejected``.
        """
        if self.action is None or self.action.details.get("rejected"):
            return None
        return self.action.action_input

    @property
    def input_changed(self) -> bool:
        validated = self.validated_input
        return validated is not None and validated != self.proposed_input

    @property
    def steps(self) -> list[Step]:
        slots = [self.reasoning, *self.lookups, self.action, self.reflection, *self.others]
        return sorted((s for s in slots if s is not None), key=lambda s: s.step_number)


def steps_group_by_round(steps: Iterable[Step]) -> list[TimelineRound]:
    """Group a run's steps (in step order) into rounds; no queries."""
    rounds: dict[int, TimelineRound] = {}
    for step in sorted(steps, key=lambda s: s.step_number):
        rnd = rounds.setdefault(step.round_number, TimelineRound(number=step.round_number))
        slot = _ROUND_SLOTS.get(step.phase)  # type: ignore[call-overload]
        if step.phase == Step.Phase.ACTION:
            if step.details.get("auxiliary"):
                rnd.lookups.append(step)
                continue
            slot = "action"
        if slot is not None and getattr(rnd, slot) is None:
            setattr(rnd, slot, step)
        else:
            rnd.others.append(step)
    return [rounds[number] for number in sorted(rounds)]


def trace_timeline(*, trace: Trace) -> list[TimelineRound]:
    """The step timeline of one trace, round by round, in one query."""
    return steps_group_by_round(trace.steps.order_by("step_number"))


def strategy_ids_applied(rounds: Iterable[TimelineRound]) -> list[int]:
    """Ids of the policy strategies that fired anywhere in these rounds, first seen first."""
    seen: dict[int, None] = {}
    for rnd in rounds:
        for step in rnd.steps:
            for applied in step.strategies_applied or ():
                strategy_id = applied.get("id") if isinstance(applied, dict) else None
                if isinstance(strategy_id, int) and not isinstance(strategy_id, bool):
                    seen.setdefault(strategy_id, None)
    return list(seen)


TRACE_PAGE_SIZE = 50
# Deeper pages are an ever longer index walk; past this the filters narrow the list.
TRACE_PAGE_MAX = 1000


@dataclass(frozen=True)
class TracePage:
    """One page of a trace list, newest first, without a count of all matching traces."""

    object_list: list[Trace]  # the name Django's Page uses
    number: int
    has_next: bool

    def __iter__(self) -> Iterator[Trace]:
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def previous_page_number(self) -> int:
        return self.number - 1


def trace_page(
    qs: QuerySet[Trace], *, number: str | int | None, size: int = TRACE_PAGE_SIZE
) -> TracePage:
    """Page ``number`` (1 for anything invalid, at most ``TRACE_PAGE_MAX``) of ``qs``,
    newest first with the id breaking ties so that pages neither skip nor repeat rows."""
    text = str(number or "1")
    page = int(text) if text.isdigit() and len(text) < 6 else 1
    page = min(max(page, 1), TRACE_PAGE_MAX)
    offset = (page - 1) * size
    rows = list(qs.order_by("-created_at", "-id")[offset : offset + size + 1])
    return TracePage(object_list=rows[:size], number=page, has_next=len(rows) > size)


def traces_matching_text(qs: QuerySet[Trace], *, text: str) -> QuerySet[Trace]:
    """Traces whose query or final answer contains ``text`` (case-insensitive)."""
    text = text.strip()[:TEXT_FILTER_MAX_LENGTH]
    if not text:
        return qs
    return qs.filter(Q(query__icontains=text) | Q(final_answer__icontains=text))


def user_can_view_jobs(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.has_perm(VIEW_JOBS))  # type: ignore[union-attr]


def jobs_running(*, limit: int = 50) -> QuerySet[Job]:
    """Running jobs, oldest first: the ones someone is waiting on longest lead."""
    return Job.objects.filter(status=Job.Status.RUNNING).order_by("started_at", "id")[:limit]


def jobs_ended(*, kind: str = "", limit: int = 50) -> QuerySet[Job]:
    """The most recent ended jobs (bounded: the table only grows)."""
    qs = Job.objects.exclude(status=Job.Status.RUNNING)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-started_at", "-id")[:limit]


def tool_call_retries(*, failed_calls: int, last_failed: int | None, last_call: int | None) -> int:
    """How often a run tried again: the tool calls made after a failed one, whatever their
    input (a rejected call counts as failed). Every failed call but a run's last call was
    followed by another, so this is the failed calls, less one when the last call failed.

    From aggregates a finished run stores (``Trace.retries``) and reports sum, never a pass
    over Steps in order.
    """
    if not failed_calls:
        return 0
    return failed_calls - (1 if last_failed is not None and last_failed == last_call else 0)
