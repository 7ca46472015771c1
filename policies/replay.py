"""Replay check: a strategy must be shown to produce correct runs before it can be approved.

Stages, each against the real tool endpoints (docs/learning-loop.md §3):

1. **The repaired call.** The recorded failing step, replayed with the strategy applied,
   must now succeed. A failure that was a *random fault* (429, 500, 503, timeout) proves
   nothing in one call: the strategy must instead beat no strategy on
   ``RANDOM_FAULT_PAIRS`` paired replays of the same call (``paired_replay``).
2. **The regression replay.** A strategy that rewrites or checks calls (adapter,
   pre-condition, validation rule) is applied to the tool's most recent successful calls;
   one that now fails or is blocked fails the replay (``regression_replay``).
3. **The replayed run.** The whole request runs once more with the strategy in the policy;
   it must end with a grounded answer (``GROUNDED_OUTCOMES``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import httpx
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.urls import reverse

from agents.http_clients import tool_http_client
from agents.policy_runtime import (
    ERROR_HANDLER_ACTIONS,
    AdapterRule,
    RuntimePolicy,
    SchemaAmendment,
    apply_adapters,
    dotted_get,
    fired_locations,
    schema_amend,
    substitute,
)
from agents.prompts import canonical_json
from agents.repairs import RepairContext
from agents.runtime import call_signature
from agents.safe_regex import regex_fullmatch
from agents.tools.adapters import validate_arguments
from agents.tools.executor import (
    ExecutorCode,
    ToolCallResult,
    ToolExecutor,
    ValidatedCall,
    ValidationFailure,
)
from policies.branches import KINDS, adapter_rule, runtime_policy_compile
from policies.selectors import runtime_policy_for_run
from policies.services import GROUNDED_OUTCOMES
from traces.classifier import ErrorEvent, classify_error, error_rules_aload, error_rules_load
from traces.models import Job, Step, Trace
from traces.services import job_finish, job_progress, job_running

if TYPE_CHECKING:
    from policies.reflexion import FailureFacts, Proposal


# What the failing stage of ``strategy_replay_outcome``'s replay met: failed calls
# (ToolCallResult) and the error types of a failed replay run.
_replay_failures: ContextVar[list[Any] | None] = ContextVar("replay_failures", default=None)


def _failure_seen(failure: Any) -> None:
    seen = _replay_failures.get()
    if seen is not None:
        seen.append(failure)


def _result_event(result: ToolCallResult) -> ErrorEvent:
    if result.code == ExecutorCode.HTTP_ERROR:
        return ErrorEvent(source="http", status_code=result.status_code, body=result.body)
    return ErrorEvent(source="executor", exception_class=result.code, body=result.detail)


async def _call(executor: ToolExecutor, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    checked = executor.validate(tool, arguments)
    if isinstance(checked, ValidationFailure):
        return False, _refused(checked)
    result = await executor.execute(checked)
    if not result.ok:
        _failure_seen(result)
    return result.ok, f"{tool} {canonical_json(arguments)} -> {result.status_code or result.code}"


# A replay waits at most this long for a Retry-After: it runs while a person or a job waits.
REPLAY_MAX_WAIT_S = 10.0


async def _wait_retry_replay(
    executor: ToolExecutor, tool: str, arguments: dict[str, Any], branch: dict[str, Any]
) -> tuple[bool, str]:
    """Call as the runtime would with the handler: on a 429 or 503, wait what the API asks
    (at most the branch's cap and REPLAY_MAX_WAIT_S) and call again, up to its retries."""
    checked = executor.validate(tool, arguments)
    if isinstance(checked, ValidationFailure):
        return False, _refused(checked)
    first = await executor.execute(checked)
    result, notes = await _waited_retries(executor, checked, first, branch)
    shown = ", ".join([str(first.status_code or first.code), *notes])
    return result.ok, f"{tool} {canonical_json(arguments)} -> {shown}"


async def _waited_retries(
    executor: ToolExecutor, checked: ValidatedCall, result: ToolCallResult, branch: dict[str, Any]
) -> tuple[ToolCallResult, list[str]]:
    """After ``result``, the calls the runtime's wait_retry handler would make: on a 429 or
    503, wait what the API asks (at most the branch's cap and REPLAY_MAX_WAIT_S) and call
    again, up to its retries. The last result, and a note on each retry."""
    cap = min(float(branch.get("max_wait_s", 30.0)), REPLAY_MAX_WAIT_S)
    notes: list[str] = []
    for attempt in range(int(branch.get("max_retries", 1))):
        if result.ok or result.status_code not in (429, 503):
            break
        wait = result.retry_after_s if result.retry_after_s is not None else 2.0**attempt
        if wait > cap:
            notes.append(f"asked to wait {wait:g} s, over the {cap:g} s cap")
            break
        await asyncio.sleep(wait)  # the wait the API asked for, bounded by the cap
        result = await executor.execute(checked)
        notes.append(f"after {wait:g} s: {result.status_code or result.code}")
    return result, notes


async def _replay_tool_call(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    from agents.services import tool_snapshots

    tools = await sync_to_async(tool_snapshots)(agent_id=facts.agent_id)
    branch = proposal.branch
    async with tool_http_client() as client:
        executor = ToolExecutor(
            tools=tools,
            http_client=client,
            max_response_bytes=settings.TOOL_MAX_RESPONSE_BYTES,
            max_redirects=settings.TOOL_MAX_REDIRECTS,
        )
        arguments = dict(facts.action_input)
        context = await sync_to_async(_repair_context)(facts)
        if proposal.kind == "adapter":
            checked = executor.validate(facts.tool, facts.action_input)
            if isinstance(checked, ValidationFailure):
                return False, _refused(checked)
            # As the runtime does: the adapter runs on the validated input.
            rule = adapter_rule(0, branch)
            arguments, fired = apply_adapters(
                (rule,), checked.arguments, context, tool_locations=checked.tool.param_locations
            )
            if not fired:
                return False, "the adapter does not change the recorded input"
            result = await executor.execute(
                type(checked)(
                    tool=checked.tool,
                    arguments=arguments,
                    adapters_fired=[],
                    param_locations=fired_locations(fired, arguments),
                )
            )
            if not result.ok:
                _failure_seen(result)
            return result.ok, f"{facts.tool} {canonical_json(arguments)} -> {result.status_code}"
        if proposal.kind == "pre_condition":
            value = arguments.get(branch["arg"])
            if value is None or regex_fullmatch(branch["not_pattern"], str(value), otherwise=True):
                return False, "the pre-condition would not fire on the recorded input"
            lookup = executor.validate(branch["call"], substitute(branch["input"], value))
            if isinstance(lookup, ValidationFailure):
                return False, f"lookup invalid: {lookup.detail}"
            found_result = await executor.execute(lookup)
            try:
                found = dotted_get(json.loads(found_result.body), branch["take"])
            except ValueError:
                found = None
            if found is None:
                return False, f"lookup {branch['call']} found nothing for {value!r}"
            arguments[branch["assign"]] = found
            return await _call(executor, facts.tool, arguments)
        if proposal.kind == "error_handler":
            action = branch["action"]
            if action == "handover":
                return True, "hands the request over to a person instead of failing"
            if action == "degrade_cache":
                from agents.models import ToolResultCache

                signature = call_signature(facts.tool, facts.action_input)
                key = hashlib.sha256(signature.encode()).hexdigest()
                cached = await ToolResultCache.objects.filter(signature=key).aexists()
                # The handler acts only when the call fails, and then only with a cached
                # result: an upstream that recovered by itself says nothing about it.
                if not cached:
                    return False, (
                        INCONCLUSIVE
                        + "nothing cached for this call: the handler has nothing to serve"
                    )
                ok, detail = await _call(executor, facts.tool, arguments)
                upstream = "recovered" if ok else "still failing"
                return (
                    True,
                    f"serves cached data when the call fails (upstream {upstream}: {detail})",
                )

            if action == "retry_once":
                for name, transform in branch.get("transform", {}).items():
                    arguments, _ = apply_adapters(
                        (AdapterRule(0, name, transform),), arguments, context
                    )
                return await _call(executor, facts.tool, arguments)
            if action == "wait_retry":
                return await _wait_retry_replay(executor, facts.tool, arguments, branch)
            if action == "call_tool":
                first = next(iter(arguments.values()), "")
                return await _call(executor, branch["call"], substitute(branch["input"], first))
    return False, f"cannot replay a {proposal.kind}"


def _repair_context(facts: FailureFacts) -> RepairContext:
    """The context the runtime had at the failing step."""
    return _repair_context_at(facts.trace_id, facts.step_number)


def _repair_context_at(trace_id: str, step_number: int) -> RepairContext:
    """The context the runtime had at a step: the run's query, its customer and the results
    of its successful calls before that step."""
    trace = Trace.objects.filter(pk=trace_id).only("query", "customer_id").first()
    steps = Step.objects.filter(
        trace_id=trace_id,
        step_number__lt=step_number,
        phase="action",
        action_type="tool",
        ok=True,
    ).order_by("step_number")
    return RepairContext(
        query=trace.query if trace else "",
        customer_id=(trace.customer_id or "") if trace else "",
        facts=tuple(
            (step.tool_name, step.response_summary)
            for step in steps.only("tool_name", "response_summary")
            if step.response_summary
        ),
    )


# --- stage 3: the replayed run ---------------------------------------------------------


def _policy_with(proposal: Proposal, facts: FailureFacts) -> RuntimePolicy:
    """The policy a run would get, plus the candidate (strategy id 0). The candidate's error
    handler comes first, so it is the one that acts on its error type."""
    base = runtime_policy_for_run()
    candidate = runtime_policy_compile(
        version=base.version + "+replay",
        strategies=[(0, proposal.kind, proposal.branch, facts.error_type)],
    )

    def merged(
        ours: dict[str, tuple[Any, ...]], theirs: dict[str, tuple[Any, ...]], *, first: bool
    ) -> dict[str, tuple[Any, ...]]:
        out = dict(ours)
        for tool, rules in theirs.items():
            out[tool] = (*rules, *out.get(tool, ())) if first else (*out.get(tool, ()), *rules)
        return out

    return RuntimePolicy(
        version=candidate.version,
        hints=(*base.hints, *candidate.hints),
        adapters=merged(base.adapters, candidate.adapters, first=False),
        validation_rules=merged(base.validation_rules, candidate.validation_rules, first=False),
        pre_conditions=merged(base.pre_conditions, candidate.pre_conditions, first=False),
        error_handlers=merged(base.error_handlers, candidate.error_handlers, first=True),
        schema_amendments=merged(base.schema_amendments, candidate.schema_amendments, first=False),
    )


def _replay_run(proposal: Proposal, facts: FailureFacts, *, job_id: int) -> tuple[bool, str, str]:
    """Run the recorded request again, once, with the strategy in the policy: it passes only
    if the run ends with a grounded answer (and, for a prompt hint, without the error the
    hint targets)."""
    from agents.services import run_execute
    from traces.services import trace_create

    original = Trace.objects.get(pk=facts.trace_id)
    replay = trace_create(
        agent_id=original.agent_id,
        query=original.query,
        llm_backend=original.llm_backend,
        llm_model=original.llm_model,
        customer_id=original.customer_id,
        source="replay",
        origin=Trace.Origin.REPLAY,
    )
    job_progress(
        job_id=job_id,
        advance=0,
        message=f"replaying the request as run {replay.pk}",
    )
    async_to_sync(run_execute)(
        trace_id=str(replay.pk), policy=_policy_with(proposal, facts), reflect=False
    )
    replay.refresh_from_db()
    grounded = replay.outcome in GROUNDED_OUTCOMES
    repeated = (
        proposal.kind == "prompt_hint" and replay.steps.filter(error_type=facts.error_type).exists()
    )
    ok = grounded and not repeated
    if not ok:
        for error_type in set(
            replay.steps.exclude(error_type="").values_list("error_type", flat=True)
        ):
            _failure_seen(error_type)
    detail = f"replay run {replay.pk}: {replay.status}"
    if replay.outcome:
        detail += f" ({replay.outcome})"
    if not grounded:
        detail += ", no grounded answer"
    if repeated:
        detail += f", {facts.error_type} again"
    return ok, detail, reverse("traces:detail", args=[replay.pk])


# --- stage 1 for random faults: paired replays --------------------------------------------
# Failures an upstream produces at random: one replay that happens to succeed proves nothing.
RANDOM_FAULTS = frozenset(
    {"RATE_LIMITED", "INTERNAL_SERVER_ERROR", "SERVICE_UNAVAILABLE", "TIMEOUT", "CONNECTION_ERROR"}
)
# Failures no wording of the prompt changes: the response's size, a tool the breaker
# suspended, an endpoint off the allow-list or a redirect loop, missing credentials.
BEYOND_THE_PROMPT = frozenset(
    {"RESPONSE_TOO_LARGE", "TOOL_SUSPENDED", "INVALID_ENDPOINT", "UNAUTHORIZED"}
)
RANDOM_FAULT_PAIRS = 6
# One-sided exact sign test over the discordant pairs: with 6 pairs, p <= 0.05 needs the
# strategy to win at least 5 pairs and lose none.
RANDOM_FAULT_ALPHA = 0.05
_FAULT_STATUSES = frozenset({429, 500, 502, 503, 504})
_FAULT_CODES = frozenset({ExecutorCode.TIMEOUT, ExecutorCode.CONNECTION_ERROR})


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test (McNemar's exact test on the discordant pairs): the
    chance of at least ``wins`` wins in ``wins + losses`` fair coin flips."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def _is_random_fault(result: ToolCallResult) -> bool:
    return result.code in _FAULT_CODES or result.status_code in _FAULT_STATUSES


@dataclass(frozen=True)
class PairedResult:
    """Paired replays: per pair, did the call succeed without and with the strategy."""

    pairs: tuple[tuple[bool, bool], ...]

    @property
    def without(self) -> int:
        return sum(1 for bare, _ in self.pairs if bare)

    @property
    def with_strategy(self) -> int:
        return sum(1 for _, fixed in self.pairs if fixed)

    @property
    def wins(self) -> int:
        return sum(1 for bare, fixed in self.pairs if fixed and not bare)

    @property
    def losses(self) -> int:
        return sum(1 for bare, fixed in self.pairs if bare and not fixed)

    @property
    def p_value(self) -> float:
        return sign_test_p(self.wins, self.losses)

    @property
    def passed(self) -> bool:
        """Strictly more successes with the strategy, and significant (one-sided)."""
        return self.with_strategy > self.without and self.p_value <= RANDOM_FAULT_ALPHA

    def describe(self) -> str:
        n = len(self.pairs)
        return (
            f"{self.with_strategy} of {n} calls succeeded with the strategy, "
            f"{self.without} of {n} without ({self.wins} pair{'' if self.wins == 1 else 's'} "
            f"won, {self.losses} lost, "
            f"one-sided sign test p = {self.p_value:.3g})"
        )


async def _handler_act(
    executor: ToolExecutor,
    branch: dict[str, Any],
    checked: ValidatedCall,
    result: ToolCallResult,
    context: RepairContext,
    rules: list[Any],
) -> bool:
    """Whether the call succeeds once the error handler acted on ``result`` as the runtime
    would (it acts only on its own error type). A hand-over answers nobody: no success."""
    if result.ok:
        return True
    if classify_error(_result_event(result), rules) != branch["on"]:
        return False
    action = branch["action"]
    if action == "degrade_cache":
        from agents.models import ToolResultCache

        signature = call_signature(checked.tool.name, checked.arguments)
        key = hashlib.sha256(signature.encode()).hexdigest()
        return await ToolResultCache.objects.filter(signature=key).aexists()
    if action == "retry_once":
        arguments = dict(checked.arguments)
        for name, transform in branch.get("transform", {}).items():
            arguments, _ = apply_adapters((AdapterRule(0, name, transform),), arguments, context)
        retry = executor.validate(checked.tool.name, arguments)
        if isinstance(retry, ValidationFailure):
            return False
        return (await executor.execute(retry)).ok
    if action == "wait_retry":
        retried, _ = await _waited_retries(executor, checked, result, branch)
        return retried.ok
    if action == "call_tool":
        first = next(iter(checked.arguments.values()), "")
        other = executor.validate(branch["call"], substitute(branch["input"], first))
        if isinstance(other, ValidationFailure):
            return False
        return (await executor.execute(other)).ok
    return False  # handover, or an action the runtime does not know


async def _paired_replay(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    """``RANDOM_FAULT_PAIRS`` pairs of the recorded call, without and with the strategy.

    An error handler acts on the failure of the same first call, so each pair is exactly
    "what happened" and "what the handler made of it". A strategy that changes the call
    (adapter, pre-condition, validation rule) sends its own call after the bare one."""
    from agents.services import tool_snapshots

    tools = await sync_to_async(tool_snapshots)(agent_id=facts.agent_id)
    rules = await error_rules_aload()
    context = await sync_to_async(_repair_context)(facts)
    pairs: list[tuple[bool, bool]] = []
    async with tool_http_client() as client:
        executor = _executor(tools, client)
        # A random fault came from a call that went out: its recorded arguments are those it
        # sent, after the live adapters, and are sent again as they were.
        checked = _as_sent(executor, facts.tool, facts.action_input, recorded=True)
        if isinstance(checked, ValidationFailure):
            return False, _refused(checked)
        if proposal.kind == "error_handler" and proposal.branch.get("action") == "degrade_cache":
            from agents.models import ToolResultCache

            signature = call_signature(checked.tool.name, checked.arguments)
            key = hashlib.sha256(signature.encode()).hexdigest()
            if not await ToolResultCache.objects.filter(signature=key).aexists():
                # Every pair would lose for want of a cached result, not for the handler.
                return False, (
                    INCONCLUSIVE + "nothing cached for this call: the handler has nothing to serve"
                )
        for number in range(RANDOM_FAULT_PAIRS):
            if proposal.kind == "error_handler":
                bare = await executor.execute(checked)
                fixed = await _handler_act(executor, proposal.branch, checked, bare, context, rules)
                pairs.append((bare.ok, fixed))
                continue
            applied = await _strategy_applied(
                executor, proposal, facts.tool, facts.action_input, context, recorded=True
            )
            if applied.call is None:
                # Unchanged, the call is the bare call; blocked or invalid, nothing is sent.
                bare_ok = (await executor.execute(checked)).ok
                fixed = bare_ok and applied.state == "unchanged"
            elif number % 2 == 0:
                # Which call goes first alternates, so an upstream's own rhythm (every
                # other call refused) favours neither side.
                bare_ok = (await executor.execute(checked)).ok
                fixed = (await executor.execute(applied.call)).ok
            else:
                fixed = (await executor.execute(applied.call)).ok
                bare_ok = (await executor.execute(checked)).ok
            pairs.append((bare_ok, fixed))
    result = PairedResult(tuple(pairs))
    verdict = "beats" if result.passed else "does not beat"
    call = f"{facts.tool} {canonical_json(facts.action_input)}"
    return result.passed, (
        f"{facts.error_type} is a random fault: the strategy {verdict} no strategy on "
        f"{RANDOM_FAULT_PAIRS} paired replays of {call}: {result.describe()}"
    )


# --- stage 2: the regression replay -------------------------------------------------------
REGRESSION_KINDS = frozenset({"adapter", "pre_condition", "validation_rule"})
REGRESSION_CALLS = 5
_REGRESSION_SCAN = 50  # recent successful steps read to find REGRESSION_CALLS distinct calls


@dataclass(frozen=True)
class _Applied:
    """A strategy applied to a call: ``state`` is "call" (send ``call``), "unchanged" (the
    strategy leaves the call as it was), "blocked" (a validation rule refuses it) or
    "invalid" (the tool's schema refuses the arguments)."""

    state: str
    call: ValidatedCall | None = None
    why: str = ""


def _as_sent(
    executor: ToolExecutor, tool: str, arguments: dict[str, Any], *, recorded: bool
) -> ValidatedCall | ValidationFailure:
    """The call to send. ``recorded`` arguments are those a successful call sent, after the
    adapters of the policy it ran with: they are not validated against the tool's schema
    again (that schema may be exactly what those adapters repair)."""
    snapshot = executor.tools.get(tool)
    if not recorded or snapshot is None or snapshot.suspended:
        return executor.validate(tool, arguments)
    return ValidatedCall(tool=snapshot, arguments=dict(arguments), adapters_fired=[])


async def _strategy_applied(
    executor: ToolExecutor,
    proposal: Proposal,
    tool: str,
    arguments: dict[str, Any],
    context: RepairContext,
    *,
    recorded: bool = False,
) -> _Applied:
    """``arguments`` as the runtime would send them with this strategy added to the policy
    (``recorded``: as a successful call sent them, see ``_as_sent``)."""
    branch = proposal.branch
    arguments = dict(arguments)
    if proposal.kind == "pre_condition":
        # Before validation, as in the runtime; a lookup that finds nothing changes nothing.
        value = arguments.get(branch["arg"])
        if value is None or regex_fullmatch(branch["not_pattern"], str(value), otherwise=True):
            return _Applied("unchanged")
        lookup = executor.validate(branch["call"], substitute(branch["input"], value))
        if isinstance(lookup, ValidationFailure):
            return _Applied("unchanged")
        found_result = await executor.execute(lookup)
        try:
            found = dotted_get(json.loads(found_result.body), branch["take"])
        except ValueError:
            found = None
        if found is None or found == value:
            return _Applied("unchanged")
        arguments[branch["assign"]] = found
    checked = _as_sent(executor, tool, arguments, recorded=recorded)
    if isinstance(checked, ValidationFailure):
        return _Applied("invalid", why=f"{checked.code}: {checked.detail}")
    if proposal.kind == "pre_condition":
        return _Applied("call", checked)
    if proposal.kind == "validation_rule":
        if "amend" in branch:
            # An amendment replaces the tool's schema: it must still accept the good calls.
            amendment = SchemaAmendment(0, dict(branch["amend"]), int(branch.get("version", 1)))
            schema = schema_amend(checked.tool.params_schema, (amendment,))
        else:
            schema = branch["schema"]
        issues = validate_arguments(schema=schema, arguments=checked.arguments)
        if issues:
            return _Applied("blocked", why=issues[0].message)
        return _Applied("unchanged")
    if proposal.kind == "adapter":
        rule = adapter_rule(0, branch)
        changed, fired = apply_adapters(
            (rule,), checked.arguments, context, tool_locations=checked.tool.param_locations
        )
        if not fired:
            return _Applied("unchanged")
        return _Applied(
            "call",
            ValidatedCall(
                tool=checked.tool,
                arguments=changed,
                adapters_fired=[],
                param_locations=fired_locations(fired, changed),
            ),
        )
    return _Applied("unchanged")


def _recent_good_calls(facts: FailureFacts) -> list[Step]:
    """The tool's most recent successful calls, one per distinct argument set, newest first
    (a result served from the cache is not a call the API accepted)."""
    rows = (
        Step.objects.filter(tool_name=facts.tool, ok=True, phase="action", action_type="tool")
        .exclude(status_code=None)
        .order_by("-pk")
        .only("trace_id", "step_number", "action_input")[:_REGRESSION_SCAN]
    )
    seen: set[str] = set()
    calls: list[Step] = []
    for step in rows:
        key = canonical_json(step.action_input or {})
        if key in seen:
            continue
        seen.add(key)
        calls.append(step)
        if len(calls) == REGRESSION_CALLS:
            break
    return calls


async def _settled(executor: ToolExecutor, call: ValidatedCall) -> ToolCallResult:
    """Send ``call``; a random fault (429, 5xx, timeout) gets one more try."""
    result = await executor.execute(call)
    if not result.ok and _is_random_fault(result):
        result = await executor.execute(call)
    return result


async def _regression_replay(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    """Apply the strategy to the tool's recent successful calls: every one it changes must
    still succeed, and a validation rule must block none of them.

    A call the strategy broke or blocked counts against it only if the same call, sent
    as it was, still succeeds now: an API that moved on since (the drift being repaired,
    an earlier one) refuses the old call with or without the strategy, and that is not
    the strategy's doing. A random fault that persists over a retry leaves the call
    inconclusive, not counted against the strategy."""
    from agents.services import tool_snapshots

    good = await sync_to_async(_recent_good_calls)(facts)
    if not good:
        return True, f"no earlier successful call of {facts.tool} to check against"
    tools = await sync_to_async(tool_snapshots)(agent_id=facts.agent_id)
    broken: list[str] = []
    counts = {"kept": 0, "passed": 0, "inconclusive": 0, "invalid": 0, "stale": 0}
    async with tool_http_client() as client:
        executor = _executor(tools, client)
        for step in good:
            arguments = dict(step.action_input or {})
            context = await sync_to_async(_repair_context_at)(str(step.trace_id), step.step_number)
            applied = await _strategy_applied(
                executor, proposal, facts.tool, arguments, context, recorded=True
            )
            shown = f"{facts.tool} {canonical_json(arguments)}"
            if applied.state == "unchanged":
                counts["kept"] += 1
                continue
            if applied.state == "invalid":
                counts["invalid"] += 1
                continue
            why = f"blocked: {applied.why}"
            if applied.call is not None:
                result = await _settled(executor, applied.call)
                if result.ok:
                    counts["passed"] += 1
                    continue
                if _is_random_fault(result):
                    counts["inconclusive"] += 1
                    continue
                sent = canonical_json(applied.call.arguments)
                why = f"sent as {sent} -> {result.status_code or result.code}"
            # Would the call have succeeded without the strategy?
            bare = _as_sent(executor, facts.tool, arguments, recorded=True)
            if isinstance(bare, ValidationFailure):
                counts["invalid"] += 1
                continue
            without = await _settled(executor, bare)
            if without.ok:
                broken.append(f"{shown} ({why})")
            elif _is_random_fault(without):
                counts["inconclusive"] += 1
            else:
                counts["stale"] += 1
    checked = len(good) - counts["invalid"]
    if broken:
        return False, (
            f"blocks {len(broken)} of {checked} recent good calls of {facts.tool}: "
            + "; ".join(broken)
        )
    notes = [f"{counts['passed']} changed and replayed", f"{counts['kept']} left as they were"]
    if counts["stale"]:
        notes.append(f"{counts['stale']} no longer accepted without it either")
    if counts["inconclusive"]:
        notes.append(f"{counts['inconclusive']} inconclusive (random faults)")
    return True, (
        f"{checked} recent good call{'' if checked == 1 else 's'} of {facts.tool} "
        f"{'passes' if checked == 1 else 'pass'} with the strategy ({', '.join(notes)})"
    )


# --- the replay ---------------------------------------------------------------------------
def _executor(tools: Any, client: httpx.AsyncClient) -> ToolExecutor:
    return ToolExecutor(
        tools=tools,
        http_client=client,
        max_response_bytes=settings.TOOL_MAX_RESPONSE_BYTES,
        max_redirects=settings.TOOL_MAX_REDIRECTS,
    )


def replay_stages(proposal: Proposal, facts: FailureFacts) -> list[str]:
    """The stages ``strategy_replay`` runs for this proposal, in order."""
    if proposal.kind == "prompt_hint":
        return ["run"]
    first = "paired" if facts.error_type in RANDOM_FAULTS else "call"
    regression = ["regression"] if proposal.kind in REGRESSION_KINDS else []
    return [first, *regression, "run"]


# A replay that could not test the strategy (nothing cached for a cache handler to serve,
# the tool suspended by the timeout breaker) says so with this prefix: it is no evidence
# against the strategy, and the negative-feedback stop does not count it.
INCONCLUSIVE = "inconclusive: "


def _refused(checked: ValidationFailure) -> str:
    """What a refused replay call says; a suspended tool tests nothing."""
    text = f"{checked.code}: {checked.detail}"
    return INCONCLUSIVE + text if checked.code == ExecutorCode.TOOL_SUSPENDED else text


@dataclass(frozen=True)
class ReplayOutcome:
    """``strategy_replay``'s verdict, with the error types its failing stage met (the
    replayed calls' and the replayed run's; empty when it failed another way)."""

    passed: bool
    detail: str
    error_types: frozenset[str] = frozenset()


def strategy_replay_outcome(*, proposal: Proposal, facts: FailureFacts) -> ReplayOutcome:
    """``strategy_replay``, telling what the replay failed on: a replay that fixed the
    error it targets and then met another (the order does not exist) can be told from one
    that did not fix it (``policies.services.failure_unrelated``)."""
    seen: list[Any] = []
    token = _replay_failures.set(seen)
    try:
        passed, detail = strategy_replay(proposal=proposal, facts=facts)
    finally:
        _replay_failures.reset(token)
    if passed or not seen:
        return ReplayOutcome(passed, detail)
    rules = error_rules_load()
    types = {
        item if isinstance(item, str) else classify_error(_result_event(item), rules)
        for item in seen
    }
    return ReplayOutcome(passed, detail, frozenset(types))


def strategy_replay(*, proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    """Replay ``proposal`` through its stages (``replay_stages``); (passed, what happened).

    Each replay is a Job with one unit per stage; it stops at the first stage that fails.
    A run ingested over OTLP is not replayed: its agent, model and tools live outside this
    installation, so no run here could show that the strategy works for it (replaying it
    with a local agent would pass by luck, or crash on a provider this installation lacks).
    """
    if Trace.objects.filter(pk=facts.trace_id, origin=Trace.Origin.EXTERNAL).exists():
        from policies.reflexion import NOT_REPLAYED_EXTERNAL

        return False, NOT_REPLAYED_EXTERNAL
    if proposal.kind == "prompt_hint" and facts.error_type in RANDOM_FAULTS:
        return False, (
            f"{facts.error_type} is a random fault: a prompt hint does not change the call, "
            "so it cannot beat no strategy on paired replays"
        )
    if proposal.kind == "prompt_hint" and facts.error_type in BEYOND_THE_PROMPT:
        # One replayed run that happens to end well would publish words that change nothing
        # the failure depends on.
        return False, (
            f"{facts.error_type} comes from the upstream or the installation (the response's "
            "size, a suspended tool, the endpoint), not from what the model sends: a prompt "
            "hint cannot change it"
        )
    known = proposal.kind in KINDS and (
        proposal.kind != "error_handler" or proposal.branch.get("action") in ERROR_HANDLER_ACTIONS
    )
    if not known:
        return False, f"cannot replay a {proposal.kind}"
    stages = replay_stages(proposal, facts)
    with job_running(
        kind=Job.Kind.REPLAY,
        name=f"replay {proposal.kind} for {facts.signature}",
        total=len(stages),
        message=f"replaying step {facts.step_number} of run {facts.trace_id}",
    ) as job:
        details: list[str] = []
        result_url = reverse("traces:detail", args=[facts.trace_id])
        passed = True
        for done, stage in enumerate(stages):
            seen = _replay_failures.get()
            if seen is not None:
                seen.clear()  # what the failing stage met, not what a passing one did
            if stage == "run":
                passed, detail, result_url = _replay_run(proposal, facts, job_id=job.pk)
            elif stage == "paired":
                job_progress(
                    job_id=job.pk,
                    advance=0,
                    message=f"{RANDOM_FAULT_PAIRS} paired replays of step {facts.step_number}",
                )
                passed, detail = async_to_sync(_paired_replay)(proposal, facts)
            elif stage == "regression":
                job_progress(
                    job_id=job.pk,
                    advance=0,
                    message=f"replaying up to {REGRESSION_CALLS} recent good calls of {facts.tool}",
                )
                passed, detail = async_to_sync(_regression_replay)(proposal, facts)
            else:
                passed, detail = _strategy_replay(proposal, facts)
            details.append(detail)
            job_progress(job_id=job.pk)
            if not passed:
                # The job ran to its end either way; whether the strategy passed is its result.
                job_progress(job_id=job.pk, advance=len(stages) - done - 1)
                details = [detail]
                break
        detail = "; ".join(details)
        job_finish(
            job_id=job.pk,
            message=("passed: " if passed else "failed: ") + detail,
            result_url=result_url,
        )
    return passed, detail


async def _amendment_replay(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    """The refused input must pass the amended schema, and the API must then accept it."""
    from agents.services import tool_snapshots

    tools = await sync_to_async(tool_snapshots)(agent_id=facts.agent_id)
    tool = tools.get(facts.tool)
    if tool is None:
        return False, f"{facts.tool} is not a tool of this agent"
    amendment = SchemaAmendment(
        0, dict(proposal.branch["amend"]), proposal.branch.get("version", 1)
    )
    amended = replace(tool, params_schema=schema_amend(tool.params_schema, (amendment,)))
    if not validate_arguments(schema=tool.params_schema, arguments=facts.action_input):
        return False, "the tool's own schema already accepts the recorded input"
    async with tool_http_client() as client:
        executor = ToolExecutor(
            tools={**tools, facts.tool: amended},
            http_client=client,
            max_response_bytes=settings.TOOL_MAX_RESPONSE_BYTES,
            max_redirects=settings.TOOL_MAX_REDIRECTS,
        )
        return await _call(executor, facts.tool, dict(facts.action_input))


def _strategy_replay(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    if proposal.kind == "validation_rule" and "amend" in proposal.branch:
        return async_to_sync(_amendment_replay)(proposal, facts)
    if proposal.kind == "validation_rule":
        issues = validate_arguments(schema=proposal.branch["schema"], arguments=facts.action_input)
        if issues:
            return True, "the rule rejects the recorded input before the API call: " + issues[
                0
            ].message
        return False, "the rule accepts the recorded input, so it would not have helped"
    return async_to_sync(_replay_tool_call)(proposal, facts)
