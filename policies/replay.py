"""Replay check: the recorded failing step, replayed with the strategy applied against the
real tool endpoint, must now pass before the strategy can be approved."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.urls import reverse

from agents.adapters import validate_arguments
from agents.executor import ToolExecutor, ValidationFailure
from agents.policy_runtime import (
    AdapterRule,
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
from policies.branches import adapter_rule, runtime_policy_compile
from policies.selectors import runtime_policy_for_run
from traces.models import Job, Trace
from traces.services import job_finish, job_progress, job_running

if TYPE_CHECKING:
    from policies.reflexion import FailureFacts, Proposal


async def _call(executor: ToolExecutor, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    checked = executor.validate(tool, arguments)
    if isinstance(checked, ValidationFailure):
        return False, f"{checked.code}: {checked.detail}"
    result = await executor.execute(checked)
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
        return False, f"{checked.code}: {checked.detail}"
    result = await executor.execute(checked)
    cap = min(float(branch.get("max_wait_s", 30.0)), REPLAY_MAX_WAIT_S)
    notes = [str(result.status_code or result.code)]
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
    return result.ok, f"{tool} {canonical_json(arguments)} -> " + ", ".join(notes)


async def _replay_tool_call(proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    from agents.services import tool_snapshots

    tools = await sync_to_async(tool_snapshots)(agent_id=facts.agent_id)
    branch = proposal.branch
    async with httpx.AsyncClient(trust_env=False) as client:
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
                return False, f"{checked.code}: {checked.detail}"
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
            return result.ok, f"{facts.tool} {canonical_json(arguments)} -> {result.status_code}"
        if proposal.kind == "pre_condition":
            value = arguments.get(branch["arg"])
            if value is None or re.fullmatch(branch["not_pattern"], str(value)):
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
                    return False, "nothing cached for this call: the handler has nothing to serve"
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
    """The context the runtime had at the failing step: the run's query, its customer and
    the results of its successful calls before that step."""
    from traces.models import Step, Trace

    trace = Trace.objects.filter(pk=facts.trace_id).only("query", "customer_id").first()
    steps = Step.objects.filter(
        trace_id=facts.trace_id,
        step_number__lt=facts.step_number,
        phase="action",
        action_type="tool",
        ok=True,
    ).order_by("step_number")
    return RepairContext(
        query=facts.query,
        customer_id=(trace.customer_id or "") if trace else "",
        facts=tuple(
            (step.tool_name, step.response_summary)
            for step in steps.only("tool_name", "response_summary")
            if step.response_summary
        ),
    )


def _replay_run(proposal: Proposal, facts: FailureFacts, *, job_id: int) -> tuple[bool, str, str]:
    """A prompt hint changes the model's behaviour: replay the whole request with it."""
    from agents.services import run_execute
    from traces.services import trace_create

    original = Trace.objects.get(pk=facts.trace_id)
    base = runtime_policy_for_run()
    hint = runtime_policy_compile(
        version=base.version + "+replay",
        strategies=[(0, proposal.kind, proposal.branch, facts.error_type)],
    )
    policy = type(base)(
        version=hint.version,
        hints=(*base.hints, *hint.hints),
        adapters=base.adapters,
        validation_rules={**base.validation_rules, **hint.validation_rules},
        pre_conditions=base.pre_conditions,
        error_handlers=base.error_handlers,
        schema_amendments={**base.schema_amendments, **hint.schema_amendments},
    )
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
    async_to_sync(run_execute)(trace_id=str(replay.pk), policy=policy, reflect=False)
    replay.refresh_from_db()
    repeated = replay.steps.filter(error_type=facts.error_type).exists()
    ok = replay.status == Trace.Status.FINISHED and not repeated
    detail = f"replay run {replay.pk}: {replay.status}" + (
        f", {facts.error_type} again" if repeated else ""
    )
    return ok, detail, reverse("traces:detail", args=[replay.pk])


def strategy_replay(*, proposal: Proposal, facts: FailureFacts) -> tuple[bool, str]:
    """Replay the failing step with ``proposal`` applied; (passed, what happened).

    Each replay is a Job: a prompt hint replays a whole run, which takes as long as one.
    A run ingested over OTLP is not replayed: its agent, model and tools live outside this
    installation, so no run here could show that the strategy works for it (replaying it
    with a local agent would pass by luck, or crash on a provider this installation lacks).
    """
    if Trace.objects.filter(pk=facts.trace_id, origin=Trace.Origin.EXTERNAL).exists():
        return False, (
            "not replayed: the run was ingested over OTLP and its agent runs outside Agent "
            "Ops; the analysis is recorded, no strategy is published from it"
        )
    with job_running(
        kind=Job.Kind.REPLAY,
        name=f"replay {proposal.kind} for {facts.signature}",
        total=1,
        message=f"replaying step {facts.step_number} of run {facts.trace_id}",
    ) as job:
        if proposal.kind == "prompt_hint":
            passed, detail, result_url = _replay_run(proposal, facts, job_id=job.pk)
        else:
            passed, detail = _strategy_replay(proposal, facts)
            result_url = reverse("traces:detail", args=[facts.trace_id])
        # The job ran to the end either way; whether the strategy passed is its result.
        job_progress(job_id=job.pk)
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
    async with httpx.AsyncClient(trust_env=False) as client:
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
