"""The Reflexion engine: failed trace -> analyzers or LLM reflexion -> quality gates ->
dedupe (ADD / AGREE / EDIT) -> replay -> a Strategy, or a recorded rejection.

It runs after a run ends (never in the middle of a tool call), debounced per error
signature, on the ``reflexion`` queue.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from pydantic import BaseModel, Field

from agents.llm.base import ChatMessage, LLMClient, LLMError, LLMResponse, llm_close
from agents.llm.factory import llm_client_build
from agents.models import Tool
from agents.parsing import model_json
from agents.policy_runtime import ERROR_HANDLER_ACTIONS, TRANSFORMS, WAIT_RETRY_MAX_WAIT_S
from agents.prompts import one_line
from agents.repairs import STEP_TYPES, repair_steps_json_schema
from policies.branches import KINDS, branch_errors, branch_signature, branch_slot
from policies.error_bodies import ErrorHints, ParsedError, error_body_parse
from policies.evidence import Target, chain_for, chains_for
from policies.hooks import review_records
from policies.models import Policy, ReflexionProposal, Strategy
from policies.selectors import strategies_citable
from policies.services import (
    CONFIDENCE_START,
    audit,
    failure_unrelated,
    strategy_activate,
    strategy_evidence_record,
    strategy_revive_for_review,
)
from policies.signals import (
    REVIEW_LOW_CONFIDENCE,
    REVIEW_NEGATIVE_FEEDBACK,
    review_requested,
    strategy_auto_merged,
    strategy_evidence_added,
)
from traces.models import ErrorType, Job, Trace
from traces.redaction import redact_text, redact_value
from traces.services import job_finish, job_progress, job_running

logger = logging.getLogger(__name__)

REFLEXION_HEADING = "# Reflexion analysis"
REPAIR_OPS = tuple(STEP_TYPES)
CONSTRAINTS = [
    "The whole run must finish within 3 s.",
    "At most 1 retry of any call.",
    "An INTERNAL_SERVER_ERROR degrades to cached data or a human, never to a retry.",
]
# Failures the runtime itself ends on; nothing a branch could fix inside a tool call.
NOT_LEARNABLE = frozenset({"LLM_ERROR", "RUN_TIME_LIMIT", "UNKNOWN", "TOOL_SUSPENDED"})
# How many failed attempts on one error signature before the loop stops and asks a human.
NEGATIVE_FEEDBACK_LIMIT = 2
# Failures that come from the upstream or the installation alone: a replay that met only
# these (after fixing what it targets) tested nothing, and its refutation is not counted.
# Not RESOURCE_NOT_FOUND (a wrong repair of an id makes one), nor the agent's own failures
# (a loop, a hallucinated answer): those refute.
UPSTREAM_ONLY = frozenset(
    {
        "SERVICE_UNAVAILABLE",
        "TIMEOUT",
        "CONNECTION_ERROR",
        "RATE_LIMITED",
        "INTERNAL_SERVER_ERROR",
        "TOOL_SUSPENDED",
    }
)
NOT_REPLAYED_EXTERNAL = (
    "not replayed: the run was ingested over OTLP and its agent runs outside Agent Ops; the "
    "analysis is recorded, no strategy is published from it"
)


class ReflexionOutput(BaseModel):
    """What the LLM reflexion must return."""

    root_cause: str = Field(max_length=200)
    strategy_update: str = Field(max_length=250)
    kind: str
    branch: dict[str, Any]
    cited_trace_ids: list[str] = Field(default_factory=list)
    cited_fields: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class FailureFacts:
    """One classified failed step and its run, as Reflexion sees them."""

    trace_id: str
    query: str
    agent_id: int
    step_number: int
    tool: str
    action_input: dict[str, Any]
    endpoint: str
    status_code: int | None
    error_type: str
    response_summary: str
    error_detail: str
    # The Retry-After the API sent with the failure, in seconds, when it sent one.
    retry_after_s: float | None = None
    # Ingested over OTLP: its agent runs elsewhere, so it is analysed but never replayed,
    # and it neither agrees with, nor counts against, what this installation learned.
    external: bool = False

    @property
    def signature(self) -> str:
        return f"{self.error_type}|{self.tool or '-'}"

    def field_values(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "query": self.query,
            "tool": self.tool,
            "action_input": self.action_input,
            "endpoint": self.endpoint,
            "status_code": self.status_code,
            "error_type": self.error_type,
            "response_summary": self.response_summary,
            "error_detail": self.error_detail,
            **{f"action_input.{k}": v for k, v in self.action_input.items()},
        }


@dataclass
class Proposal:
    kind: str
    branch: dict[str, Any]
    root_cause: str
    strategy_update: str
    origin: str
    cited_trace_ids: list[str] = field(default_factory=list)
    cited_fields: list[str] = field(default_factory=list)

    def as_payload(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "branch": self.branch,
            "root_cause": self.root_cause,
            "strategy_update": self.strategy_update,
            "cited_trace_ids": self.cited_trace_ids,
            "cited_fields": self.cited_fields,
        }


def failures_of_trace(trace: Trace) -> list[FailureFacts]:
    """Classified failed steps, first occurrence per error signature."""
    seen: set[str] = set()
    facts = []
    for step in trace.steps.filter(ok=False).exclude(error_type="").order_by("step_number"):
        fact = FailureFacts(
            trace_id=str(trace.pk),
            query=trace.query,
            agent_id=trace.agent_id,
            step_number=step.step_number,
            tool=step.tool_name,
            action_input=step.action_input or {},
            endpoint=step.endpoint,
            status_code=step.status_code,
            error_type=step.error_type,
            response_summary=step.response_summary or "",
            error_detail=step.error_detail or "",
            retry_after_s=_retry_after(step),
            external=trace.origin == Trace.Origin.EXTERNAL,
        )
        if fact.error_type in NOT_LEARNABLE or fact.signature in seen:
            continue
        seen.add(fact.signature)
        facts.append(fact)
    return facts


def _retry_after(step: Any) -> float | None:
    """The wait the API asked for: the recorded Retry-After header, else one its body states
    (``retry_after``, "retry after 2 s")."""
    recorded = (step.details or {}).get("retry_after_s")
    if isinstance(recorded, int | float) and not isinstance(recorded, bool):
        return float(recorded)
    if step.status_code not in (429, 503):
        return None
    parsed = error_body_parse(step.status_code, {}, step.response_summary or "")
    if parsed.retry_after is not None:
        return parsed.retry_after
    match = re.search(
        r"\b(?:retry|try again)\s+(?:after|in)\s+(\d{1,4}(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b",
        step.response_summary or "",
        re.IGNORECASE,
    )
    return float(match.group(1)) if match else None


# --- deterministic analyzers ---------------------------------------------------------
# Failures on the upstream's side that a cached result can stand in for.
UPSTREAM_FAILURES = ("TIMEOUT", "INTERNAL_SERVER_ERROR", "SERVICE_UNAVAILABLE", "CONNECTION_ERROR")


def _body_json(facts: FailureFacts) -> dict[str, Any]:
    for text in (facts.response_summary, facts.error_detail):
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def analyze_type_mismatch(facts: FailureFacts) -> Proposal | None:
    """A 400 naming an integer field -> an adapter converting that argument."""
    if facts.error_type != "TYPE_MISMATCH" or facts.status_code != 400 or not facts.tool:
        return None
    body = _body_json(facts)
    name = body.get("field")
    if body.get("expected_type") != "integer" or name not in facts.action_input:
        return None
    return Proposal(
        kind="adapter",
        branch={"tool": facts.tool, "field": name, "transform": "digits_to_int"},
        root_cause=f"{facts.tool} now requires integer {name}",
        strategy_update=f"Convert {name} to its integer digits before calling {facts.tool}",
        origin="analyzer:type_mismatch",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["status_code", "response_summary", f"action_input.{name}"],
    )


def analyze_missing_field(facts: FailureFacts) -> Proposal | None:
    """A missing required field -> a validation rule requiring it before the call."""
    if facts.error_type != "MISSING_REQUIRED_FIELD" or not facts.tool:
        return None
    name = _body_json(facts).get("field")
    if not name:
        match = re.search(r"'([A-Za-z_][\w]*)' is a required property", facts.error_detail)
        name = match.group(1) if match else None
    if not name:
        return None
    return Proposal(
        kind="validation_rule",
        branch={"tool": facts.tool, "schema": {"required": [name]}},
        root_cause=f"{facts.tool} called without required {name}",
        strategy_update=f"Validate that {name} is present before calling {facts.tool}",
        origin="analyzer:missing_field",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["error_type", "error_detail"],
    )


def _lookup_tool_for(arg: str, agent_id: int) -> str | None:
    """A search tool whose description says it returns this kind of id."""
    for tool in Tool.objects.filter(enabled=True, allowed_agents__id=agent_id):
        props = (tool.params_schema or {}).get("properties", {})
        if "query" in props and re.search(rf"\b{arg}s?\b", tool.description, re.I):
            return tool.name
    return None


def analyze_name_for_id(facts: FailureFacts) -> Proposal | None:
    """404 on a value that looks like a name where an id is expected -> a lookup first."""
    if facts.error_type != "RESOURCE_NOT_FOUND" or not facts.tool:
        return None
    tool = Tool.objects.filter(name=facts.tool).first()
    props = ((tool.params_schema if tool else {}) or {}).get("properties", {})
    for arg, value in facts.action_input.items():
        pattern = props.get(arg, {}).get("pattern")
        if not pattern or not isinstance(value, str) or re.fullmatch(pattern, value):
            continue
        if " " not in value.strip() and not re.search(r"[a-z]", value):
            continue  # a malformed id, not a name
        lookup = _lookup_tool_for(arg, facts.agent_id)
        if lookup is None:
            continue
        return Proposal(
            kind="pre_condition",
            branch={
                "tool": facts.tool,
                "arg": arg,
                "not_pattern": pattern,
                "call": lookup,
                "input": {"query": "$arg"},
                "take": f"results.0.{arg}s.0.{arg}",
                "assign": arg,
            },
            root_cause=f"{arg} given as a name, not an id",
            strategy_update=f"Look up the {arg} with {lookup} before calling {facts.tool}",
            origin="analyzer:name_for_id",
            cited_trace_ids=[facts.trace_id],
            cited_fields=[f"action_input.{arg}", "status_code"],
        )
    return None


_SCHEMA_ISSUE = re.compile(r"validator=(\w+) path=([A-Za-z_][\w\-]{0,63})\b")
# Recent API errors of a tool read for what the API wants now.
MAX_API_ERROR_STEPS = 20
# How much of a value value_pattern reads.
MAX_PATTERN_SOURCE = 200


def value_pattern(value: str) -> str:
    """An anchored regex of a value's shape: ``1234567`` -> ``^\\d{7}$``, ``ord-12`` ->
    ``^[a-z]+\\-\\d{2}$``. Only the first MAX_PATTERN_SOURCE characters are read (the
    value is model output, unbounded); past them the pattern leaves the end open, so that
    the value it was read from still matches it."""
    head = value[:MAX_PATTERN_SOURCE]
    parts: list[str] = []
    for run in re.findall(r"\d+|[a-z]+|[A-Z]+|[^A-Za-z0-9]", head):
        if run.isdigit():
            parts.append(rf"\d{{{len(run)}}}")
        elif run.islower():
            parts.append("[a-z]+")
        elif run.isupper():
            parts.append("[A-Z]+")
        else:
            parts.append(re.escape(run))
    return "^" + "".join(parts) + ("$" if len(value) <= MAX_PATTERN_SOURCE else "")


def _api_hints(facts: FailureFacts, argument: str) -> list[ErrorHints]:
    """What the tool's recent API errors (other calls that reached the API) said about
    ``argument`` (by its wire name too) or about the request as a whole."""
    from traces.models import Step

    tool = Tool.objects.filter(name=facts.tool).only("query_map").first()
    wire = str(((tool.query_map if tool else None) or {}).get(argument, argument))
    rows = (
        Step.objects.filter(
            tool_name=facts.tool, ok=False, phase="action", status_code__in=CLIENT_ERRORS
        )
        .order_by("-pk")
        .values_list("status_code", "response_summary")[:MAX_API_ERROR_STEPS]
    )
    found = []
    for status, body in rows:
        parsed = error_body_parse(status, {}, body or "")
        hints = parsed.hints_for(argument).merged(parsed.hints_for(wire))
        hints = hints.merged(parsed.hints_for(None))
        if not hints.is_empty():
            found.append(hints)
    return found


def analyze_stale_schema(facts: FailureFacts) -> Proposal | None:
    """The tool's own JSON Schema refused a value (before any API call) that the API, by
    its recent error messages, now wants — and that is the same identifier in another form
    (a chain of the vocabulary turns it into a value the old schema accepts, as the
    accepted calls show). The schema is stale: amend that property to accept the new form
    as well as the old, as a versioned amendment in the policy."""
    if facts.status_code is not None or not facts.tool or not facts.action_input:
        return None
    issues = _SCHEMA_ISSUE.findall(facts.error_detail or facts.response_summary)
    tool = Tool.objects.filter(name=facts.tool).only("params_schema").first()
    properties = ((tool.params_schema if tool else {}) or {}).get("properties", {}) or {}
    examples = _accepted_examples(facts)
    for validator, name in issues:
        value, own = facts.action_input.get(name), properties.get(name)
        if not isinstance(value, str) or not isinstance(own, dict) or validator == "required":
            continue
        wanted = [h for h in _api_hints(facts, name) if Target.build(value, h, []).fits(value)]
        if not wanted:
            continue
        # Same identifier, other form: the old schema accepts some repair of the value.
        old_form = Target.build(
            value, ErrorHints(expected_pattern=own.get("pattern")), examples.get(name, [])
        )
        if own.get("pattern") and chain_for(value, old_form) is None:
            continue
        pattern = next((h.expected_pattern for h in wanted if h.expected_pattern), None)
        new_rule = {"type": "string", "pattern": pattern or value_pattern(value)}
        versions = [
            int(s.branch.get("version", 1))
            for s in Strategy.objects.filter(kind="validation_rule", tool_name=facts.tool)
            if isinstance(s.branch, dict) and "amend" in s.branch
        ]
        return Proposal(
            kind="validation_rule",
            branch={
                "tool": facts.tool,
                "amend": {name: {"anyOf": [own, new_rule]}},
                "version": max(versions, default=0) + 1,
            },
            root_cause=f"{facts.tool}'s schema refuses the {name} form its API now wants",
            strategy_update=f"Amend {facts.tool}'s schema to accept {name} in the API's new form",
            origin="analyzer:stale_schema",
            cited_trace_ids=[facts.trace_id],
            cited_fields=["error_detail", f"action_input.{name}"],
        )
    return None


# Statuses with which an API asks the client to come back later.
RETRY_LATER = ("RATE_LIMITED", "SERVICE_UNAVAILABLE")


def analyze_retry_after(facts: FailureFacts) -> Proposal | None:
    """A 429 or 503 that says how long to wait (Retry-After) -> wait that long and call
    again, within a cap and the run's time budget. Without a stated wait there is no
    evidence that waiting helps; the replay (paired, for random faults) has the last word."""
    if facts.error_type not in RETRY_LATER or not facts.tool or facts.retry_after_s is None:
        return None
    wait = facts.retry_after_s
    if wait > WAIT_RETRY_MAX_WAIT_S:
        return None  # longer than any run may wait: degrading or handing over is better
    cap = min(WAIT_RETRY_MAX_WAIT_S, max(2.0, 2 * wait))
    status = "429" if facts.error_type == "RATE_LIMITED" else "503"
    return Proposal(
        kind="error_handler",
        branch={
            "tool": facts.tool,
            "on": facts.error_type,
            "action": "wait_retry",
            "max_retries": 1,  # the business constraints allow one retry
            "max_wait_s": cap,
        },
        root_cause=f"{facts.tool} answered {status} asking to retry after {wait:g} s",
        strategy_update=f"Call {facts.tool} again once, after the wait its Retry-After asks for",
        origin="analyzer:retry_after",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["error_type", "tool", "status_code"],
    )


def analyze_upstream_failure(facts: FailureFacts) -> Proposal | None:
    """TIMEOUT / INTERNAL_SERVER_ERROR / SERVICE_UNAVAILABLE / CONNECTION_ERROR (a reset, a
    hang-up mid-body) -> degrade to cached data (or a human)."""
    if facts.error_type not in UPSTREAM_FAILURES or not facts.tool:
        return None
    return Proposal(
        kind="error_handler",
        branch={"tool": facts.tool, "on": facts.error_type, "action": "degrade_cache"},
        root_cause=f"{facts.tool} upstream {facts.error_type.lower().replace('_', ' ')}",
        strategy_update="Serve cached data or hand over to a human instead of retrying",
        origin="analyzer:upstream_failure",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["error_type", "tool"],
    )


# HTTP statuses whose body says what was wrong with the request.
CLIENT_ERRORS = frozenset({400, 404, 409, 422})
MAX_EXAMPLE_STEPS = 50


def _accepted_examples(facts: FailureFacts) -> dict[str, list[Any]]:
    """Argument values the tool accepted in its recent successful calls (other runs)."""
    from traces.models import Step

    rows = (
        Step.objects.filter(tool_name=facts.tool, ok=True, phase="action", action_type="tool")
        .exclude(trace_id=facts.trace_id)
        .order_by("-pk")
        .values_list("action_input", flat=True)[:MAX_EXAMPLE_STEPS]
    )
    examples: dict[str, list[Any]] = {}
    for arguments in rows:
        for name, value in (arguments or {}).items():
            examples.setdefault(name, []).append(value)
    return examples


def _key_path(data: Any, key: str, depth: int = 0) -> str | None:
    """The dotted path of the first scalar ``key`` in a JSON value (breadth first)."""
    if depth > 4:
        return None
    if isinstance(data, dict):
        if key in data and not isinstance(data[key], dict | list):
            return key
        children: list[tuple[str, Any]] = list(data.items())
    elif isinstance(data, list):
        children = [(str(i), item) for i, item in enumerate(data[:5])]
    else:
        return None
    for name, child in children:
        found = _key_path(child, key, depth + 1)
        if found:
            return f"{name}.{found}"
    return None


def _missing_value_source(facts: FailureFacts, name: str) -> dict[str, Any] | None:
    """Where a newly required argument's value can come from: the customer id, or a key
    of an earlier successful result of the same run."""
    from traces.models import Step

    trace = Trace.objects.filter(pk=facts.trace_id).only("customer_id").first()
    if "customer" in name.lower() and trace is not None and trace.customer_id:
        return {"from": "customer"}
    earlier = Step.objects.filter(
        trace_id=facts.trace_id, step_number__lt=facts.step_number, ok=True, action_type="tool"
    ).order_by("-step_number")
    for step in earlier.only("tool_name", "response_summary"):
        try:
            data = json.loads(step.response_summary)
        except (TypeError, ValueError):
            continue
        path = _key_path(data, name)
        if path:
            return {"from": "fact", "tool": step.tool_name, "path": path}
    return None


def _evidence_proposal(
    facts: FailureFacts, branch: dict[str, Any], root_cause: str, update: str, cited: str
) -> Proposal:
    return Proposal(
        kind="adapter",
        branch={"tool": facts.tool, **branch},
        root_cause=root_cause,
        strategy_update=update,
        origin="analyzer:evidence",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["status_code", "response_summary", *([cited] if cited else [])],
    )


_SOURCE_WORDS = {"customer": "customer id", "fact": "run's key facts", "value": "API's one value"}


def _argument_named(field: str, arguments: dict[str, Any]) -> str:
    """The argument an error's field names: itself, else the one it spells another way
    (``orderId``, ``OrderId`` or ``order-id`` for ``order_id``)."""
    if field in arguments:
        return field
    key = re.sub(r"[^0-9a-z]", "", field.lower())
    return next(
        (name for name in arguments if re.sub(r"[^0-9a-z]", "", name.lower()) == key), field
    )


def _arguments_by_wire(query_map: dict[str, Any], names: Iterable[str]) -> dict[str, str]:
    """Each of ``names`` (the tool's arguments) keyed by the name it goes by on the wire."""
    return {str(query_map.get(name, name)): name for name in names}


def _argument_move(
    facts: FailureFacts,
    parsed: ParsedError,
    properties: dict[str, Any],
    path_args: set[str],
    query_map: dict[str, Any],
) -> Proposal | None:
    """A parameter the API now names differently (rename), or a new required one whose
    value the run has (add)."""
    sent = facts.action_input
    # The API names parameters as they go on the wire (query_map): a name the tool already
    # declares or sends, by either spelling, is no new name.
    known = {*sent, *properties}
    known |= {str(query_map.get(name, name)) for name in known}
    by_wire = _arguments_by_wire(query_map, sent) | {n: n for n in sent}
    for item in parsed.items:
        hints = item.hints
        unknown = by_wire.get(hints.unknown_name) if hints.unknown_name else None
        wanted = hints.suggested_name
        if wanted is None and hints.required and item.field and item.field not in sent:
            wanted = item.field
        if not wanted or wanted in known:
            continue
        if unknown is None and not hints.allowed_values:
            # Which argument did the API rename? Only an unambiguous one — and not when the
            # API lists the values it accepts for the new name: that is a new parameter.
            loose = [n for n in sent if n not in path_args and n != wanted]
            named = [n for n in loose if not any(i.field == n for i in parsed.items)]
            unknown = named[0] if len(named) == 1 else None
        if unknown is not None:
            step: dict[str, Any] = {"op": "rename", "from": unknown, "to": wanted}
            if item.location in ("query", "body", "path"):
                step["in"] = item.location
            return _evidence_proposal(
                facts,
                {"steps": [step]},
                f"{facts.tool} now calls argument {unknown} {wanted}",
                f"Send {unknown} as {wanted} when calling {facts.tool}",
                f"action_input.{unknown}",
            )
        source = _missing_value_source(facts, wanted)
        if source is None and len(hints.allowed_values) == 1:
            # The API names the one value it accepts: a constant, as an engineer would send.
            source = {"from": "value", "value": hints.allowed_values[0]}
        if source is not None:
            add = {"op": "add", "name": wanted, **source}
            if item.location in ("query", "body"):
                add["in"] = item.location
            return _evidence_proposal(
                facts,
                {"steps": [add]},
                f"{facts.tool} now requires {wanted}, which the run already knows",
                f"Add {wanted} from the {_SOURCE_WORDS[source['from']]} when calling {facts.tool}",
                "",
            )
    return None


def analyze_from_evidence(facts: FailureFacts) -> Proposal | None:
    """A client error whose body, read in any common layout, says what the API wants
    (a case, a format, a prefix, a new name, a new required argument), or whose refused
    value differs in shape from what the tool accepted in its recent successful calls ->
    the simplest repair chain of the vocabulary that satisfies that evidence.

    The sandbox's own integer layout stays with ``analyze_type_mismatch``, a name sent
    where an id belongs with ``analyze_name_for_id``. ``evidence_candidates`` gives the
    other repairs the same evidence supports, for when the replay refutes this one."""
    return next(evidence_candidates(facts), None)


# How many repairs the same evidence may put to the replay, simplest first.
MAX_EVIDENCE_CANDIDATES = 3


def evidence_candidates(facts: FailureFacts) -> Iterator[Proposal]:
    """Every repair the evidence supports (at most MAX_EVIDENCE_CANDIDATES), simplest
    first; see ``analyze_from_evidence``."""
    if not facts.tool or facts.status_code not in CLIENT_ERRORS or not facts.action_input:
        return
    if analyze_type_mismatch(facts) is not None:
        return
    if facts.status_code == 404 and analyze_name_for_id(facts) is not None:
        return  # a name where an id belongs: a lookup, not a rewrite
    text = facts.response_summary or facts.error_detail
    parsed = error_body_parse(facts.status_code, {}, text)
    tool = (
        Tool.objects.filter(name=facts.tool)
        .only("params_schema", "endpoint_template", "query_map")
        .first()
    )
    properties = ((tool.params_schema if tool else {}) or {}).get("properties", {}) or {}
    path_args = set(re.findall(r"{(\w+)}", tool.endpoint_template if tool else ""))
    query_map = (tool.query_map if tool else None) or {}
    move = _argument_move(facts, parsed, properties, path_args, query_map)
    if move is not None:
        yield move
        return
    examples = _accepted_examples(facts)
    # The API names parameters as they go on the wire: map them back to the arguments.
    wire = _arguments_by_wire(query_map, query_map)
    argument_of = {
        field: _argument_named(wire.get(field, field), facts.action_input)
        for field in parsed.fields
    }
    named = list(
        dict.fromkeys(argument_of[f] for f in parsed.fields if argument_of[f] in facts.action_input)
    )
    general = parsed.hints_for(None)
    suspects = named or [
        name
        for name, value in facts.action_input.items()
        if Target.build(value, general, examples.get(name, [])).has_evidence()
    ]
    offered = 0
    for name in suspects:
        value = facts.action_input[name]
        hints = general
        if name in named:
            hints = ErrorHints()
            for field, argument in argument_of.items():
                if argument == name:
                    hints = hints.merged(parsed.hints_for(field))
        found = list(chains_for(value, Target.build(value, hints, examples.get(name, []))))
        if not hints.is_empty():
            # Accepted examples can be stale (a contract that has moved on again): repairs
            # that satisfy what the API says now come next, for the replay to try.
            found += [
                chain
                for chain in chains_for(value, Target.build(value, hints, []))
                if chain not in found
            ]
        for transform, steps in found:
            branch: dict[str, Any] = {"field": name}
            if transform:
                branch["transform"] = transform
            else:
                branch["steps"] = steps
            ops = ", ".join(step["op"].replace("_", " ") for step in steps)
            yield _evidence_proposal(
                facts,
                branch,
                f"{facts.tool} refuses {name} in the form it was sent",
                f"Rewrite {name} ({ops}) before calling {facts.tool}",
                f"action_input.{name}",
            )
            offered += 1
            if offered >= MAX_EVIDENCE_CANDIDATES:
                return


# The reasoning guards' failures (agents.reasoning_guards): the model's own habit, so the
# fix is a prompt hint for every run, not a branch on a tool.
_GUARD_HINTS = {
    "UNGROUNDED_THOUGHT": (
        "In your thought, state only ids, dates, amounts and statuses that the user request "
        "or an observation shows; call a tool or ask the customer for anything else.",
        "Remind the model to state only facts from the request or observations in thoughts",
    ),
    "FAKE_REFLECTION": (
        "After a failed call, set expectation_met to false, name the cause the observation "
        "shows (its status, error type or field) and change the next move.",
        "Remind the model to admit failed calls and cite the observation's cause",
    ),
}
_STATED = re.compile(r"\b(?:states|says) (['\"])(?P<fact>.{1,60}?)\1")


def analyze_reasoning_guard(facts: FailureFacts) -> Proposal | None:
    """A thought the think validator rejected, or a fake reflection -> a prompt hint that
    names the rule the model broke (the guard's correction is the evidence)."""
    if facts.error_type not in _GUARD_HINTS:
        return None
    text, update = _GUARD_HINTS[facts.error_type]
    if facts.error_type == "UNGROUNDED_THOUGHT":
        stated = _STATED.search(facts.error_detail)
        fact = f" {stated.group('fact')[:30]!r}" if stated else ""
        root_cause = f"thought stated{fact}, which nothing shown to the model held"
    else:
        root_cause = "reflection on a failed call claimed success or named no concrete cause"
    return Proposal(
        kind="prompt_hint",
        branch={"text": text, "error_type": facts.error_type},
        root_cause=root_cause,
        strategy_update=update,
        origin="analyzer:reasoning_guard",
        cited_trace_ids=[facts.trace_id],
        cited_fields=["error_type", "error_detail"],
    )


ANALYZERS = (
    analyze_stale_schema,
    analyze_from_evidence,
    analyze_type_mismatch,
    analyze_missing_field,
    analyze_name_for_id,
    analyze_retry_after,
    analyze_upstream_failure,
    analyze_reasoning_guard,
)


# --- LLM reflexion ------------------------------------------------------------------
def reflexion_messages(facts: FailureFacts, history: list[Strategy]) -> list[ChatMessage]:
    # Every value on one line: the query, the response and past analyses are text this
    # prompt did not write, and a line of theirs must not pass for a field or a section.
    past = [
        f"{i}. trace_id: {next((str(t.pk) for t in s.source_traces.all()), '-')}, "
        f"tool: {one_line(s.tool_name or '-')}, error_type: {s.error_type}, "
        f"root_cause: {one_line(s.root_cause)}, "
        f"strategy: {one_line(s.strategy_update)} (confidence {s.confidence:.2f})"
        for i, s in enumerate(history, 1)
    ]
    text = "\n\n".join(
        [
            REFLEXION_HEADING,
            "## Failed trace\n"
            + "\n".join(
                [
                    f"- trace_id: {facts.trace_id}",
                    f"- user query: {one_line(facts.query)}",
                    f"- step: {facts.step_number}",
                    f"- tool: {one_line(facts.tool or '-')}",
                    f"- action_input: {json.dumps(facts.action_input, ensure_ascii=False)}",
                    f"- endpoint: {one_line(facts.endpoint or '-')}",
                    f"- status_code: {facts.status_code if facts.status_code is not None else '-'}",
                    f"- error_type: {facts.error_type}",
                    "- response summary: "
                    + one_line((facts.response_summary or facts.error_detail)[:600]),
                ]
            ),
            "## Similar past failures\n" + ("\n".join(past) if past else "- (none)"),
            "## Business constraints\n" + "\n".join(f"- {c}" for c in CONSTRAINTS),
            "## Branch kinds\n"
            '- prompt_hint: {"text": str, "error_type": str}\n'
            '- validation_rule: {"tool": str, "schema": JSON Schema fragment} (an extra check), '
            'or {"tool", "amend": {param: its new JSON Schema}, "version": int} (the tool\'s '
            "schema is stale: the API now wants another form)\n"
            '- pre_condition: {"tool", "arg", "not_pattern", "call", "input", "take", '
            '"assign"}\n'
            '- error_handler: {"tool", "on": error_type, "action": retry_once|wait_retry|'
            'degrade_cache|handover|call_tool}; wait_retry waits the Retry-After ("max_wait_s" '
            "caps it) and calls again once\n"
            '- adapter: {"tool", "field", "transform": digits_to_int|strip|upper|lower|'
            'numeric_string_to_int} and/or "steps": a list of repair steps, each {"op": ...}: '
            + ", ".join(REPAIR_OPS)
            + ' (e.g. [{"op": "strip_prefix", "value": "#W"}, {"op": "rename", "from": "q", '
            '"to": "query"}])',
            "## Instructions\nAs a senior SRE, name the concrete field of this trace that caused "
            "the failure (5W1H), and one machine-applicable branch. Cite only fields and trace "
            "ids shown above. root_cause has at most 15 words, strategy_update at most 20. "
            "Reply with ONE JSON object and nothing else, shaped like this example (its "
            "values are an example, not the answer):\n" + _reflexion_example(facts),
        ]
    )
    return [
        ChatMessage(role="system", content="You turn failed agent traces into strategy updates."),
        ChatMessage(role="user", content=text),
    ]


def reflexion_json_schema(tool_names: list[str]) -> dict[str, Any]:
    """ReflexionOutput for constrained decoding: ``kind`` an enum, ``branch`` a union of the
    branch shapes (a schema amendment and wait_retry's bounds included) with their tools,
    error types, actions and transforms as enums. No length bounds: the word limits are
    quality gates, checked after parsing."""
    tool = {"type": "string", "enum": tool_names} if tool_names else {"type": "string"}
    error_type = {"type": "string", "enum": [choice.value for choice in ErrorType]}

    def shape(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    text = {"type": "string"}
    branches = [
        shape({"text": text, "error_type": error_type}, ["text"]),
        shape({"tool": tool, "schema": {"type": "object"}}, ["tool", "schema"]),
        # A versioned amendment of the tool's own schema (property name -> new schema).
        shape(
            {
                "tool": tool,
                "amend": {"type": "object", "additionalProperties": {"type": "object"}},
                "version": {"type": "integer", "minimum": 1},
            },
            ["tool", "amend"],
        ),
        shape(
            {
                "tool": tool,
                "arg": text,
                "not_pattern": text,
                "call": tool,
                "input": {"type": "object"},
                "take": text,
                "assign": text,
            },
            ["tool", "arg", "not_pattern", "call", "input", "take", "assign"],
        ),
        shape(
            {
                "tool": tool,
                "on": error_type,
                "action": {"type": "string", "enum": list(ERROR_HANDLER_ACTIONS)},
                "call": tool,
                "input": {"type": "object"},
                "transform": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "enum": list(TRANSFORMS)},
                },
                "max_retries": {"type": "integer", "minimum": 1, "maximum": 1},
                "max_wait_s": {"type": "number", "minimum": 0, "maximum": WAIT_RETRY_MAX_WAIT_S},
            },
            ["tool", "on", "action"],
        ),
        shape(
            {
                "tool": tool,
                "field": text,
                "transform": {"type": "string", "enum": list(TRANSFORMS)},
                "steps": repair_steps_json_schema(),
            },
            ["tool"],
        ),
    ]
    return {
        "type": "object",
        "properties": {
            "root_cause": text,
            "strategy_update": text,
            "kind": {"type": "string", "enum": list(KINDS)},
            "branch": {"anyOf": branches},
            "cited_trace_ids": {"type": "array", "items": text},
            "cited_fields": {"type": "array", "items": text},
        },
        "required": ["root_cause", "strategy_update", "kind", "branch"],
    }


def _reflexion_example(facts: FailureFacts) -> str:
    """A concrete reply for this failure's tool and error type (a prompt hint)."""
    tool = facts.tool or "get_order"
    example = {
        "root_cause": f"{tool} failed with {facts.error_type} on the arguments it was sent",
        "strategy_update": f"Check {tool}'s params schema before calling it",
        "kind": "prompt_hint",
        "branch": {
            "text": f"Send {tool} exactly the argument formats its params schema gives",
            "error_type": facts.error_type,
        },
        "cited_trace_ids": [facts.trace_id],
        "cited_fields": ["tool", "error_type"],
    }
    return json.dumps(example)


async def _complete_once(client: LLMClient, **request: Any) -> LLMResponse:
    """One call on a loop of its own (``async_to_sync``): what the client keeps open is
    closed before that loop ends."""
    try:
        return await client.complete(**request)
    finally:
        await llm_close(client)


def llm_reflexion(facts: FailureFacts) -> tuple[Proposal | None, str]:
    history = list(strategies_citable(error_type=facts.error_type))
    client = llm_client_build()
    tool_names = sorted(Tool.objects.values_list("name", flat=True))
    try:
        response = async_to_sync(_complete_once)(
            client,
            messages=reflexion_messages(facts, history),
            schema=ReflexionOutput,
            purpose="reflexion",
            json_schema=reflexion_json_schema(tool_names),
        )
    except LLMError as exc:
        return None, f"LLM reflexion failed: {redact_text(str(exc))}"
    text = response.text.strip().removeprefix("```json").removesuffix("```").strip()
    try:
        # strict=False: a grammar lets a raw newline into a string.
        output = ReflexionOutput.model_validate(model_json(text))
    except ValueError as exc:
        # pydantic quotes the offending input, which is model output like the rest.
        return None, f"unparseable reflexion output: {redact_text(str(exc))[:300]}"
    # Model output is untrusted: it may echo a secret from a response body or invent a
    # card number. Redacted here, nothing derived from it (proposal, strategy, policy
    # document, review item) can carry one.
    return (
        Proposal(
            kind=output.kind,
            branch=redact_value(output.branch),
            root_cause=redact_text(output.root_cause),
            strategy_update=redact_text(output.strategy_update),
            origin=f"llm:{response.backend}",
            cited_trace_ids=output.cited_trace_ids,
            cited_fields=output.cited_fields,
        ),
        "",
    )


# --- quality gates ------------------------------------------------------------------
def _words(text: str) -> int:
    return len(text.split())


def gate_facts_anchored(proposal: Proposal, facts: FailureFacts) -> str:
    values = facts.field_values()
    missing = [name for name in proposal.cited_fields if name not in values]
    if missing:
        return f"cites fields not in the trace: {', '.join(missing)}"
    text = f"{proposal.root_cause} {proposal.strategy_update} {json.dumps(proposal.branch)}"
    anchors = [facts.tool, facts.error_type, *map(str, facts.action_input)]
    if facts.status_code is not None:
        anchors.append(str(facts.status_code))
    anchored = [a for a in anchors if a and a.lower() in text.lower()]
    if not anchored and not proposal.cited_fields:
        return "names nothing from the trace (tool, error type, argument or status)"
    return ""


def gate_actionable(proposal: Proposal) -> str:
    if proposal.kind not in KINDS:
        return f"unknown kind {proposal.kind!r}"
    errors = branch_errors(proposal.kind, proposal.branch)
    if errors:
        return "does not compile: " + "; ".join(errors)
    tools = [proposal.branch.get("tool"), proposal.branch.get("call")]
    unknown = [t for t in tools if t and not Tool.objects.filter(name=t).exists()]
    if unknown:
        return f"names unknown tools: {', '.join(unknown)}"
    if _words(proposal.root_cause) > 15 or _words(proposal.strategy_update) > 20:
        return "root_cause must be <= 15 words and strategy_update <= 20 words"
    return ""


def gate_constraints(proposal: Proposal, facts: FailureFacts) -> str:
    branch = proposal.branch
    if proposal.kind == "error_handler":
        if branch.get("on") == "INTERNAL_SERVER_ERROR" and branch.get("action") not in (
            "degrade_cache",
            "handover",
        ):
            return "a 500 must degrade to cache or a human, not retry"
        if int(branch.get("max_retries", 1)) > 1:
            return "more than 1 retry"
    text = f"{proposal.strategy_update} {branch.get('text', '')}".lower()
    if re.search(r"\b(retry|try again)\b.*\b([2-9]|\d{2,}|twice|three|until|repeatedly)\b", text):
        return "a retry storm: at most 1 retry"
    return ""


def gate_history_real(proposal: Proposal) -> str:
    cited = [t for t in proposal.cited_trace_ids if t]
    valid = []
    for trace_id in cited:
        try:
            valid.append(Trace.objects.filter(pk=trace_id).exists())
        except (ValueError, Exception):  # not a UUID at all
            valid.append(False)
    if not all(valid):
        return "cites trace ids that do not exist"
    return ""


def quality_gates(proposal: Proposal, facts: FailureFacts) -> dict[str, str]:
    """Each gate's failure reason ('' = passed)."""
    return {
        "facts_anchored": gate_facts_anchored(proposal, facts),
        "actionable": gate_actionable(proposal),
        "constraints": gate_constraints(proposal, facts),
        "history_real": gate_history_real(proposal),
    }


# --- negative-feedback guard --------------------------------------------------------
def negative_feedback_stop(facts: FailureFacts) -> str:
    """Stop building on a signature whose strategies keep failing (seeds/000 §4.4)."""
    hold = review_records().signature_hold(facts.signature)
    if hold.held:
        return "an open review already holds this error signature"
    # A person who closed an earlier stop for this signature resets the count.
    since = hold.decided_at
    proposals = ReflexionProposal.objects.filter(
        error_signature=facts.signature,
        outcome=ReflexionProposal.Outcome.REJECTED,
        reason__startswith="replay failed",
    ).exclude(trace__origin=Trace.Origin.EXTERNAL)  # never replayed here: no evidence
    deprecated = Strategy.objects.filter(
        error_type=facts.error_type, tool_name=facts.tool, status=Strategy.Status.DEPRECATED
    )
    if since is not None:
        proposals = proposals.filter(created_at__gt=since)
        deprecated = deprecated.filter(updated_at__gt=since)
    refuted, retired = proposals.count(), deprecated.count()
    failed = refuted + retired
    if failed >= NEGATIVE_FEEDBACK_LIMIT:
        parts = [
            f"{count} {what}"
            for count, what in (
                (
                    refuted,
                    "proposals failed their replay"
                    if refuted != 1
                    else "proposal failed its replay",
                ),
                (retired, "strateg" + ("ies were" if retired != 1 else "y was") + " deprecated"),
            )
            if count
        ]
        review_requested.send(
            sender=Strategy,
            error_signature=facts.signature,
            reason=REVIEW_NEGATIVE_FEEDBACK,
            detail=(
                f"For {facts.signature}, {' and '.join(parts)}; automation stopped for this "
                "signature until a person decides."
            ),
        )
        audit(action="reflexion.stop", target=facts.signature, details={"failed": failed})
        return f"{failed} earlier strategies for {facts.signature} failed; sent to review"
    return ""


# --- the engine -----------------------------------------------------------------------
def _record(
    facts: FailureFacts,
    proposal: Proposal | None,
    outcome: str,
    reason: str = "",
    gates: dict[str, str] | None = None,
    strategy: Strategy | None = None,
) -> ReflexionProposal:
    return ReflexionProposal.objects.create(
        trace_id=facts.trace_id,
        step_number=facts.step_number,
        error_type=facts.error_type,
        error_signature=facts.signature,
        origin=proposal.origin if proposal else "none",
        payload=redact_value(proposal.as_payload()) if proposal else {},
        outcome=outcome,
        # Gate and replay reasons quote the proposal and the replayed responses.
        reason=redact_text(reason),
        gate_results=redact_value(gates or {}),  # the gates quote the model's own words
        strategy=strategy,
    )


def strategy_auto_mergeable(strategy: Strategy) -> bool:
    """Auto-merge (seeds/000 §6.1): on, the replay passed, and the confidence is at least
    ``REVIEW_AUTO_MERGE_MIN_CONFIDENCE``; everything else waits for a reviewer, and so does
    a prompt hint a model wrote (``strategy_needs_a_person``)."""
    return (
        settings.REVIEW_AUTO_MERGE
        and strategy.replay_status == Strategy.Replay.PASSED
        and strategy.confidence >= settings.REVIEW_AUTO_MERGE_MIN_CONFIDENCE
        and not strategy_needs_a_person(strategy)
    )


def strategy_needs_a_person(strategy: Strategy) -> bool:
    """A prompt hint a model wrote goes into every matching run's prompt as free text. A
    replay shows that one run still ends well with it, not what the text tells the model;
    and text planted in a tool response or a customer's message can come back from the
    model the same way failure after failure, raising the confidence that agreement
    earns. So however confident, it waits for a person. (An analyzer's hints are this
    project's own sentences.)"""
    return strategy.kind == Strategy.Kind.PROMPT_HINT and not strategy.origin.startswith(
        "analyzer:"
    )


def strategy_auto_merge(*, strategy: Strategy) -> Any:
    """Publish ``strategy`` without a reviewer, the way an approval does (so it still goes
    through whatever strategy_activate publishes to: a canary, once rollouts exist). A
    review item still open for it is closed as decided by the automation."""
    published = strategy_activate(strategy=strategy, author_kind="auto_merge")
    # reviews closes the items, in one transaction, and audits the merge with them
    # (policies.signals).
    strategy_auto_merged.send(
        sender=Strategy,
        strategy=strategy,
        details={
            "confidence": strategy.confidence,
            "min_confidence": settings.REVIEW_AUTO_MERGE_MIN_CONFIDENCE,
            "published": str(published) if published is not None else None,
        },
    )
    return published


def reflexion_for_failure(
    facts: FailureFacts, *, auto_approve: bool | None = None
) -> ReflexionProposal:
    """Turn one classified failure into a strategy, an agreement, or a recorded rejection."""
    from policies.replay import INCONCLUSIVE, ReplayOutcome, strategy_replay_outcome

    stop = "" if facts.external else negative_feedback_stop(facts)
    if stop:
        return _record(facts, None, ReflexionProposal.Outcome.STOPPED, stop)
    proposal = next((p for p in (a(facts) for a in ANALYZERS) if p is not None), None)
    if proposal is None:
        proposal, error = llm_reflexion(facts)
        if proposal is None:
            return _record(facts, None, ReflexionProposal.Outcome.REJECTED, error)
    # The same evidence can support more than one repair: the replay picks among them.
    alternatives: list[Proposal] = []
    if proposal.origin == "analyzer:evidence":
        candidates = list(evidence_candidates(facts))
        known = {
            s.signature
            for s in Strategy.objects.exclude(status=Strategy.Status.REJECTED).only("signature")
        }
        # A candidate an existing strategy already is goes first (it agrees with it).
        candidates.sort(key=lambda c: branch_signature(c.kind, c.branch) not in known)
        if candidates:
            proposal, alternatives = candidates[0], candidates[1:]
    gates = quality_gates(proposal, facts)
    failed_gates = {name: why for name, why in gates.items() if why}
    if failed_gates:
        reason = "; ".join(f"{name}: {why}" for name, why in failed_gates.items())
        return _record(facts, proposal, ReflexionProposal.Outcome.REJECTED, reason, gates)
    if facts.external:
        # The analysis is kept for people to read; a strategy of this installation that
        # the same words happen to name (a tool called get_order elsewhere) is not touched.
        return _record(
            facts, proposal, ReflexionProposal.Outcome.REJECTED, NOT_REPLAYED_EXTERNAL, gates
        )

    signature = branch_signature(proposal.kind, proposal.branch)
    same = (
        Strategy.objects.filter(signature=signature)
        .exclude(status__in=[Strategy.Status.REJECTED])
        .first()
    )
    if same is not None:
        # AGREE: the same rule again; count the evidence instead of adding a twin.
        with transaction.atomic():
            same.agree_count += 1
            same.save(update_fields=["agree_count", "updated_at"])
            same.source_traces.add(Trace.objects.only("pk").get(pk=facts.trace_id))
            # reviews sends back the items that waited for evidence (policies.signals).
            strategy_evidence_added.send(sender=Strategy, strategy=same, trace_id=facts.trace_id)
        record = _record(facts, proposal, ReflexionProposal.Outcome.AGREED, "", gates, same)
        if same.status in (
            Strategy.Status.PROPOSED,
            Strategy.Status.IN_REVIEW,
            Strategy.Status.DEPRECATED,
        ):
            # A rule nobody applies yet earns confidence only from evidence: replay it against
            # this new, independent failure too. A pass moves confidence like a successful
            # application, a failure like a failed one, so a rule that keeps fixing fresh
            # failures can reach the auto-merge bar and one that does not sinks.
            replayed = strategy_replay_outcome(proposal=proposal, facts=facts)
            if not replayed.passed and failure_unrelated(
                replayed.error_types, target=same.error_type
            ):
                # It fixed what it targets and the replay then met something no strategy
                # changes (the order does not exist, the upstream is down): no evidence.
                logger.info(
                    "reflexion.evidence_inconclusive",
                    extra={
                        "strategy": same.pk,
                        "trace_id": facts.trace_id,
                        "error_types": sorted(replayed.error_types),
                    },
                )
                return record
            same = strategy_evidence_record(
                strategy_id=same.pk, passed=replayed.passed, trace_id=facts.trace_id
            )
            if same.status == Strategy.Status.DEPRECATED:
                # A retired rule that a new, independent failure leads back to, and that fixes
                # it: a person decides whether it returns (else the signature would agree
                # with a rule nobody applies, for ever, and learn nothing more).
                if replayed.passed:
                    strategy_revive_for_review(strategy=same, trace_id=facts.trace_id)
            elif auto_approve is None and strategy_auto_mergeable(same):
                strategy_auto_merge(strategy=same)
        return record

    replayed = strategy_replay_outcome(proposal=proposal, facts=facts)
    passed, detail = replayed.passed, replayed.detail
    # The replay's detail quotes the responses it got; it is stored on the strategy.
    detail = redact_text(detail)
    while not passed and alternatives:
        # Refuted by the replay: the next repair the evidence supports gets its turn. Only
        # the last refutation counts towards the negative-feedback guard.
        _record(
            facts,
            proposal,
            ReflexionProposal.Outcome.REJECTED,
            f"replay refuted this candidate, trying the next: {detail}",
            gates,
        )
        proposal = alternatives.pop(0)
        gates = quality_gates(proposal, facts)
        if any(gates.values()):
            detail = "quality gates: " + "; ".join(f"{k}: {v}" for k, v in gates.items() if v)
            replayed = ReplayOutcome(False, detail)  # not the previous candidate's verdict
            continue
        replayed = strategy_replay_outcome(proposal=proposal, facts=facts)
        passed, detail = replayed.passed, redact_text(replayed.detail)
        signature = branch_signature(proposal.kind, proposal.branch)
    if not passed:
        # Refuted, or untested: nothing cached to serve, the tool suspended, or the replay
        # fixed what it targets and then met a failure of another class (the order does not
        # exist). Only a refutation counts towards the negative-feedback stop.
        untested = detail.startswith(INCONCLUSIVE) or bool(
            replayed.error_types and replayed.error_types <= UPSTREAM_ONLY - {facts.error_type}
        )
        detail = detail.removeprefix(INCONCLUSIVE)
        verdict = "replay inconclusive" if untested else "replay failed"
        return _record(
            facts, proposal, ReflexionProposal.Outcome.REJECTED, f"{verdict}: {detail}", gates
        )
    slot = branch_slot(proposal.kind, proposal.branch)
    rival = next(
        (
            s
            for s in Strategy.objects.filter(
                kind=proposal.kind, tool_name=proposal.branch.get("tool", "")
            ).exclude(status__in=[Strategy.Status.REJECTED, Strategy.Status.DEPRECATED])
            if branch_slot(s.kind, s.branch) == slot
        ),
        None,
    )
    policy, _ = Policy.objects.get_or_create(
        intent=proposal.branch.get("intent", ""), tool_name=proposal.branch.get("tool", "")
    )
    with transaction.atomic():
        live = (Strategy.Status.ACTIVE, Strategy.Status.APPROVED)
        if rival is not None and rival.status not in live:
            # EDIT of a rule nobody applies yet: rewrite it in place.
            rival.branch = proposal.branch
            rival.root_cause = proposal.root_cause
            rival.strategy_update = proposal.strategy_update
            rival.signature = signature
            rival.replay_status = Strategy.Replay.PASSED
            rival.replay_detail = detail
            rival.save()
            rival.source_traces.add(Trace.objects.only("pk").get(pk=facts.trace_id))
            # reviews sends back the items that waited for evidence (policies.signals).
            strategy_evidence_added.send(sender=Strategy, strategy=rival, trace_id=facts.trace_id)
            strategy, outcome = rival, ReflexionProposal.Outcome.EDITED
        else:
            strategy = Strategy.objects.create(
                policy=policy,
                kind=proposal.kind,
                tool_name=proposal.branch.get("tool", ""),
                intent=proposal.branch.get("intent", ""),
                error_type=facts.error_type,
                root_cause=proposal.root_cause,
                strategy_update=proposal.strategy_update,
                branch=proposal.branch,
                signature=signature,
                confidence=CONFIDENCE_START,
                status=Strategy.Status.PROPOSED,
                origin=proposal.origin,
                replay_status=Strategy.Replay.PASSED,
                replay_detail=detail,
            )
            strategy.source_traces.add(Trace.objects.only("pk").get(pk=facts.trace_id))
            # EDIT of a live rule: the rewrite waits for approval like any proposal, and its
            # activation replaces the rival in the new version (strategy_activate).
            outcome = (
                ReflexionProposal.Outcome.EDITED
                if rival is not None
                else ReflexionProposal.Outcome.ADDED
            )
        record = _record(facts, proposal, outcome, "", gates, strategy)
    approve = strategy_auto_mergeable(strategy) if auto_approve is None else auto_approve
    if approve:
        strategy_auto_merge(strategy=strategy)
    elif strategy.status == Strategy.Status.PROPOSED:
        strategy.status = Strategy.Status.IN_REVIEW
        strategy.save(update_fields=["status", "updated_at"])
        review_requested.send(
            sender=Strategy,
            strategy=strategy,
            reason=REVIEW_LOW_CONFIDENCE,
            detail=f"{strategy.root_cause} -> {strategy.strategy_update} (replay passed)"
            + (
                "; a prompt hint a model wrote is always reviewed"
                if strategy_needs_a_person(strategy)
                else ""
            ),
        )
    return record


def reflexion_run(*, trace_id: str, auto_approve: bool | None = None) -> list[ReflexionProposal]:
    """Reflect on every classified failure of a finished trace."""
    trace = Trace.objects.filter(pk=trace_id).first()
    if trace is None or not trace.is_terminal or trace.source == "replay":
        return []
    failures = failures_of_trace(trace)
    if not failures:
        return []
    records: list[ReflexionProposal] = []
    with job_running(
        kind=Job.Kind.REFLEXION, name=f"reflexion on run {trace_id}", total=len(failures)
    ) as job:
        for facts in failures:
            record = reflexion_for_failure(facts, auto_approve=auto_approve)
            records.append(record)
            job_progress(
                job_id=job.pk, message=f"{facts.signature}: {record.outcome} {record.reason}"
            )
        job_finish(
            job_id=job.pk,
            message=", ".join(f"{r.error_signature}: {r.outcome}" for r in records),
            result_url=reverse("traces:detail", args=[trace.pk]),
        )
    return records


def trace_needs_reflexion(trace: Trace, *, steps: list[Any] | None = None) -> bool:
    """A run that is no replay and has a failed step with a learnable error type. ``steps``
    (rows with ``ok`` and ``error_type``, every step of the run) spares reading them."""
    if trace.source == "replay":
        return False
    if steps is not None:
        return any(not s.ok and s.error_type not in ("", *NOT_LEARNABLE) for s in steps)
    return trace.steps.filter(ok=False).exclude(error_type__in=["", *NOT_LEARNABLE]).exists()
