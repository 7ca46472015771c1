"""The policy as the runtime applies it: plain, immutable rules compiled from a PolicyVersion.

``policies.selectors.runtime_policy_for_run`` builds a ``RuntimePolicy``; the runtime only
reads it. Each rule carries its strategy id so every Step can record what fired.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Transforms an adapter strategy may apply to one argument after validation.
TRANSFORMS = {
    "digits_to_int": lambda v: int(re.sub(r"\D", "", str(v))) if re.search(r"\d", str(v)) else v,
    "strip": lambda v: v.strip() if isinstance(v, str) else v,
    "upper": lambda v: v.upper() if isinstance(v, str) else v,
    "lower": lambda v: v.lower() if isinstance(v, str) else v,
    "numeric_string_to_int": lambda v: int(v) if isinstance(v, str) and v.strip().isdigit() else v,
}

ERROR_HANDLER_ACTIONS = ("retry_once", "degrade_cache", "handover", "call_tool")


@dataclass(frozen=True)
class HintRule:
    strategy_id: int
    text: str
    tool: str = ""
    intent: str = ""
    error_type: str = ""


@dataclass(frozen=True)
class AdapterRule:
    strategy_id: int
    field: str
    transform: str


@dataclass(frozen=True)
class ValidationRule:
    strategy_id: int
    schema: dict[str, Any]


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


@dataclass(frozen=True)
class RuntimePolicy:
    version: str = ""
    hints: tuple[HintRule, ...] = ()
    adapters: dict[str, tuple[AdapterRule, ...]] = field(default_factory=dict)
    validation_rules: dict[str, tuple[ValidationRule, ...]] = field(default_factory=dict)
    pre_conditions: dict[str, tuple[PreCondition, ...]] = field(default_factory=dict)
    error_handlers: dict[str, tuple[ErrorHandler, ...]] = field(default_factory=dict)

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


def dotted_get(data: Any, path: str) -> Any:
    """``results.0.skus.0.sku`` → the value, or None when any hop is missing."""
    current = data
    for part in path.split("."):
        if isinstance(current, list):
            if not part.isdigit() or int(part) >= len(current):
                return None
            current = current[int(part)]
        elif isinstance(current, dict):
            if part not in current:
                return None
            current = current[part]
        else:
            return None
    return current


def apply_adapters(
    rules: tuple[AdapterRule, ...], arguments: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Apply adapter strategies; return the new arguments and what fired."""
    result = dict(arguments)
    fired: list[dict[str, Any]] = []
    for rule in rules:
        if rule.field not in result or rule.transform not in TRANSFORMS:
            continue
        before = result[rule.field]
        after = TRANSFORMS[rule.transform](before)
        if after != before:
            result[rule.field] = after
            fired.append(
                {
                    "strategy": rule.strategy_id,
                    "adapter": f"policy:{rule.transform}",
                    "path": rule.field,
                    "before": before,
                    "after": after,
                }
            )
    return result, fired


def substitute(template: dict[str, Any], value: Any) -> dict[str, Any]:
    return {key: (value if item == "$arg" else item) for key, item in template.items()}
