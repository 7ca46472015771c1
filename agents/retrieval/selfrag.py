"""The Self-RAG mode: retrieve -> draft -> self-grade, rewriting the query and retrieving
again until the draft is grounded and helpful or the hard retry cap is hit.

Each attempt writes a ``retrieval``, a ``draft`` and a ``grade`` step (through the
``StepSink``, before the next phase starts), and the run ends with a ``final``,
``fallback`` or ``stopped`` step. An ungrounded draft is never delivered: after the cap
the most recent grounded draft is (marked ``capped``), or else the fallback reply.
Model output is parsed strictly; an unreadable draft or grade is a failed attempt.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agents.customer_text import customer_text_clean
from agents.llm.base import ChatMessage, LLMClient, LLMError, LLMResponse
from agents.llm.schemas import RagDraft, RagGrade
from agents.parsing import FENCE_PATTERN
from agents.prompts import rag_draft_messages, rag_grade_messages
from agents.retrieval.knowledge import RetrievedDoc, query_words
from agents.runtime import Phase, RunOutcome, StepSink
from traces.classifier import CompiledRule, ErrorEvent, classify_error
from traces.models import Trace
from traces.records import StepRecord

SearchFn = Callable[[str, int], Awaitable[list[RetrievedDoc]]]
ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_RAW_CHARS = 500
CRITIQUE_KEYWORDS = 6


class RagPhase(StrEnum):
    """The Self-RAG phases; terminal steps use ``agents.runtime.Phase``."""

    RETRIEVAL = "retrieval"
    DRAFT = "draft"
    GRADE = "grade"


@dataclass(frozen=True)
class SelfRagConfig:
    max_retries: int = 2
    top_k: int = 3
    fallback_reply: str = (
        "Sorry, I could not find a reliable answer to this in our help articles. "
        "A member of our support team will follow up."
    )


class RagFormatError(Exception):
    """A draft or grade reply that is not the JSON object its schema asks for."""

    def __init__(self, reason: str, *, raw: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw[:MAX_RAW_CHARS]


def parse_model_output(schema: type[ModelT], text: str) -> ModelT:
    """Strict: the whole reply, optionally inside a ```json fence, validates as ``schema``."""
    body = text.strip()
    fenced = FENCE_PATTERN.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise RagFormatError(f"empty reply; expected one {schema.__name__} JSON object", raw=text)
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'reply'}: {error['msg']}"
            for error in exc.errors()[:3]
        )
        raise RagFormatError(f"not a valid {schema.__name__}: {problems}", raw=text) from None


def rewrite_search_query(*, question: str, grade: RagGrade) -> str:
    """The next search query: the grader's proposal, else the question plus the key
    words of the critique that the question does not already contain."""
    proposal = (grade.improved_search_query or "").strip()
    if proposal:
        return proposal
    known = set(query_words(question))
    extra = [word for word in query_words(grade.critique) if word not in known]
    return " ".join([question.strip(), *extra[:CRITIQUE_KEYWORDS]]).strip()


class _Stop(Exception):
    """The model backend failed: end the run with a ``stopped`` step."""


class SelfRagRun:
    """One Self-RAG run over one question; ``selfrag_execute`` is its entry point."""

    def __init__(
        self,
        *,
        query: str,
        llm: LLMClient,
        sink: StepSink,
        rules: list[CompiledRule],
        config: SelfRagConfig,
        search: SearchFn,
    ) -> None:
        self.query = query
        self.llm = llm
        self.sink = sink
        self.rules = rules
        self.config = config
        self.search = search
        self.outcome: RunOutcome | None = None
        # The error type of the latest attempt that failed with one; the fallback carries it.
        self.last_error_type = ""
        # A redelivered run's steps, by (attempt, phase): those phases are taken from the
        # record, neither asked of the model again nor written twice.
        self.recorded: dict[tuple[int, str], Any] = {}

    def resume_from(self, steps: Sequence[Any]) -> RunOutcome | None:
        """Take a redelivered run's recorded steps; return its outcome if it had ended."""
        for step in steps:
            self.recorded[(step.round_number, str(step.phase))] = step
            if step.phase == Phase.FINAL:
                return RunOutcome(
                    "finished", step.response_summary, outcome=Trace.Outcome.ANSWERED_FROM_DATA
                )
            if step.phase == Phase.FALLBACK:
                return RunOutcome(
                    "fallback", step.response_summary, step.error_type, Trace.Outcome.HANDED_OVER
                )
            if step.phase == Phase.STOPPED:
                return RunOutcome(
                    "failed", step.response_summary, step.error_type, Trace.Outcome.FAILED
                )
        return None

    async def run(self) -> RunOutcome:
        search_query = self.query
        grounded_draft: tuple[int, str] | None = None
        attempts = self.config.max_retries + 1
        try:
            for attempt in range(1, attempts + 1):
                docs = await self._retrieve(attempt, search_query)
                draft = await self._draft(attempt, docs)
                if draft is None:
                    continue
                grade = await self._grade(attempt, docs, draft)
                if grade is None:
                    continue
                if grade.is_grounded and grade.is_helpful:
                    return await self._final(attempt, draft.answer, capped=False)
                if grade.is_grounded and set(draft.cited_slugs) & {doc.slug for doc in docs}:
                    # Only a draft backed by a retrieved document is worth delivering
                    # after the cap; a grounded "I don't know" is not an answer.
                    grounded_draft = (attempt, draft.answer)
                if attempt < attempts:
                    search_query = rewrite_search_query(question=self.query, grade=grade)
        except _Stop:
            assert self.outcome is not None
            return self.outcome
        if grounded_draft is not None:
            return await self._final(attempts, grounded_draft[1], capped=True, of=grounded_draft[0])
        return await self._fallback(attempts, self.last_error_type)

    # --- phases ----------------------------------------------------------------------
    async def _retrieve(self, attempt: int, search_query: str) -> list[RetrievedDoc]:
        recorded = self.recorded.get((attempt, RagPhase.RETRIEVAL))
        if recorded is not None:
            # A read: search again for the recorded query, keep the documents it found then.
            query = recorded.details.get("search_query", search_query)
            found = {doc.slug: doc for doc in await self.search(query, self.config.top_k)}
            return [found[slug] for slug in recorded.details.get("slugs", []) if slug in found]
        started = time.perf_counter()
        docs = await self.search(search_query, self.config.top_k)
        await self.sink.write_step(
            StepRecord(
                phase=RagPhase.RETRIEVAL,
                round_number=attempt,
                action_input={"query": search_query, "top_k": self.config.top_k},
                error_detail="" if docs else "no published article matched the query",
                response_summary="\n".join(doc.title for doc in docs),
                response_size=sum(len(doc.snippet) for doc in docs),
                latency_ms=int((time.perf_counter() - started) * 1000),
                details={
                    "search_query": search_query,
                    "slugs": [doc.slug for doc in docs],
                    "scores": [doc.score for doc in docs],
                },
            )
        )
        return docs

    async def _draft(self, attempt: int, docs: list[RetrievedDoc]) -> RagDraft | None:
        recorded = self.recorded.get((attempt, RagPhase.DRAFT))
        if recorded is not None:
            if not recorded.ok:  # a format error, counted against the attempt
                self.last_error_type = recorded.error_type
                return None
            return RagDraft(
                answer=recorded.response_summary,
                cited_slugs=recorded.details.get("cited_slugs", []),
            )
        messages = rag_draft_messages(question=self.query, docs=docs)
        response = await self._complete(messages, RagDraft, "rag_draft", attempt)
        try:
            draft = parse_model_output(RagDraft, response.text)
        except RagFormatError as exc:
            await self._format_failure(RagPhase.DRAFT, attempt, exc, response)
            return None
        known = {doc.slug for doc in docs}
        await self.sink.write_step(
            StepRecord(
                phase=RagPhase.DRAFT,
                round_number=attempt,
                response_summary=draft.answer,
                parse_mode="strict",
                details={
                    "cited_slugs": draft.cited_slugs,
                    "unknown_citations": [s for s in draft.cited_slugs if s not in known],
                },
                **_usage(response),
            )
        )
        return draft

    async def _grade(
        self, attempt: int, docs: list[RetrievedDoc], draft: RagDraft
    ) -> RagGrade | None:
        recorded = self.recorded.get((attempt, RagPhase.GRADE))
        if recorded is not None:
            if recorded.error_type:
                self.last_error_type = recorded.error_type
            if "is_grounded" not in recorded.details:  # a format error
                return None
            return RagGrade.model_validate(recorded.details)
        messages = rag_grade_messages(question=self.query, docs=docs, draft=draft.answer)
        response = await self._complete(messages, RagGrade, "rag_grade", attempt)
        try:
            grade = parse_model_output(RagGrade, response.text)
        except RagFormatError as exc:
            await self._format_failure(RagPhase.GRADE, attempt, exc, response)
            return None
        passed = grade.is_grounded and grade.is_helpful
        error_type = ""
        if not grade.is_grounded:
            # A draft the grader caught stating unsupported facts: a hallucination, stopped.
            error_type = classify_error(
                ErrorEvent(
                    source="final_answer",
                    exception_class="UNSUPPORTED_ANSWER",
                    body=grade.critique,
                ),
                self.rules,
            )
            self.last_error_type = error_type
        await self.sink.write_step(
            StepRecord(
                phase=RagPhase.GRADE,
                round_number=attempt,
                thought=grade.critique,
                ok=passed,
                error_type=error_type,
                error_detail="" if passed else grade.critique or "the draft did not pass",
                response_summary=(
                    f"grounded={str(grade.is_grounded).lower()}; "
                    f"helpful={str(grade.is_helpful).lower()}"
                ),
                parse_mode="strict",
                details=grade.model_dump(),
                **_usage(response),
            )
        )
        return grade

    async def _final(self, attempt: int, answer: str, *, capped: bool, of: int = 0) -> RunOutcome:
        cleaned = customer_text_clean(answer)
        answer = cleaned.text
        if not answer:
            # Nothing left once the internal text is out: nothing to deliver.
            return await self._fallback(attempt, self.last_error_type)
        details: dict[str, Any] = {"capped": capped, "outcome": Trace.Outcome.ANSWERED_FROM_DATA}
        if capped:
            details["draft_attempt"] = of
        if cleaned.removed:
            details["removed_from_answer"] = list(cleaned.removed)
        await self.sink.write_step(
            StepRecord(
                phase=Phase.FINAL,
                round_number=attempt,
                action_type="final_answer",
                response_summary=answer,
                details=details,
            )
        )
        # A draft graded grounded in retrieved articles is an answer from the shop's data.
        return RunOutcome("finished", answer, outcome=Trace.Outcome.ANSWERED_FROM_DATA)

    async def _fallback(self, attempt: int, error_type: str) -> RunOutcome:
        reply = customer_text_clean(self.config.fallback_reply).text
        await self.sink.write_step(
            StepRecord(
                phase=Phase.FALLBACK,
                round_number=attempt,
                ok=False,
                error_type=error_type,
                error_detail=f"no grounded draft after {attempt} attempts",
                response_summary=reply,
                details={"capped": True},
            )
        )
        return RunOutcome("fallback", reply, error_type, Trace.Outcome.HANDED_OVER)

    # --- helpers -----------------------------------------------------------------------
    async def _complete(
        self, messages: list[ChatMessage], schema: type[BaseModel], purpose: str, attempt: int
    ) -> LLMResponse:
        try:
            return await self.llm.complete(messages=messages, schema=schema, purpose=purpose)
        except LLMError as exc:
            detail = f"{purpose}: {exc}"
            error_type = classify_error(
                ErrorEvent(source="runtime", exception_class="LLM_ERROR", body=detail), self.rules
            )
            reply = customer_text_clean(self.config.fallback_reply).text
            await self.sink.write_step(
                StepRecord(
                    phase=Phase.STOPPED,
                    round_number=attempt,
                    ok=False,
                    error_type=error_type,
                    error_detail=detail,
                    response_summary=reply,
                )
            )
            self.outcome = RunOutcome("failed", reply, error_type, Trace.Outcome.FAILED)
            raise _Stop from exc

    async def _format_failure(
        self, phase: RagPhase, attempt: int, exc: RagFormatError, response: LLMResponse
    ) -> None:
        self.last_error_type = classify_error(
            ErrorEvent(source="model_output", body=exc.reason), self.rules
        )
        await self.sink.write_step(
            StepRecord(
                phase=phase,
                round_number=attempt,
                ok=False,
                error_type=self.last_error_type,
                error_detail=f"Format error: {exc.reason}",
                response_summary=exc.raw,
                parse_mode="strict",
                **_usage(response),
            )
        )


def _usage(response: LLMResponse) -> dict[str, Any]:
    return {
        "prompt_tokens": response.usage.prompt_tokens,
        "completion_tokens": response.usage.completion_tokens,
        "cost_usd": response.usage.cost_usd,
        "latency_ms": int(response.latency_ms),
        "llm_backend": response.backend,
    }


async def selfrag_execute(
    *,
    query: str,
    llm: LLMClient,
    sink: StepSink,
    rules: list[CompiledRule],
    config: SelfRagConfig,
    search: SearchFn,
    steps: Sequence[Any] = (),
) -> RunOutcome:
    """Answer ``query`` from the knowledge base with at most ``config.max_retries``
    query rewrites; every step is written to ``sink`` before the next one starts.

    ``steps``: what a redelivered run had recorded. It goes on from there: the recorded
    phases are neither asked of the model again nor written twice, and a run that had
    ended keeps its outcome."""
    run = SelfRagRun(query=query, llm=llm, sink=sink, rules=rules, config=config, search=search)
    ended = run.resume_from(steps)
    if ended is not None:
        return ended
    return await run.run()
