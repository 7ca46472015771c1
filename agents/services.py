"""Writes of the agents app: tools, agents, and starting / executing runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from agents.answer_format import answer_style
from agents.hooks import policy_for_run
from agents.http_clients import tool_http_client
from agents.intents import Intent, intent_detect
from agents.llm.base import llm_close
from agents.llm.factory import llm_client_build
from agents.memory import MAX_FACTS_PER_CUSTOMER, facts_extract
from agents.models import Agent, CustomerFact, KnowledgeArticle, Tool, ToolAlert
from agents.policy_runtime import RuntimePolicy
from agents.retrieval.knowledge import kb_asearch
from agents.retrieval.selfrag import SelfRagConfig, selfrag_execute
from agents.runtime import AgentRun, RunOutcome, RuntimeConfig
from agents.signals import customer_memory_changed, run_ended, tool_admin_changed
from agents.sink import RunSink
from agents.telemetry import run_telemetry_start
from agents.tools import builtin_tools  # noqa: F401  (registers the in-process tools)
from agents.tools.credentials import ToolAuthInvalid, tool_auth_parse
from agents.tools.endpoints import endpoint_template_problem, sandbox_base_url
from agents.tools.executor import ToolExecutor, ToolSnapshot
from agents.tools.registry import ToolDefinition, registered_python_tools
from agents.tools.tool_catalog import SANDBOX_TOOLS
from agents.tools.tool_import import ToolImportError, ToolSpec, tools_import_parse
from traces import services as trace_services
from traces.classifier import error_rules_aload
from traces.db_threads import db_async
from traces.models import Step, Trace
from traces.recorder import RunConflict, step_to_record
from traces.rollups import rollups_remember_trace

logger = logging.getLogger(__name__)

DEFAULT_AGENT_SLUG = "support"
# Checked by the chat page and POST /api/runs/; run_start itself trusts its caller.
START_RUN = "agents.start_run"


def agent_ensure_default() -> Agent:
    agent, _ = Agent.objects.get_or_create(
        slug=DEFAULT_AGENT_SLUG,
        defaults={
            "name": "Support assistant",
            "description": "Looks up orders, prices, stock, returns and policies for support.",
        },
    )
    return agent


def _tool_defaults(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "description": definition.description,
        "kind": definition.kind,
        "params_schema": definition.params_schema,
        "endpoint_template": definition.endpoint,
        "method": definition.method,
        "timeout_seconds": definition.timeout_seconds or settings.TOOL_DEFAULT_TIMEOUT_SECONDS,
        "key_fields": definition.key_fields,
        "query_map": definition.query_map,
        "adapters": definition.adapters,
    }


@transaction.atomic
def tools_sync(*, agents: list[Agent] | None = None, overwrite: bool = False) -> list[Tool]:
    """Create rows for the code-declared tools; existing rows keep admins' edits
    unless ``overwrite``. New rows are allowed for ``agents``."""
    rows = []
    for definition in [*SANDBOX_TOOLS, *registered_python_tools()]:
        if definition.kind == Tool.Kind.HTTP:
            problem = endpoint_template_problem(definition.endpoint)
            if problem:
                raise ValidationError(f"tool {definition.name}: {problem}")
        tool, created = Tool.objects.get_or_create(
            name=definition.name, defaults=_tool_defaults(definition)
        )
        if not created and overwrite:
            for key, value in _tool_defaults(definition).items():
                setattr(tool, key, value)
            tool.save()
        if created and agents:
            tool.allowed_agents.add(*agents)
        rows.append(tool)
    return rows


@transaction.atomic
def tool_suspend(*, name: str, minutes: int, timeouts: int) -> None:
    """Suspend a tool after repeated timeouts and write an alert row."""
    tool = Tool.objects.select_for_update().get(name=name)
    if tool.is_suspended():
        return
    tool.suspended_until = timezone.now() + timedelta(minutes=minutes)
    tool.save(update_fields=["suspended_until", "updated_at"])
    ToolAlert.objects.create(
        tool=tool,
        kind=ToolAlert.Kind.SUSPENDED,
        message=f"{name} suspended for {minutes} min after {timeouts} timeouts in the last hour.",
        details={"timeouts": timeouts, "minutes": minutes},
    )
    logger.warning("tool.suspended", extra={"tool": name, "timeouts": timeouts})


# What an admin may edit on the tools page; the rest (adapters, auth, key fields) stays in
# code and the Django admin.
TOOL_EDITABLE_FIELDS = (
    "description",
    "endpoint_template",
    "method",
    "timeout_seconds",
    "params_schema",
)


def _tool_audit(*, tool: Tool, actor: Any, action: str, details: dict[str, Any]) -> None:
    """Announce an admin's change: ``reviews`` writes the audit row in this transaction."""
    tool_admin_changed.send(
        sender=Tool, actor=actor, action=action, target=tool.name, details=details
    )
    logger.info(
        "tool.admin_changed",
        extra={"tool": tool.name, "action": action, "actor": getattr(actor, "pk", None)},
    )


@transaction.atomic
def tool_set_enabled(*, tool_id: int, enabled: bool, actor: Any) -> Tool:
    """Enable or disable a tool. Runs take their tool snapshots when they start, so the
    next run started after a disable cannot call the tool (a run already going keeps its
    snapshot)."""
    tool = Tool.objects.select_for_update().get(pk=tool_id)
    if tool.enabled == enabled:
        return tool
    tool.enabled = enabled
    tool.save(update_fields=["enabled", "updated_at"])
    _tool_audit(
        tool=tool,
        actor=actor,
        action="tool.enable" if enabled else "tool.disable",
        details={"enabled": enabled},
    )
    return tool


@transaction.atomic
def tool_update(
    *,
    tool_id: int,
    actor: Any,
    description: str,
    endpoint_template: str,
    method: str,
    timeout_seconds: float,
    params_schema: dict[str, Any],
    allowed_agents: list[Agent],
) -> Tool:
    """Save an admin's edit of a tool after the model's own checks (endpoint allow-list,
    schema shape, timeout range); raises ``ValidationError`` and saves nothing otherwise."""
    tool = Tool.objects.select_for_update().get(pk=tool_id)
    values = {
        "description": description,
        "endpoint_template": endpoint_template,
        "method": method,
        "timeout_seconds": timeout_seconds,
        "params_schema": params_schema,
    }
    changed = [name for name in TOOL_EDITABLE_FIELDS if getattr(tool, name) != values[name]]
    for name in changed:
        setattr(tool, name, values[name])
    tool.full_clean()
    if changed:
        tool.save(update_fields=[*changed, "updated_at"])
    before = set(tool.allowed_agents.values_list("slug", flat=True))
    after = {agent.slug for agent in allowed_agents}
    if before != after:
        tool.allowed_agents.set(allowed_agents)
    if changed or before != after:
        details: dict[str, Any] = {"fields": changed}
        if before != after:
            details["agents_added"] = sorted(after - before)
            details["agents_removed"] = sorted(before - after)
        _tool_audit(tool=tool, actor=actor, action="tool.update", details=details)
    return tool


def customer_facts_for(*, customer_id: str) -> list[str]:
    """The remembered facts of one customer, oldest first (what a run's prompt carries)."""
    return list(
        CustomerFact.objects.filter(customer_id=customer_id)
        .order_by("created_at", "pk")
        .values_list("fact", flat=True)[:MAX_FACTS_PER_CUSTOMER]
    )


@transaction.atomic
def customer_facts_learn(
    *, customer_id: str, text: str, trace_id: str | None
) -> list[CustomerFact]:
    """Store the facts ``text`` states (``agents.memory.facts_extract``) for ``customer_id``,
    with the trace they came from. One row per (customer, key): a repeated fact updates its
    source, a changed preference replaces the old one; past the cap nothing new is added."""
    if not customer_id:
        return []
    learned = facts_extract(text)
    if not learned:
        return []
    existing = {
        fact.key: fact
        for fact in CustomerFact.objects.select_for_update().filter(customer_id=customer_id)
    }
    rows = []
    for item in learned:
        row = existing.get(item.key)
        if row is None:
            if len(existing) >= MAX_FACTS_PER_CUSTOMER:
                continue
            row = CustomerFact(customer_id=customer_id, key=item.key)
            existing[item.key] = row
        row.fact = item.fact
        row.source_trace_id = trace_id
        row.save()
        rows.append(row)
    # Preferring a channel and refusing it cannot both stand: the newer statement wins.
    preferred = existing.get("contact.preferred")
    if preferred is not None and any(r.key == "contact.preferred" for r in rows):
        channel = preferred.fact.rsplit(" ", 1)[-1].rstrip(".").lower()
        CustomerFact.objects.filter(
            customer_id=customer_id, key=f"contact.refused.{channel}"
        ).delete()
    for row in rows:
        if row.key.startswith("contact.refused."):
            refused = row.key.rsplit(".", 1)[-1]
            if preferred is not None and preferred.fact.lower().endswith(f" {refused}."):
                CustomerFact.objects.filter(pk=preferred.pk).delete()
    logger.info("memory.learned", extra={"trace_id": trace_id, "facts": len(rows)})
    return rows


@transaction.atomic
def customer_fact_delete(*, fact_id: int, actor: Any) -> CustomerFact:
    """Forget one fact; the deletion is audited (who, which customer, which fact)."""
    fact = CustomerFact.objects.select_for_update().get(pk=fact_id)
    fact_pk = fact.pk
    fact.delete()
    fact.pk = fact_pk
    customer_memory_changed.send(
        sender=CustomerFact,
        actor=actor,
        action="memory.delete",
        target=fact.customer_id,
        details={"key": fact.key, "fact": fact.fact, "source_trace": str(fact.source_trace_id)},
    )
    return fact


@dataclass(frozen=True)
class ToolImportResult:
    """What an import did (or, for a dry run, would do), by tool name."""

    specs: list[ToolSpec]
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


# The fields an import writes; ``enabled`` and ``allowed_agents`` are never among them.
TOOL_IMPORT_FIELDS = (
    "description",
    "method",
    "endpoint_template",
    "params_schema",
    "param_locations",
    "query_map",
)


def _import_template(template: str) -> str:
    # Tools on the sandbox keep following SANDBOX_BASE_URL, as the code-declared ones do.
    base = sandbox_base_url()
    if base and (template == base or template.startswith(base + "/")):
        return "{sandbox}" + template[len(base) :]
    return template


def tools_import(
    *,
    raw: bytes | str,
    base_url: str = "",
    origin: str = "",
    actor: Any = None,
    dry_run: bool = False,
) -> ToolImportResult:
    """Create or update one Tool row per operation of an OpenAPI 3 document or function list.

    New rows are disabled and allowed for no agent: an admin enables them. A re-import
    updates the rows it made before (matched by name) and never changes ``enabled``. A
    name already used by a code-declared tool, an endpoint off the allow-list or any other
    problem raises ``ToolImportError`` listing them all, and nothing is written.
    """
    specs = tools_import_parse(raw, base_url=base_url)
    result = ToolImportResult(specs=specs)
    with transaction.atomic():
        existing = {
            tool.name: tool
            for tool in Tool.objects.select_for_update().filter(name__in=[s.name for s in specs])
        }
        problems: list[str] = []
        pending: list[tuple[Tool, list[str]]] = []
        # Names the code declares, whether or not tools_sync has made their rows yet (a
        # fresh installation, a tool a new release adds): an import never takes one.
        declared = {d.name for d in [*SANDBOX_TOOLS, *registered_python_tools()]}
        for spec in specs:
            tool = existing.get(spec.name)
            if spec.name in declared or (tool is not None and tool.source != Tool.Source.IMPORT):
                problems.append(f"{spec.name}: a code-declared tool already has this name")
                continue
            if tool is None:
                tool = Tool(name=spec.name, kind=Tool.Kind.HTTP, enabled=False)
                tool.source = Tool.Source.IMPORT
                tool.timeout_seconds = settings.TOOL_DEFAULT_TIMEOUT_SECONDS
                tool.adapters = ["trim_whitespace", "enum_normalise"]
            values = {
                "description": spec.description,
                "method": spec.method,
                "endpoint_template": _import_template(spec.endpoint_template),
                "params_schema": spec.params_schema,
                "param_locations": spec.param_locations,
                "query_map": spec.query_map,
            }
            changed = [name for name in TOOL_IMPORT_FIELDS if getattr(tool, name) != values[name]]
            for name, value in values.items():
                setattr(tool, name, value)
            tool.import_origin = origin[:200]
            try:
                tool.full_clean(validate_unique=False)
            except ValidationError as exc:
                for name, messages in exc.message_dict.items():
                    problems.extend(f"{spec.name}: {name}: {message}" for message in messages)
                continue
            pending.append((tool, changed))
        if problems:
            raise ToolImportError(problems)
        for tool, changed in pending:
            bucket = (
                result.created
                if tool.pk is None
                else result.updated
                if changed
                else result.unchanged
            )
            bucket.append(tool.name)
            if dry_run or (tool.pk is not None and not changed):
                continue
            action = "tool.import.create" if tool.pk is None else "tool.import.update"
            tool.save()
            _tool_audit(
                tool=tool,
                actor=actor,
                action=action,
                details={"fields": changed, "origin": tool.import_origin, "enabled": tool.enabled},
            )
    return result


@transaction.atomic
def tool_unsuspend(*, tool_id: int, actor: Any) -> Tool:
    """Lift a timeout suspension by hand: clear ``suspended_until``, acknowledge the open
    suspension alerts and write an alert row saying who lifted it."""
    tool = Tool.objects.select_for_update().get(pk=tool_id)
    if tool.suspended_until is None:
        return tool
    was_until = tool.suspended_until
    tool.suspended_until = None
    tool.save(update_fields=["suspended_until", "updated_at"])
    actor_id = getattr(actor, "pk", None)
    tool.alerts.filter(kind=ToolAlert.Kind.SUSPENDED, acknowledged_by__isnull=True).update(
        acknowledged_by_id=actor_id
    )
    ToolAlert.objects.create(
        tool=tool,
        kind=ToolAlert.Kind.UNSUSPENDED,
        message=f"{tool.name} suspension lifted by {getattr(actor, 'username', 'the system')}.",
        details={"suspended_until": was_until.isoformat()},
        acknowledged_by_id=actor_id,
    )
    _tool_audit(
        tool=tool,
        actor=actor,
        action="tool.unsuspend",
        details={"suspended_until": was_until.isoformat()},
    )
    return tool


class TooManyRunsInFlight(Exception):
    """The user already has ``AGENT_RUNS_IN_FLIGHT_PER_USER`` runs queued or running."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"You already have as many runs queued or running as one user may ({limit}); "
            "wait for some of them to finish, then start more."
        )
        self.limit = limit


def run_admission_check(*, user_id: int | None) -> None:
    """Refuse a new run from a user who has the most runs in flight allowed (a soft limit:
    requests at the same instant may pass it by a few). Raises ``TooManyRunsInFlight``."""
    limit = settings.AGENT_RUNS_IN_FLIGHT_PER_USER
    if not limit or user_id is None:
        return
    in_flight = Trace.objects.filter(
        created_by_id=user_id, status__in=[Trace.Status.QUEUED, Trace.Status.RUNNING]
    )[:limit].count()  # bounded: an index range of at most ``limit`` rows
    if in_flight >= limit:
        logger.warning("run.refused_in_flight", extra={"user_id": user_id, "limit": limit})
        raise TooManyRunsInFlight(limit)


def run_start(
    *,
    agent: Agent,
    query: str,
    customer_id: str = "",
    session_id: str = "",
    user_id: int | None = None,
    source: str = "api",
    locale: str = "",
    time_zone: str = "",
) -> Trace:
    """Store the run as queued and enqueue it once the transaction commits.

    ``locale`` and ``time_zone`` are the customer's answer style; blank ones take the
    site defaults when the run executes.
    """
    with transaction.atomic():
        trace = trace_services.trace_create(
            agent_id=agent.pk,
            query=query,
            llm_backend=settings.LLM_BACKEND,
            llm_model="simulated-react-1"
            if settings.LLM_BACKEND == "simulated"
            else settings.LLM_MODEL,
            customer_id=customer_id,
            session_id=session_id,
            created_by_id=user_id,
            source=source,
            locale=locale,
            time_zone=time_zone,
        )
        trace_id = str(trace.pk)
        transaction.on_commit(lambda: run_enqueue(trace_id=trace_id))
    return trace


def run_enqueue(*, trace_id: str) -> None:
    """Hand the run to Celery, or to this process's event loop in the embedded shape.

    With the broker unreachable the run stays stored as queued and accepted: the stuck-run
    sweeper hands it over once the broker is back, so the caller does not fail.
    """
    if settings.AGENT_EXECUTOR == "celery":
        from kombu.exceptions import OperationalError

        from agents.tasks import run_agent

        try:
            run_agent.delay(trace_id)
        except OperationalError as exc:
            logger.warning(
                "run.enqueue_failed", extra={"trace_id": trace_id, "error": type(exc).__name__}
            )
    else:
        from agents.loop_runner import loop_runner

        loop_runner().submit(run_execute(trace_id=trace_id))


def runtime_config() -> RuntimeConfig:
    return RuntimeConfig(
        max_iterations=settings.AGENT_MAX_ITERATIONS,
        max_consecutive_validation_failures=settings.AGENT_MAX_CONSECUTIVE_VALIDATION_FAILURES,
        repeat_stop_at=settings.AGENT_REPEAT_STOP_AT,
        observation_max_chars=settings.AGENT_OBSERVATION_MAX_CHARS,
        history_verbatim_rounds=settings.AGENT_HISTORY_VERBATIM_ROUNDS,
        timeouts_to_suspend=settings.AGENT_TOOL_TIMEOUTS_PER_HOUR_TO_SUSPEND,
        suspend_minutes=settings.AGENT_TOOL_SUSPEND_MINUTES,
        fallback_reply=settings.AGENT_FALLBACK_REPLY,
        run_time_limit_seconds=settings.AGENT_RUN_SOFT_TIME_LIMIT,
        think_reprompts_max=settings.AGENT_THINK_GUARD_REPROMPTS,
        reflection_reprompts_max=settings.AGENT_REFLECTION_GUARD_REPROMPTS,
    )


def tool_snapshots(*, agent_id: int) -> dict[str, ToolSnapshot]:
    """The enabled tools this agent may call, as immutable snapshots."""
    now = timezone.now()
    return {
        tool.name: ToolSnapshot(
            name=tool.name,
            description=tool.description,
            kind=tool.kind,
            params_schema=tool.params_schema,
            endpoint_template=tool.endpoint_template,
            method=tool.method,
            timeout_seconds=tool.timeout_seconds,
            key_fields=tuple(tool.key_fields or ()),
            query_map=dict(tool.query_map or {}),
            param_locations=dict(tool.param_locations or {}),
            adapters=tuple(tool.adapters or ()),
            suspended=tool.is_suspended(now),
            **_snapshot_auth(tool),
        )
        for tool in Tool.objects.filter(enabled=True, allowed_agents__id=agent_id)
    }


def _snapshot_auth(tool: Tool) -> dict[str, Any]:
    # A row edited past clean() (a queryset update) fails its calls, not the whole run.
    try:
        return {"auth": tool_auth_parse(tool.auth)}
    except ToolAuthInvalid as exc:
        return {"auth_error": f"the tool's auth setting is invalid: {exc}"}


def _load_run(trace_id: str) -> tuple[Trace, dict[str, ToolSnapshot], list[Step]] | None:
    # Worker threads live for days: drop connections past CONN_MAX_AGE or broken (never
    # inside a caller's transaction, whose connection must stay).
    if not connection.in_atomic_block:
        close_old_connections()
    trace = trace_services.trace_start_running(trace_id=trace_id)
    if trace is None:
        return None
    steps = list(trace.steps.order_by("step_number"))
    return trace, tool_snapshots(agent_id=trace.agent_id), steps


async def run_execute(
    *,
    trace_id: str,
    config: RuntimeConfig | None = None,
    on_step: Callable[[Step], None] | None = None,
    llm_backend: str | None = None,
    policy: RuntimePolicy | None = None,
    reflect: bool = True,
) -> RunOutcome | None:
    """Execute (or resume) one run to a terminal state. Idempotent per trace id.

    ``policy`` overrides the version the run's bucket resolves to (replays use it; no A/B
    experiment arm is assigned then); ``reflect`` hands the ended run to confidence
    bookkeeping and Reflexion.
    """
    try:
        loaded = await db_async(_load_run)(trace_id)
    except Trace.DoesNotExist:
        logger.warning("run.missing_trace", extra={"trace_id": trace_id})
        return None
    if loaded is None:
        return None
    trace, tools, steps = loaded
    config = config or runtime_config()
    if trace.agent.max_iterations:
        config = RuntimeConfig(**{**config.__dict__, "max_iterations": trace.agent.max_iterations})
    recorder = RunSink(
        trace_id=trace_id, next_step_number=(steps[-1].step_number + 1) if steps else 1
    )
    recorder.on_step = on_step
    recorder.telemetry = run_telemetry_start(
        trace_id=trace_id,
        agent=trace.agent.slug,
        provider=llm_backend or trace.llm_backend,
        model=trace.llm_model
        or (settings.LLM_MODEL if (llm_backend or trace.llm_backend) == "openai" else ""),
    )
    try:
        if policy is None:
            # The learning loop's resolver (agents.hooks): the version the run's bucket,
            # an open rollout or an A/B arm selects. The version it ran is recorded.
            policy = await db_async(policy_for_run)(trace)
        if policy.version != trace.policy_version:
            await db_async(trace_services.trace_set_policy)(
                trace_id=trace_id, version=policy.version
            )
        # The group commit's rollups then need not read the run's dimensions back.
        rollups_remember_trace(trace=trace, policy_version=policy.version)
        llm = llm_client_build(backend=llm_backend or trace.llm_backend)
        try:
            rules = await error_rules_aload()
            if await _uses_selfrag(trace.query):
                outcome = await selfrag_execute(
                    query=trace.query,
                    llm=llm,
                    sink=recorder,
                    rules=rules,
                    config=SelfRagConfig(fallback_reply=config.fallback_reply),
                    search=kb_asearch,
                    steps=steps,  # a redelivered run goes on from what it recorded
                )
            else:
                outcome = await _react(trace, tools, steps, recorder, llm, rules, config, policy)
        finally:
            await llm_close(llm)
    except RunConflict:
        logger.warning("run.conflict", extra={"trace_id": trace_id})
        if recorder.telemetry is not None:
            recorder.telemetry.end(error_type="RunConflict")
        return None
    except Exception as exc:
        logger.exception("run.crashed", extra={"trace_id": trace_id})
        if recorder.telemetry is not None:
            recorder.telemetry.end(error_type="UNKNOWN")
        await db_async(trace_services.trace_abort)(
            trace_id=trace_id, error_type="UNKNOWN", detail=f"{type(exc).__name__}: {exc}"
        )
        raise
    if recorder.telemetry is not None:
        recorder.telemetry.end(error_type=outcome.error_type)
    finished = await db_async(trace_services.trace_finish)(
        trace_id=trace_id,
        status=outcome.status,
        final_answer=outcome.final_answer,
        error_type=outcome.error_type,
        outcome=outcome.outcome,
        learn=reflect,  # marked as owed to the learning loop in the same UPDATE
    )
    if reflect:
        # A failed hand-off (the broker away) must not fail the ended run: it stays marked
        # and the learning loop's sweep retries it.
        for _, error in await db_async(run_ended.send_robust)(
            sender=Trace, trace_id=trace_id, trace=finished
        ):
            if isinstance(error, Exception):
                logger.warning(
                    "run.learning_deferred",
                    extra={"trace_id": trace_id, "error": f"{type(error).__name__}: {error}"},
                )
    return outcome


async def _uses_selfrag(query: str) -> bool:
    """Policy and FAQ questions are answered from the knowledge base with Self-RAG."""
    if intent_detect(query) != Intent.POLICY:
        return False
    return await db_async(KnowledgeArticle.objects.filter(is_published=True).exists)()


async def _react(
    trace: Trace,
    tools: dict[str, ToolSnapshot],
    steps: list[Step],
    recorder: RunSink,
    llm: Any,
    rules: Any,
    config: RuntimeConfig,
    policy: RuntimePolicy,
) -> RunOutcome:
    customer_facts: list[str] = []
    if trace.customer_id:
        # What earlier runs learned, then what this question says (for the runs after it).
        customer_facts = await db_async(customer_facts_for)(customer_id=trace.customer_id)
        await db_async(customer_facts_learn)(
            customer_id=trace.customer_id, text=trace.query, trace_id=str(trace.pk)
        )
    async with tool_http_client() as http_client:
        run = AgentRun(
            trace_id=str(trace.pk),
            query=trace.query,
            customer_id=trace.customer_id,
            customer_facts=customer_facts,
            llm=llm,
            executor=ToolExecutor(
                tools=tools,
                http_client=http_client,
                max_response_bytes=settings.TOOL_MAX_RESPONSE_BYTES,
                max_redirects=settings.TOOL_MAX_REDIRECTS,
            ),
            sink=recorder,
            rules=rules,
            config=config,
            policy=policy,
            recorded_steps=[step_to_record(step) for step in steps],
            style=answer_style(
                locale=trace.locale or settings.AGENT_ANSWER_LOCALE,
                time_zone=trace.time_zone or settings.AGENT_ANSWER_TIME_ZONE,
            ),
        )
        return await run.run()


def run_execute_blocking(*, trace_id: str, timeout: float | None = None) -> None:
    """Run on this process's shared event loop and wait (used by the Celery task)."""
    from agents.loop_runner import loop_runner

    future = loop_runner().submit(run_execute(trace_id=trace_id))
    try:
        future.result(timeout=timeout)
    except BaseException:
        # A task that gives up (time limit, worker shutdown) must not leave its run going.
        future.cancel()
        raise
