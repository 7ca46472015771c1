"""The ReAct runtime: an explicit state machine over Thought -> Action -> Observation ->
Reflection rounds.

Every phase produces a ``StepRecord`` that is persisted (through the ``StepSink``) before
the next phase starts, then *applied* to the in-memory ``RunMemory``. A re-delivered run
rebuilds its memory by applying the recorded steps in order and carries on from the state
they imply; tool calls already recorded are never repeated (idempotency key per call).

The loop is a coroutine: one worker process holds many runs in flight while they await
the model or a tool.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from agents.answer_format import AnswerStyle, Evidence, answer_format
from agents.customer_text import customer_text_clean
from agents.grounding import (
    LookupHistory,
    answer_judge,
    thought_evidence,
    thought_unsupported_fact,
    unsupported_fact,
)
from agents.intents import intent_detect
from agents.llm.base import LLMClient, LLMError, LLMResponse
from agents.llm.schemas import FINAL_ANSWER, ReasoningStep, Reflection, reasoning_json_schema
from agents.observation import observation_reduce
from agents.parsing import ModelFormatError, parse_reasoning, parse_reflection
from agents.policy_runtime import (
    EMPTY_POLICY,
    AdapterRule,
    ErrorHandler,
    RuntimePolicy,
    apply_adapters,
    dotted_get,
    fired_locations,
    schema_amend,
    substitute,
)
from agents.prompts import (
    GUARD_REJECTED_THOUGHT,
    RoundRecord,
    ToolSpec,
    canonical_json,
    reasoning_messages,
    reflection_messages,
)
from agents.reasoning_guards import (
    reflection_correction,
    reflection_problems,
    thought_correction,
)
from agents.repairs import RepairContext
from agents.safe_regex import regex_fullmatch
from agents.tools.adapters import validate_arguments
from agents.tools.executor import (
    ExecutorCode,
    ToolCallResult,
    ToolExecutor,
    ValidatedCall,
    ValidationFailure,
)
from traces.classifier import CompiledRule, ErrorEvent, classify_error
from traces.models import Trace
from traces.records import StepRecord

logger = logging.getLogger(__name__)

HANDOVER_REPLY = "I'm handing this over to a support colleague, who will get back to you shortly."


def _json_or_none(body: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def wait_phrase(seconds: float) -> str:
    """A wait in words a customer reads: "20 s", "5 min", "2 h"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if round(seconds / 60) < 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


RETRY_AFTER_NOTE = "Retry-After: the API asks to wait "
STALE_NOTE = "Stale: the API marked this response as possibly out of date ("


def retry_after_note(seconds: float) -> str:
    """The observation line a failed call's Retry-After becomes."""
    return f"{RETRY_AFTER_NOTE}{wait_phrase(seconds)} before calling again."


class RunState(StrEnum):
    WAITING_FOR_REASONING = "WAITING_FOR_REASONING"
    VALIDATING_ACTION = "VALIDATING_ACTION"
    EXECUTING_TOOL = "EXECUTING_TOOL"
    PROCESSING_OBSERVATION = "PROCESSING_OBSERVATION"
    REFLECTING = "REFLECTING"
    FINISHED = "FINISHED"
    FALLBACK = "FALLBACK"
    FAILED = "FAILED"


TERMINAL_STATES = frozenset({RunState.FINISHED, RunState.FALLBACK, RunState.FAILED})
# A wait_retry handler leaves at least this much of the run's time budget for the answer.
RETRY_ANSWER_MARGIN_S = 5.0

# The only moves the machine may make; anything else is a bug and raises.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.WAITING_FOR_REASONING: frozenset(
        {
            RunState.VALIDATING_ACTION,
            RunState.WAITING_FOR_REASONING,  # unparseable output, counted
            RunState.FALLBACK,
            RunState.FAILED,
        }
    ),
    RunState.VALIDATING_ACTION: frozenset(
        {
            RunState.EXECUTING_TOOL,
            RunState.WAITING_FOR_REASONING,  # rejected action, counted
            RunState.FINISHED,
            RunState.FALLBACK,
            RunState.FAILED,  # third identical call
        }
    ),
    RunState.EXECUTING_TOOL: frozenset({RunState.PROCESSING_OBSERVATION, RunState.FAILED}),
    RunState.PROCESSING_OBSERVATION: frozenset({RunState.REFLECTING, RunState.FAILED}),
    RunState.REFLECTING: frozenset(
        {
            RunState.WAITING_FOR_REASONING,
            RunState.REFLECTING,  # a fake reflection sent back to be rewritten, counted
            RunState.FAILED,
            RunState.FALLBACK,  # an error handler handed the request over to a person
        }
    ),
    RunState.FINISHED: frozenset(),
    RunState.FALLBACK: frozenset(),
    RunState.FAILED: frozenset(),
}


class InvalidTransition(RuntimeError):
    pass


class Phase(StrEnum):
    REASONING = "reasoning"
    ACTION = "action"
    REFLECTION = "reflection"
    FINAL = "final"
    FALLBACK = "fallback"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RuntimeConfig:
    max_iterations: int = 8
    max_consecutive_validation_failures: int = 2
    repeat_stop_at: int = 3
    observation_max_chars: int = 2000
    history_verbatim_rounds: int = 3
    timeouts_to_suspend: int = 5
    suspend_minutes: int = 60
    fallback_reply: str = "Sorry, I could not complete this request automatically."
    run_time_limit_seconds: float | None = None
    # Reasoning guards (agents.reasoning_guards): how many times per run a thought stating
    # unsupported facts, and a fake reflection, are sent back; 0 records nothing.
    think_reprompts_max: int = 1
    reflection_reprompts_max: int = 1


@dataclass(frozen=True)
class RunOutcome:
    status: str  # finished | fallback | failed
    final_answer: str
    error_type: str = ""
    outcome: str = ""  # a Trace.Outcome; blank lets trace_finish derive it from the status


class StepSink(Protocol):
    """Where the runtime writes; implemented by ``agents.sink.RunSink`` (which stores steps
    through ``traces.recorder``)."""

    async def write_step(self, record: StepRecord) -> None: ...

    async def recorded_tool_call(self, idempotency_key: str) -> StepRecord | None: ...

    async def tool_recent_timeouts(self, tool_name: str) -> int: ...

    async def tool_suspend(self, tool_name: str, *, minutes: int, timeouts: int) -> None: ...

    async def cache_store(
        self, signature: str, tool_name: str, arguments: dict, body: str
    ) -> None: ...

    async def cache_get(self, signature: str) -> str | None: ...


def call_signature(tool: str, arguments: dict[str, Any]) -> str:
    return f"{tool} {canonical_json(arguments)}"


@dataclass
class RunMemory:
    """Everything the loop knows, rebuilt from step records alone."""

    rounds: list[RoundRecord] = field(default_factory=list)
    key_facts: dict[str, str] = field(default_factory=dict)
    pending: ReasoningStep | None = None
    validation_failure_streak: int = 0
    last_call_signature: str = ""
    repeat_streak: int = 0
    successful_tool_results: int = 0
    observations: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    last_call_error: str = ""
    latest_call_error: str = ""
    reasoning_calls: int = 0
    step_count: int = 0
    # What a thought may draw on besides the request: every tool result shown to the
    # model, failed or not, and why a tool call was refused (not a rejected answer's
    # reason, nor a guard's correction: both quote the very fact they reject).
    tool_observations: list[str] = field(default_factory=list)
    think_rejections: int = 0
    reflection_rejections: int = 0
    # The rejected reflection and why, while the round's reflection is being rewritten.
    reflection_correction: str = ""
    state: RunState = RunState.WAITING_FOR_REASONING
    outcome: RunOutcome | None = None

    def current_round(self) -> RoundRecord:
        return self.rounds[-1]

    def apply(self, record: StepRecord) -> None:
        """Fold one step into memory and move to the state it implies."""
        self.step_count += 1
        if record.phase == Phase.REASONING:
            self.reasoning_calls += 1
            if record.ok:
                self.pending = ReasoningStep(
                    thought=record.thought,
                    action=record.tool_name or FINAL_ANSWER,
                    action_input=record.action_input,
                    expectation=record.details.get("expectation", ""),
                    final_answer=record.details.get("final_answer"),
                )
                self.rounds.append(
                    RoundRecord(
                        number=record.round_number,
                        thought=record.thought,
                        action=self.pending.action,
                        action_input=record.action_input,
                        expectation=self.pending.expectation,
                    )
                )
                self.state = RunState.VALIDATING_ACTION
            elif record.details.get("guard") == "think":
                # A thought the think validator sent back: shown to the model as a failed
                # round whose observation is the correction; it is not a format failure.
                self.pending = None
                self.think_rejections += 1
                self.rounds.append(
                    RoundRecord(
                        number=record.round_number,
                        thought=record.thought,
                        action=GUARD_REJECTED_THOUGHT,
                        observation=record.error_detail,
                        ok=False,
                        error_type=record.error_type,
                    )
                )
                self.state = RunState.WAITING_FOR_REASONING
            else:
                self.pending = None
                self.validation_failure_streak += 1
                self.rounds.append(
                    RoundRecord(
                        number=record.round_number,
                        action="(unparseable output)",
                        observation=record.error_detail,
                        ok=False,
                        error_type=record.error_type,
                    )
                )
                self.state = RunState.WAITING_FOR_REASONING
        elif record.phase == Phase.ACTION and record.details.get("auxiliary"):
            # A pre-condition lookup or a failed call an error handler took over: on the
            # record, but the round's observation is the step that follows.
            return
        elif record.phase == Phase.ACTION:
            rnd = self.current_round()
            rnd.observation = record.response_summary or record.error_detail
            rnd.ok = record.ok
            rnd.status_code = record.status_code
            rnd.error_type = record.error_type
            self.pending = None
            if record.action_type == "tool":
                # What the customer's answer may admit to: the latest lookup and how it ended.
                self.last_call_error = "" if record.ok else record.error_type or "UNKNOWN"
                self.latest_call_error = self.last_call_error or self.latest_call_error
            if record.action_type == "tool":
                # A tool call's result, or why the call was refused (the schema's words):
                # a thought may cite either. A rejected final answer's reason is not.
                self.tool_observations.append(rnd.observation)
            if record.details.get("rejected"):
                self.validation_failure_streak += 1
                self.state = RunState.WAITING_FOR_REASONING
                return
            self.validation_failure_streak = 0
            signature = record.details.get("signature", "")
            if signature and signature == self.last_call_signature:
                self.repeat_streak += 1
            else:
                self.repeat_streak = 1
            self.last_call_signature = signature
            asked = record.details.get("retry_after_s")
            if not record.ok and isinstance(asked, int | float) and asked > 0:
                # The wait the API's header asked for is a fact the answer may tell ("in
                # 1 h"), built from the header itself: the failed body is not (it may say
                # anything, the note's words included).
                self.observations.append(retry_after_note(float(asked)))
            if record.ok:
                self.successful_tool_results += 1
                self.observations.append(record.response_summary)
                self.evidence.append(Evidence(record.step_number, record.response_summary))
                self.key_facts[signature] = record.response_summary[:300]
            self.state = RunState.REFLECTING
        elif record.phase == Phase.REFLECTION and record.details.get("guard") == "reflection":
            # A fake reflection sent back: the round's reflection is asked for again.
            self.reflection_rejections += 1
            rejected = json.dumps(record.details.get("rejected", {}), ensure_ascii=False)
            self.reflection_correction = f"Your previous reply: {rejected}\n{record.error_detail}"
            self.state = RunState.REFLECTING
        elif record.phase == Phase.REFLECTION:
            self.current_round().reflection = record.response_summary
            self.reflection_correction = ""
            self.state = RunState.WAITING_FOR_REASONING
        elif record.phase == Phase.FINAL:
            self.outcome = RunOutcome(
                record.details.get("status", "finished"),
                record.response_summary,
                record.details.get("error_type", ""),
                record.details.get("outcome", ""),
            )
            self.state = RunState.FINISHED
        elif record.phase == Phase.FALLBACK:
            self.outcome = RunOutcome(
                "fallback", record.response_summary, record.error_type, Trace.Outcome.HANDED_OVER
            )
            self.state = RunState.FALLBACK
        elif record.phase == Phase.STOPPED:
            self.outcome = RunOutcome(
                "failed", record.response_summary, record.error_type, Trace.Outcome.FAILED
            )
            self.state = RunState.FAILED

    def lookups(self) -> LookupHistory:
        return LookupHistory(
            observations=self.observations,
            successful_calls=self.successful_tool_results,
            last_call_error=self.last_call_error,
            latest_error=self.latest_call_error,
        )

    def warnings(self, repeat_stop_at: int) -> list[str]:
        if self.repeat_streak >= 2:
            return [
                f"You called {self.last_call_signature} {self.repeat_streak} times in a row "
                f"with the same arguments. Do not repeat it: a call repeated "
                f"{repeat_stop_at} times stops the run. Use a different action or answer."
            ]
        return []


class AgentRun:
    """Drives one trace through the state machine until a terminal state."""

    def __init__(
        self,
        *,
        trace_id: str,
        query: str,
        customer_id: str,
        llm: LLMClient,
        executor: ToolExecutor,
        sink: StepSink,
        rules: list[CompiledRule],
        config: RuntimeConfig,
        policy: RuntimePolicy = EMPTY_POLICY,
        recorded_steps: list[StepRecord] | None = None,
        style: AnswerStyle | None = None,
        customer_facts: list[str] | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.query = query
        self.customer_id = customer_id
        # Cross-session memory (agents.memory): fixed sentences, rendered as data.
        self.customer_facts = list(customer_facts or [])
        self.llm = llm
        self.executor = executor
        self.sink = sink
        self.rules = rules
        self.config = config
        self.policy = policy
        self.style = style or AnswerStyle()
        self.strategy_version = policy.version
        self.intent = intent_detect(query).value
        self._applied: list[dict[str, Any]] = []
        self.memory = RunMemory()
        self._result: ToolCallResult | None = None
        self._validated: Any = None
        self._pending_key = ""
        self._handover = False
        self._deadline: float | None = None
        self._resumed = bool(recorded_steps)
        for record in recorded_steps or []:
            self.memory.apply(record)
        # Schema amendments of the policy: validation and the prompt use the amended schema;
        # the tool's own schema is kept to tell when an amendment let a value through.
        self._own_schemas: dict[str, dict[str, Any]] = {}
        for name, amendments in policy.schema_amendments.items():
            tool = executor.tools.get(name)
            if tool is not None and amendments:
                self._own_schemas[name] = tool.params_schema
                executor.tools = {
                    **executor.tools,
                    name: replace(tool, params_schema=schema_amend(tool.params_schema, amendments)),
                }
        self.tool_specs = [
            ToolSpec(name=t.name, description=t.description, params_schema=t.params_schema)
            for t in executor.tools.values()
        ]

    @property
    def state(self) -> RunState:
        return self.memory.state

    def _move(self, new_state: RunState) -> None:
        if new_state not in TRANSITIONS[self.memory.state]:
            raise InvalidTransition(f"{self.memory.state} -> {new_state}")
        self.memory.state = new_state

    async def _record(self, record: StepRecord, *, then: RunState | None = None) -> None:
        """Persist, then apply; the state the record implies must be a legal move."""
        record.strategy_version = record.strategy_version or self.strategy_version
        before = self.memory.state
        await self.sink.write_step(record)
        self.memory.apply(record)
        after = self.memory.state
        self.memory.state = before
        self._move(then or after)

    def _customer_text(self, text: str) -> str:
        """Canned replies are configurable text: they get the same guard as answers."""
        return customer_text_clean(text).text

    def _classify(self, event: ErrorEvent) -> str:
        return classify_error(event, self.rules)

    async def run(self) -> RunOutcome:
        handlers = {
            RunState.WAITING_FOR_REASONING: self._reason,
            RunState.VALIDATING_ACTION: self._validate,
            RunState.EXECUTING_TOOL: self._execute,
            RunState.PROCESSING_OBSERVATION: self._process_observation,
            RunState.REFLECTING: self._reflect,
        }
        # Records never restore EXECUTING_TOOL or PROCESSING_OBSERVATION: a run that died in
        # either is rebuilt at VALIDATING_ACTION (its decision recorded, its call not) and
        # re-validates the pending action; ``_execute`` skips a call recorded meanwhile.
        limit = self.config.run_time_limit_seconds
        if limit:
            self._deadline = asyncio.get_running_loop().time() + limit
        try:
            if limit:
                async with asyncio.timeout(limit):
                    await self._loop(handlers)
            else:
                await self._loop(handlers)
        except TimeoutError:
            await self._stop("RUN_TIME_LIMIT", "the run hit its time limit")
        assert self.memory.outcome is not None
        return self.memory.outcome

    async def _loop(self, handlers: dict[RunState, Any]) -> None:
        while self.state not in TERMINAL_STATES:
            await handlers[self.state]()

    # --- states --------------------------------------------------------------
    async def _reason(self) -> None:
        memory = self.memory
        if memory.validation_failure_streak >= self.config.max_consecutive_validation_failures:
            await self._record(
                StepRecord(
                    phase=Phase.FALLBACK,
                    round_number=len(memory.rounds),
                    ok=False,
                    error_type=memory.current_round().error_type,
                    error_detail=(
                        f"{memory.validation_failure_streak} consecutive validation failures"
                    ),
                    response_summary=self._customer_text(self.config.fallback_reply),
                ),
                then=RunState.FALLBACK,
            )
            return
        if memory.reasoning_calls >= self.config.max_iterations:
            await self._stop("MAX_STEPS", f"no final answer after {memory.reasoning_calls} rounds")
            return
        round_number = memory.reasoning_calls + 1
        hints = self.policy.hints_for(intent=self.intent, tools=list(self.executor.tools))
        applied = [
            {"id": h.strategy_id, "kind": "prompt_hint", "error_type": h.error_type} for h in hints
        ]
        verbatim = self.config.history_verbatim_rounds
        messages = reasoning_messages(
            query=self.query,
            customer_id=self.customer_id,
            tools=self.tool_specs,
            hints=[hint.text for hint in hints],
            key_facts=[f"{sig} -> {fact}" for sig, fact in memory.key_facts.items()],
            earlier_rounds=memory.rounds[:-verbatim] if verbatim else memory.rounds,
            recent_rounds=memory.rounds[-verbatim:] if verbatim else [],
            warnings=memory.warnings(self.config.repeat_stop_at),
            locale=self.style.locale.replace("_", "-"),
            time_zone=self.style.time_zone,
            customer_facts=self.customer_facts,
        )
        response = await self._complete(
            messages,
            ReasoningStep,
            "reasoning",
            round_number,
            json_schema=reasoning_json_schema({t.name: t.params_schema for t in self.tool_specs}),
        )
        if response is None:
            return
        usage = self._usage(response)
        try:
            step, mode = parse_reasoning(response.text)
        except ModelFormatError as exc:
            await self._record(
                StepRecord(
                    phase=Phase.REASONING,
                    round_number=round_number,
                    ok=False,
                    error_type=self._classify(ErrorEvent(source="model_output", body=exc.reason)),
                    error_detail=(
                        f"Format error: {exc.reason}. Reply with one JSON object as the "
                        "Instructions say."
                    ),
                    response_summary=exc.raw,
                    strategies_applied=applied,
                    **usage,
                )
            )
            return
        is_final = step.action == FINAL_ANSWER
        details: dict[str, Any] = {
            "expectation": step.expectation,
            "final_answer": step.final_answer,
        }
        unsupported = self._thought_unsupported(step.thought)
        if unsupported and memory.think_rejections < self.config.think_reprompts_max:
            await self._record(
                StepRecord(
                    phase=Phase.REASONING,
                    round_number=round_number,
                    ok=False,
                    thought=step.thought,
                    action_type="final_answer" if is_final else "tool",
                    tool_name="" if is_final else step.action,
                    action_input=step.action_input,
                    parse_mode=mode,
                    error_type=self._classify(
                        ErrorEvent(
                            source="reasoning_guard",
                            exception_class="UNGROUNDED_THOUGHT",
                            body=unsupported,
                        )
                    ),
                    error_detail=thought_correction(unsupported),
                    response_summary=response.text[:2000],
                    details={**details, "guard": "think", "unsupported": unsupported},
                    strategies_applied=applied,
                    **usage,
                )
            )
            return
        if unsupported:
            # Out of re-prompts: the run goes on (the answer check still guards the
            # customer); what the validator found stays on the step.
            details["think_guard"] = {"unsupported": unsupported, "reprompts_exhausted": True}
        await self._record(
            StepRecord(
                phase=Phase.REASONING,
                round_number=round_number,
                thought=step.thought,
                action_type="final_answer" if is_final else "tool",
                tool_name="" if is_final else step.action,
                action_input=step.action_input,
                parse_mode=mode,
                details=details,
                strategies_applied=applied,
                **usage,
            )
        )

    def _thought_unsupported(self, thought: str) -> str:
        """The think validator (seeds/000 §4.1): the first fact of ``thought`` that neither
        the request, the customer's details, the tools' names nor a tool result holds."""
        if not thought.strip():
            return ""
        names = [
            f"{spec.name} {' '.join((spec.params_schema.get('properties') or {}).keys())}"
            for spec in self.tool_specs
        ]
        evidence = thought_evidence(
            [
                self.query,
                self.customer_id,
                *self.customer_facts,
                *names,
                FINAL_ANSWER,
                *self.memory.tool_observations,
            ],
            locale=self.style.locale,
            time_zone=self.style.time_zone,
        )
        return thought_unsupported_fact(
            thought=thought,
            evidence=evidence,
            locale=self.style.locale,
            time_zone=self.style.time_zone,
        )

    async def _validate(self) -> None:
        memory = self.memory
        step = memory.pending
        assert step is not None
        rnd = memory.current_round()
        if step.action == FINAL_ANSWER:
            raw = (step.final_answer or "").strip()
            # The customer reads this text: internal codes go before the check, so that a
            # status code in "(404 RESOURCE_NOT_FOUND)" is not taken for a stated number.
            cleaned = customer_text_clean(raw, observations=memory.observations)
            answer = cleaned.text
            verdict = answer_judge(
                query=self.query,
                answer=answer,
                history=memory.lookups(),
                customer_id=self.customer_id,
                locale=self.style.locale,
                time_zone=self.style.time_zone,
            )
            reason = verdict.reason
            if raw and not answer:
                reason = "the final answer holds only internal error text"
            if reason:
                await self._reject(
                    rnd,
                    action_type="final_answer",
                    error_type=self._classify(
                        ErrorEvent(
                            source="final_answer",
                            exception_class="UNSUPPORTED_ANSWER",
                            body=reason,
                        )
                    ),
                    detail=(
                        f"Final answer rejected: {reason}. Call a tool to get the facts, "
                        "and state only facts shown in observations, or ask the customer "
                        "for what is missing."
                    ),
                    extra={"rejected_answer": raw[:2000]},
                )
                return
            details: dict[str, Any] = {
                "outcome": verdict.outcome,
                "status": Trace.OUTCOME_STATUS[Trace.Outcome(verdict.outcome)],
            }
            if verdict.error_type:
                details["error_type"] = verdict.error_type
            if cleaned.removed:
                details["removed_from_answer"] = list(cleaned.removed)
            answer, facts = self._readable(answer)
            if facts:
                details["facts"] = facts
            await self._record(
                StepRecord(
                    phase=Phase.FINAL,
                    round_number=rnd.number,
                    action_type="final_answer",
                    response_summary=answer,
                    details=details,
                ),
                then=RunState.FINISHED,
            )
            return
        self._applied = []
        arguments = step.action_input
        if step.action in self.executor.tools and isinstance(arguments, dict):
            # Before validation: a pre-condition exists to turn what the model gave (a
            # product name, say) into what the tool's schema demands (a SKU).
            arguments = await self._run_pre_conditions(step.action, arguments, rnd.number)
        checked = self.executor.validate(step.action, arguments)
        own_schema = self._own_schemas.get(step.action)
        if (
            own_schema is not None
            and not isinstance(checked, ValidationFailure)
            and validate_arguments(schema=own_schema, arguments=arguments)
        ):
            # The tool's own (stale) schema would have refused this value: the amendment acted.
            self._applied += [
                {"id": a.strategy_id, "kind": "validation_rule"}
                for a in self.policy.schema_amendments.get(step.action, ())
            ]
        if isinstance(checked, ValidationFailure):
            await self._reject(
                rnd,
                action_type="tool",
                error_type=self._classify(
                    ErrorEvent(source="executor", exception_class=checked.code, body=checked.detail)
                ),
                detail=f"{checked.code}: {checked.detail}",
                adapters_fired=checked.adapters_fired,
            )
            return
        checked = self._apply_policy_inputs(checked)
        if isinstance(checked, ValidationFailure):
            await self._reject(
                rnd,
                action_type="tool",
                error_type=self._classify(
                    ErrorEvent(source="executor", exception_class=checked.code, body=checked.detail)
                ),
                detail=f"{checked.code}: {checked.detail}",
                adapters_fired=checked.adapters_fired,
                extra={"strategies_applied": self._applied},
            )
            return
        signature = call_signature(step.action, checked.arguments)
        if (
            signature == memory.last_call_signature
            and memory.repeat_streak + 1 >= self.config.repeat_stop_at
        ):
            await self._stop(
                "LOOP_DETECTED",
                f"{signature} requested {memory.repeat_streak + 1} times in a row",
            )
            return
        self._validated = checked
        self._move(RunState.EXECUTING_TOOL)

    def _readable(self, answer: str) -> tuple[str, list[dict[str, Any]]]:
        """The accepted answer in the customer's style, and the facts it traced.

        The rewrite only re-expresses values the observations hold; the grounding check
        runs again on the result so that a formatting fault can never put an unsupported
        fact in front of a customer (the answer as the model wrote it goes out instead).
        """
        formatted = answer_format(answer=answer, evidence=self.memory.evidence, style=self.style)
        facts = [fact.as_dict() for fact in formatted.facts]
        if formatted.text == answer:
            return answer, facts
        problem = unsupported_fact(
            answer=formatted.text,
            query=self.query,
            observations=self.memory.observations,
            customer_id=self.customer_id,
            locale=self.style.locale,
            time_zone=self.style.time_zone,
        )
        if problem:
            logger.warning(
                "answer.format_rejected", extra={"trace_id": self.trace_id, "reason": problem}
            )
            return answer, []
        return formatted.text, facts

    def _apply_policy_inputs(self, call: ValidatedCall) -> ValidatedCall | ValidationFailure:
        """Policy adapters transform the input; policy validation rules then check it."""
        tool = call.tool.name
        arguments, fired = apply_adapters(
            self.policy.adapters.get(tool, ()),
            call.arguments,
            self._repair_context(),
            tool_locations=call.tool.param_locations,
        )
        self._applied += [{"id": f["strategy"], "kind": "adapter"} for f in fired]
        adapters_fired = [*call.adapters_fired, *fired]
        locations = {**call.param_locations, **fired_locations(fired, arguments)}
        for rule in self.policy.validation_rules.get(tool, ()):
            self._applied.append({"id": rule.strategy_id, "kind": "validation_rule"})
            issues = validate_arguments(schema=rule.schema, arguments=arguments)
            if issues:
                detail = "; ".join(
                    f"validator={i.validator} path={i.path or '(root)'}: {i.message}"
                    for i in issues
                )
                return ValidationFailure(
                    ExecutorCode.SCHEMA_VIOLATION,
                    f"policy rule S{rule.strategy_id}: {detail}",
                    adapters_fired,
                )
        return ValidatedCall(
            tool=call.tool,
            arguments=arguments,
            adapters_fired=adapters_fired,
            param_locations=locations,
        )

    def _repair_context(self) -> RepairContext:
        """What a repair step may add an argument from: the query, the customer and the
        results of this run's successful calls so far (its key facts)."""
        facts = tuple(
            (rnd.action, rnd.observation)
            for rnd in self.memory.rounds
            if rnd.ok and rnd.observation and rnd.action != FINAL_ANSWER
        )
        return RepairContext(query=self.query, customer_id=self.customer_id, facts=facts)

    async def _reject(
        self,
        rnd: RoundRecord,
        *,
        action_type: str,
        error_type: str,
        detail: str,
        adapters_fired: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        step = self.memory.pending
        await self._record(
            StepRecord(
                phase=Phase.ACTION,
                round_number=rnd.number,
                action_type=action_type,
                tool_name=step.action if step and action_type == "tool" else "",
                action_input=step.action_input if step else {},
                ok=False,
                error_type=error_type,
                error_detail=detail,
                adapters_fired=adapters_fired or [],
                strategies_applied=(extra or {}).pop("strategies_applied", []),
                details={"rejected": True, **(extra or {})},
            )
        )

    async def _execute(self) -> None:
        call = self._validated
        rnd = self.memory.current_round()
        key = self._call_key(rnd.number, call)
        # Only a redelivered run can find its call already recorded; a fresh run that races
        # a duplicate delivery loses at the unique step number instead.
        recorded = await self.sink.recorded_tool_call(key) if self._resumed else None
        if recorded is not None:
            # Redelivered run: the call happened and was recorded; never repeat it.
            self.memory.apply(recorded)
            self.memory.state = RunState.REFLECTING
            return
        self._result = await self.executor.execute(call, idempotency_key=key)
        self._pending_key = key
        self._move(RunState.PROCESSING_OBSERVATION)

    def _call_key(self, round_number: int, call: ValidatedCall, role: str = "") -> str:
        """The idempotency key of a tool call: the same call of the same round of this run
        (a redelivery, or ``wait_retry`` sending it again) has the same key. ``role`` tells
        apart the auxiliary calls policies make (pre-condition lookups, handler calls)."""
        signature = call_signature(call.tool.name, call.arguments)
        scope = ":".join(filter(None, (self.trace_id, str(round_number), role, signature)))
        return hashlib.sha256(scope.encode()).hexdigest()

    async def _run_pre_conditions(
        self, tool: str, arguments: dict[str, Any], round_number: int
    ) -> dict[str, Any]:
        """Policy pre-conditions: look a value up with another tool before the call."""
        arguments = dict(arguments)
        for pre in self.policy.pre_conditions.get(tool, ()):
            value = arguments.get(pre.arg)
            if value is None or regex_fullmatch(pre.not_pattern, str(value), otherwise=True):
                continue
            self._applied.append({"id": pre.strategy_id, "kind": "pre_condition"})
            lookup = self.executor.validate(pre.call, substitute(pre.input, value))
            if isinstance(lookup, ValidationFailure):
                continue
            result = await self.executor.execute(
                lookup,
                idempotency_key=self._call_key(round_number, lookup, f"pre:{pre.strategy_id}"),
            )
            found = dotted_get(_json_or_none(result.body), pre.take) if result.ok else None
            await self._write_auxiliary(
                round_number, lookup, result, {"pre_condition": pre.strategy_id, "found": found}
            )
            if found is not None:
                arguments[pre.assign] = found
        return arguments

    async def _write_auxiliary(
        self,
        round_number: int,
        call: ValidatedCall,
        result: ToolCallResult,
        details: dict[str, Any],
    ) -> None:
        record = StepRecord(
            phase=Phase.ACTION,
            round_number=round_number,
            action_type="tool",
            tool_name=call.tool.name,
            action_input=call.arguments,
            endpoint=result.endpoint,
            request_payload=result.request_payload,
            status_code=result.status_code,
            ok=result.ok,
            error_type=self._classify_result(result),
            error_detail=result.detail if not result.ok else "",
            response_size=result.response_size,
            response_summary=self._summarise(call, result)[0],
            latency_ms=result.latency_ms,
            strategy_version=self.strategy_version,
            details={"auxiliary": True, "code": result.code, **details},
        )
        await self.sink.write_step(record)
        self.memory.apply(record)

    def _classify_result(self, result: ToolCallResult) -> str:
        if result.ok:
            return ""
        if result.code == ExecutorCode.HTTP_ERROR:
            event = ErrorEvent(source="http", status_code=result.status_code, body=result.body)
        else:
            event = ErrorEvent(source="executor", exception_class=result.code, body=result.detail)
        return self._classify(event)

    def _summarise(self, call: ValidatedCall, result: ToolCallResult) -> tuple[str, bool]:
        if not result.body:
            text, truncated = result.detail, False
        else:
            reduced = observation_reduce(
                body=result.body,
                content_type=result.content_type,
                key_fields=call.tool.key_fields if result.ok else (),
                max_chars=self.config.observation_max_chars,
            )
            text, truncated = reduced.text, reduced.truncated
        if result.ok and result.stale:
            # A cache served it past its freshness: the model must not present it as
            # current ("processing" for an order delivered three days ago).
            text += f"\n{STALE_NOTE}{result.stale})."
        if not result.ok and result.retry_after_s:
            # The header is the API's own word on when to come back; the body may say
            # nothing ({"detail": "down"}), and "try again in a few minutes" misled
            # customers through an hour's maintenance.
            text += f"\n{retry_after_note(result.retry_after_s)}"
        return text, truncated

    async def _handle_error(
        self, call: ValidatedCall, result: ToolCallResult, error_type: str
    ) -> tuple[ToolCallResult, dict[str, Any]]:
        """Apply the policy's error handler for this tool and error type, if any.

        The failed call is recorded first (its classification is what Reflexion learns
        from); the handler's result becomes the round's observation.
        """
        handler = self.policy.handler_for(tool=call.tool.name, error_type=error_type)
        if handler is None:
            return result, {}
        rnd = self.memory.current_round()
        self._applied.append({"id": handler.strategy_id, "kind": "error_handler"})
        await self._write_auxiliary(rnd.number, call, result, {"handled_by": handler.strategy_id})
        signature = call_signature(call.tool.name, call.arguments)
        if handler.action == "retry_once":
            arguments = dict(call.arguments)
            for name, transform in handler.transform.items():
                if name in arguments:
                    arguments, _ = apply_adapters(
                        (AdapterRule(handler.strategy_id, name, transform),),
                        arguments,
                        self._repair_context(),
                    )
            retry = self.executor.validate(call.tool.name, arguments)
            if not isinstance(retry, ValidationFailure):
                retry = self._apply_policy_inputs(retry)
            if isinstance(retry, ValidationFailure):
                return result, {"handler": "retry_once", "retry": "invalid"}
            retry_key = self._call_key(rnd.number, retry, f"retry:{handler.strategy_id}")
            return await self.executor.execute(retry, idempotency_key=retry_key), {
                "handler": "retry_once"
            }
        if handler.action == "wait_retry":
            return await self._wait_retry(call, result, handler)
        if handler.action == "call_tool":
            other = self.executor.validate(
                handler.call, substitute(handler.input, next(iter(call.arguments.values()), ""))
            )
            if not isinstance(other, ValidationFailure):
                other = self._apply_policy_inputs(other)
            if isinstance(other, ValidationFailure):
                return result, {"handler": "call_tool", "call": "invalid"}
            other_key = self._call_key(rnd.number, other, f"call_tool:{handler.strategy_id}")
            return await self.executor.execute(other, idempotency_key=other_key), {
                "handler": "call_tool"
            }
        if handler.action == "degrade_cache":
            cached = await self.sink.cache_get(hashlib.sha256(signature.encode()).hexdigest())
            if cached is not None:
                degraded = replace(
                    result,
                    code=ExecutorCode.OK,
                    ok=True,
                    body=cached,
                    detail="served from cache: the data may be out of date",
                )
                return degraded, {"handler": "degrade_cache", "degraded": True}
            # Nothing cached: the model sees the error and may still retry once itself.
            return result, {"handler": "degrade_cache", "degraded": False}
        self._handover = True
        return result, {"handler": "handover"}

    async def _wait_retry(
        self, call: ValidatedCall, result: ToolCallResult, handler: ErrorHandler
    ) -> tuple[ToolCallResult, dict[str, Any]]:
        """Wait as long as the API's ``Retry-After`` asks (else a doubling backoff from 1 s),
        then send the same call again, up to ``handler.max_retries`` times. It gives up
        rather than wait longer than ``handler.max_wait_s``, or than the run's time budget
        allows with a margin left to answer."""
        waited = 0.0
        detail: dict[str, Any] = {"handler": "wait_retry"}
        for attempt in range(handler.max_retries):
            wait = result.retry_after_s if result.retry_after_s is not None else 2.0**attempt
            left = self._time_left()
            if wait > handler.max_wait_s:
                return result, {**detail, "gave_up": "wait_over_cap", "asked_s": wait}
            if left is not None and wait + RETRY_ANSWER_MARGIN_S > left:
                return result, {**detail, "gave_up": "run_time_budget", "asked_s": wait}
            await asyncio.sleep(wait)  # the wait the API asked for, bounded above
            waited += wait
            # The same call again, so the same key: an API that did run the first one (and
            # answered 429 or 503 all the same) does not run it twice.
            result = await self.executor.execute(
                call, idempotency_key=self._call_key(self.memory.current_round().number, call)
            )
            detail = {"handler": "wait_retry", "retries": attempt + 1, "waited_s": waited}
            if result.ok or result.status_code not in (429, 503):
                break
        return result, detail

    def _time_left(self) -> float | None:
        """Seconds until the run's time limit, or None when it has none."""
        if self._deadline is None:
            return None
        return self._deadline - asyncio.get_running_loop().time()

    async def _process_observation(self) -> None:
        call = self._validated
        result = self._result
        assert result is not None
        rnd = self.memory.current_round()
        signature = call_signature(call.tool.name, call.arguments)
        error_type = self._classify_result(result)
        handled: dict[str, Any] = {}
        if error_type:
            result, handled = await self._handle_error(call, result, error_type)
            error_type = self._classify_result(result)
        if result.ok and not handled:
            # Only a plain successful call is this signature's result: a handler's answer
            # came from another call (or from the cache itself).
            await self.sink.cache_store(
                hashlib.sha256(signature.encode()).hexdigest(),
                call.tool.name,
                call.arguments,
                result.body,
            )
        summary, truncated = self._summarise(call, result)
        if handled.get("degraded"):
            summary = "(cached, may be out of date) " + summary
        await self._record(
            StepRecord(
                phase=Phase.ACTION,
                round_number=rnd.number,
                action_type="tool",
                tool_name=call.tool.name,
                action_input=call.arguments,
                endpoint=result.endpoint,
                request_payload=result.request_payload,
                status_code=result.status_code if not handled.get("degraded") else None,
                ok=result.ok,
                error_type=error_type,
                error_detail=result.detail if not result.ok else "",
                response_size=result.response_size,
                response_summary=summary,
                latency_ms=result.latency_ms,
                adapters_fired=call.adapters_fired,
                strategies_applied=self._applied,
                idempotency_key=self._pending_key,
                details={
                    "signature": signature,
                    "code": result.code,
                    "truncated": truncated,
                    # What the API asked for in Retry-After: evidence for Reflexion.
                    **(
                        {"retry_after_s": result.retry_after_s}
                        if result.retry_after_s is not None
                        else {}
                    ),
                    **handled,
                },
            )
        )
        self._applied = []
        if error_type == "TIMEOUT":
            timeouts = await self.sink.tool_recent_timeouts(call.tool.name)
            if timeouts >= self.config.timeouts_to_suspend:
                await self.sink.tool_suspend(
                    call.tool.name, minutes=self.config.suspend_minutes, timeouts=timeouts
                )
                self._suspend_in_run(call.tool.name)
        if self._handover:
            await self._record(
                StepRecord(
                    phase=Phase.FALLBACK,
                    round_number=rnd.number,
                    ok=False,
                    error_type=error_type,
                    error_detail="error handler handed the request over to a person",
                    response_summary=self._customer_text(HANDOVER_REPLY),
                    details={"handover": True},
                ),
                then=RunState.FALLBACK,
            )

    def _suspend_in_run(self, tool_name: str) -> None:
        tool = self.executor.tools.get(tool_name)
        if tool is not None:
            self.executor.tools[tool_name] = replace(tool, suspended=True)

    async def _reflect(self) -> None:
        rnd = self.memory.current_round()
        response = await self._complete(
            reflection_messages(
                query=self.query, rnd=rnd, correction=self.memory.reflection_correction
            ),
            Reflection,
            "reflection",
            rnd.number,
        )
        if response is None:
            return
        usage = self._usage(response)
        try:
            reflection = parse_reflection(response.text)
        except ModelFormatError as exc:
            await self._record(
                StepRecord(
                    phase=Phase.REFLECTION,
                    round_number=rnd.number,
                    ok=False,
                    error_type=self._classify(ErrorEvent(source="model_output", body=exc.reason)),
                    error_detail=f"Reflection format error: {exc.reason}",
                    response_summary="(no usable reflection)",
                    **usage,
                )
            )
            return
        text = (
            f"expectation_met={str(reflection.expectation_met).lower()}; "
            f"cause={reflection.likely_cause or '-'}; next={reflection.next}"
        )
        details: dict[str, Any] = reflection.model_dump()
        problems = reflection_problems(reflection, rnd)
        if problems and self.memory.reflection_rejections < self.config.reflection_reprompts_max:
            # seeds/001 §6.2: a reflection with no concrete cause or change is rewritten.
            await self._record(
                StepRecord(
                    phase=Phase.REFLECTION,
                    round_number=rnd.number,
                    ok=False,
                    thought=reflection.likely_cause,
                    error_type=self._classify(
                        ErrorEvent(
                            source="reasoning_guard",
                            exception_class="FAKE_REFLECTION",
                            body="; ".join(problems),
                        )
                    ),
                    error_detail=reflection_correction(problems, rnd),
                    response_summary=text,
                    details={"guard": "reflection", "problems": problems, "rejected": details},
                    **usage,
                )
            )
            return
        if problems:
            details["reflection_guard"] = {"problems": problems, "reprompts_exhausted": True}
        await self._record(
            StepRecord(
                phase=Phase.REFLECTION,
                round_number=rnd.number,
                thought=reflection.likely_cause,
                response_summary=text,
                details=details,
                **usage,
            )
        )

    # --- helpers ---------------------------------------------------------------
    async def _complete(
        self,
        messages: Any,
        schema: type,
        purpose: str,
        round_number: int,
        *,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse | None:
        try:
            return await self.llm.complete(
                messages=messages, schema=schema, purpose=purpose, json_schema=json_schema
            )
        except LLMError as exc:
            await self._stop("LLM_ERROR", f"{purpose}: {exc}", round_number=round_number)
            return None

    def _usage(self, response: LLMResponse) -> dict[str, Any]:
        return {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
            "cost_usd": response.usage.cost_usd,
            "latency_ms": int(response.latency_ms),
            "llm_backend": response.backend,
        }

    async def _stop(self, code: str, detail: str, *, round_number: int | None = None) -> None:
        error_type = self._classify(ErrorEvent(source="runtime", exception_class=code, body=detail))
        record = StepRecord(
            phase=Phase.STOPPED,
            round_number=round_number if round_number is not None else len(self.memory.rounds),
            ok=False,
            error_type=error_type,
            error_detail=detail,
            response_summary=self._customer_text(self.config.fallback_reply),
        )
        # A time limit can strike in any state, so this move bypasses the table.
        await self.sink.write_step(record)
        self.memory.apply(record)
