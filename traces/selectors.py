"""Reads of the trace store, scoped to what the requesting user may see."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from traces.models import Job, Step, Trace

VIEW_ALL_TRACES = "traces.view_all_traces"
VIEW_JOBS = "traces.view_job"


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
    return Step.objects.filter(trace__in=traces_visible_to(user=user).values("pk"))


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
