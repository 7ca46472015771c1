"""The policy as the runtime applies it: plain, immutable rules compiled from a PolicyVersion.

``policies.selectors.runtime_policy_for_run`` builds a ``RuntimePolicy``; the runtime only
reads it. Each rule carries its strategy id so every Step can record what fired.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agents.repairs import (
    RepairContext,
    Step,
    repair_attempt,
    repair_steps_parse,
)
from agents.repairs import (
    dotted_get as dotted_get,  # re-exported: pre-conditions read lookup results with it
)

# Named transforms an adapter strategy may apply to its field: each is a chain of repair
# steps (``agents.repairs``) without a field, which the rule's field fills in. A value the
# chain cannot transform (no digits, not text) is left as it is.
TRANSFORMS: dict[str, list[dict[str, Any]]] = {
    "digits_to_int": [{"op": "coerce", "to": "integer", "digits_only": True}],
    "strip": [{"op": "trim"}],
    "upper": [{"op": "case", "to": "upper"}],
    "lower": [{"op": "case", "to": "lower"}],
    "numeric_string_to_int": [{"op": "coerce", "to": "integer"}],
}


@lru_cache(maxsize=256)
def transform_steps(name: str, field: str) -> tuple[Step, ...]:
    """The steps of the named transform ``name`` on ``field``; () for an unknown name."""
    if name not in TRANSFORMS or not field:
        return ()
    return tuple(repair_steps_parse(TRANSFORMS[name], field=field))


ERROR_HANDLER_ACTIONS = ("retry_once", "wait_retry", "degrade_cache", "handover", "call_tool")
# wait_retry: at most this many retries, each waiting at most this long.
WAIT_RETRY_MAX_RETRIES = 3
WAIT_RETRY_MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class HintRule:
    strategy_id: int
    text: str
    tool: str = ""
    intent: str = ""
    error_type: str = ""


@dataclass(frozen=True)
class AdapterRule:
    """A named ``transform`` of ``field`` and/or a chain of repair ``steps`` (value
    transforms and argument moves), applied all or nothing: the named transform first."""

    strategy_id: int
    field: str
    transform: str = ""
    steps: tuple[Step, ...] = ()

    @property
    def chain(self) -> tuple[Step, ...]:
        named = transform_steps(self.transform, self.field) if self.transform else ()
        return (*named, *self.steps)

    @property
    def label(self) -> str:
        if self.transform and not self.steps:
            return self.transform
        return "+".join(step.op for step in self.chain)


@dataclass(frozen=True)
class ValidationRule:
    strategy_id: int
    schema: dict[str, Any]


@dataclass(frozen=True)
class SchemaAmendment:
    """A versioned amendment of a tool's parameter schema: each named property's schema is
    replaced, so a value in the API's new contract is no longer refused by validation (and
    the model's prompt shows the amended schema)."""

    strategy_id: int
    properties: dict[str, Any]
    version: int = 1


def schema_amend(schema: dict[str, Any], amendments: tuple[SchemaAmendment, ...]) -> dict[str, Any]:
    """``schema`` with the amendments' properties replaced (later ones win); the tool's own
    schema is left untouched. A property the schema does not list is added."""
    if not amendments:
        return schema
    amended = copy.deepcopy(schema)
    properties = amended.setdefault("properties", {})
    if not isinstance(properties, dict):
        return schema
    for amendment in sorted(amendments, key=lambda a: a.version):
        for name, rule in amendment.properties.items():
            properties[name] = copy.deepcopy(rule)
    return amended


@dataclass(frozen=True)
class PreCondition:
    """Before calling the tool: when ``arg`` fails ``not_pattern``, call ``call`` with
    ``input`` (``$arg`` is replaced by the argument's value), take the value at the dotted
    path ``take`` from its JSON result and assign it to ``assign``."""

    strategy_id: int
    arg: str
    not_pattern: str
    call: str
    input: dict[str, Any]
    take: str
    assign: str


@dataclass(frozen=True)
class ErrorHandler:
    strategy_id: int
    on: str
    action: str
    call: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    transform: dict[str, str] = field(default_factory=dict)
    # wait_retry: how many retries, and the longest wait (s) the API may ask for before one.
    max_retries: int = 1
    max_wait_s: float = 30.0


@dataclass(frozen=True)
class RuntimePolicy:
    version: str = ""
    hints: tuple[HintRule, ...] = ()
    adapters: dict[str, tuple[AdapterRule, ...]] = field(default_factory=dict)
    validation_rules: dict[str, tuple[ValidationRule, ...]] = field(default_factory=dict)
    pre_conditions: dict[str, tuple[PreCondition, ...]] = field(default_factory=dict)
    error_handlers: dict[str, tuple[ErrorHandler, ...]] = field(default_factory=dict)
    schema_amendments: dict[str, tuple[SchemaAmendment, ...]] = field(default_factory=dict)

    def hints_for(self, *, intent: str, tools: list[str]) -> list[HintRule]:
        return [
            hint
            for hint in self.hints
            if (not hint.intent or hint.intent == intent) and (not hint.tool or hint.tool in tools)
        ]

    def handler_for(self, *, tool: str, error_type: str) -> ErrorHandler | None:
        for handler in self.error_handlers.get(tool, ()):
            if handler.on == error_type:
                return handler
        return None


EMPTY_POLICY = RuntimePolicy()


def apply_adapters(
    rules: tuple[AdapterRule, ...],
    arguments: dict[str, Any],
    context: RepairContext | None = None,
    *,
    tool_locations: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Apply adapter strategies in order; return the new arguments and what fired.

    Each rule's chain applies all or nothing; one that cannot apply (or changes nothing)
    leaves the arguments as they were and does not fire. A fired rule that moved an
    argument to a location records it under ``locations`` (see ``fired_locations``)."""
    result = dict(arguments)
    fired: list[dict[str, Any]] = []
    for rule in rules:
        chain = rule.chain
        if not chain:
            continue
        outcome = repair_attempt(chain, result, context, tool_locations=tool_locations)
        if not outcome.applied or not outcome.changed:
            continue
        before, result = result, outcome.arguments
        if outcome.changed == (rule.field,) and rule.field in before:
            was, now = before[rule.field], result[rule.field]
        else:
            was = {name: before[name] for name in outcome.changed if name in before}
            now = {name: result[name] for name in outcome.changed if name in result}
        entry = {
            "strategy": rule.strategy_id,
            "adapter": f"policy:{rule.label}",
            "path": rule.field if outcome.changed == (rule.field,) else ",".join(outcome.changed),
            "before": was,
            "after": now,
        }
        if outcome.locations:
            entry["locations"] = dict(outcome.locations)
        fired.append(entry)
    return result, fired


def fired_locations(fired: list[dict[str, Any]], arguments: Mapping[str, Any]) -> dict[str, str]:
    """Where the arguments that fired adapters moved or added must be sent (the later
    adapter wins); only arguments still present count."""
    locations: dict[str, str] = {}
    for entry in fired:
        locations.update(entry.get("locations") or {})
    return {name: where for name, where in locations.items() if name in arguments}


def substitute(template: dict[str, Any], value: Any) -> dict[str, Any]:
    return {key: (value if item == "$arg" else item) for key, item in template.items()}
