"""What a strategy's ``branch`` may contain, per kind, and how branches compile into the
``RuntimePolicy`` the runtime applies.

A branch that does not validate here is not actionable: the quality gate rejects it, import
refuses it, and the compiler never sees it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agents.policy_runtime import (
    ERROR_HANDLER_ACTIONS,
    TRANSFORMS,
    WAIT_RETRY_MAX_RETRIES,
    WAIT_RETRY_MAX_WAIT_S,
    AdapterRule,
    ErrorHandler,
    HintRule,
    PreCondition,
    RuntimePolicy,
    SchemaAmendment,
    ValidationRule,
)
from agents.repairs import (
    repair_steps_describe,
    repair_steps_parse,
)
from agents.safe_regex import regex_unsafe_reason, schema_regex_problems
from agents.tools.adapters import schema_references_problems

KINDS = ("pre_condition", "validation_rule", "error_handler", "adapter", "prompt_hint")

# Keys each kind's branch must / may have (besides the scope keys tool and intent).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "pre_condition": ("arg", "not_pattern", "call", "input", "take", "assign"),
    "validation_rule": (),
    "error_handler": ("on", "action"),
    "adapter": (),
    "prompt_hint": ("text",),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "pre_condition": (),
    # schema: an extra check on the input; amend: a versioned amendment of the tool's own
    # JSON Schema (property name -> its new schema), for an API whose contract moved on.
    "validation_rule": ("schema", "amend", "version"),
    "error_handler": ("call", "input", "transform", "max_retries", "max_wait_s"),
    "adapter": ("field", "transform", "steps"),
    "prompt_hint": ("error_type",),
}
_SCOPE = ("tool", "intent")


def branch_errors(kind: str, branch: Any) -> list[str]:
    """Every reason ``branch`` cannot be applied; empty when it compiles."""
    if kind not in KINDS:
        return [f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}"]
    if not isinstance(branch, dict):
        return ["branch must be a mapping"]
    errors = [f"missing {key!r}" for key in _REQUIRED[kind] if key not in branch]
    if kind == "adapter":
        # A named transform needs the field it applies to; steps may name their own.
        if "transform" not in branch and "steps" not in branch:
            errors.append("missing 'transform'" + (" or 'steps'" if "field" not in branch else ""))
        elif "transform" in branch and "field" not in branch:
            errors.append("missing 'field'")
    if kind == "validation_rule" and ("schema" in branch) == ("amend" in branch):
        errors.append("a validation_rule has either 'schema' or 'amend'")
    allowed = set(_REQUIRED[kind]) | set(_OPTIONAL[kind]) | set(_SCOPE)
    errors += [f"unexpected key {key!r}" for key in sorted(set(branch) - allowed)]
    if errors:
        return errors
    if kind in ("pre_condition", "validation_rule", "error_handler", "adapter") and not branch.get(
        "tool"
    ):
        errors.append(f"a {kind} needs the tool it applies to")
    # Model output is untrusted: check types before anything relies on them.
    for key in ("tool", "intent", "call", "arg", "take", "assign", "field", "on", "action"):
        if key in branch and not isinstance(branch[key], str):
            errors.append(f"{key} must be a string")
    if "input" in branch and not isinstance(branch["input"], dict):
        errors.append("input must be a mapping")
    if "transform" in branch and kind == "error_handler":
        transform = branch["transform"]
        if not isinstance(transform, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v in TRANSFORMS
            for k, v in transform.items()
        ):
            errors.append(f"transform must map argument names to one of {sorted(TRANSFORMS)}")
    if "max_retries" in branch and (
        not isinstance(branch["max_retries"], int) or isinstance(branch["max_retries"], bool)
    ):
        errors.append("max_retries must be an integer")
    if "max_wait_s" in branch and (
        not isinstance(branch["max_wait_s"], int | float) or isinstance(branch["max_wait_s"], bool)
    ):
        errors.append("max_wait_s must be a number of seconds")
    if errors:
        return errors
    if kind == "pre_condition":
        reason = regex_unsafe_reason(branch["not_pattern"])
        if reason:
            errors.append(f"not_pattern: {reason}")
        if branch["call"] == branch.get("tool"):
            errors.append("a pre_condition must call a different tool")
    elif kind == "validation_rule" and "amend" in branch:
        errors += _amend_errors(branch)
    elif kind == "validation_rule":
        if not isinstance(branch["schema"], dict) or not branch["schema"]:
            errors.append("schema must be a non-empty JSON Schema object")
        else:
            try:
                Draft202012Validator.check_schema(branch["schema"])
            except SchemaError as exc:
                errors.append(f"schema is invalid: {exc.message}")
            else:
                errors += schema_regex_problems(branch["schema"])
                errors += schema_references_problems(branch["schema"])
    elif kind == "error_handler":
        if branch["action"] not in ERROR_HANDLER_ACTIONS:
            errors.append(f"action must be one of {', '.join(ERROR_HANDLER_ACTIONS)}")
        if branch["action"] == "call_tool" and not branch.get("call"):
            errors.append("call_tool needs 'call'")
        errors += _retry_bounds_errors(branch)
    elif kind == "adapter":
        if "transform" in branch and (
            not isinstance(branch["transform"], str) or branch["transform"] not in TRANSFORMS
        ):
            errors.append(f"transform must be one of {', '.join(sorted(TRANSFORMS))}")
        if "steps" in branch:
            try:
                repair_steps_parse(branch["steps"], field=branch.get("field"))
            except ValueError as exc:
                errors.append(f"steps: {exc}")
    elif kind == "prompt_hint":
        text = branch["text"]
        if not isinstance(text, str) or not 8 <= len(text.strip()) <= 300:
            errors.append("text must be 8..300 characters")
        intent = branch.get("intent", "")
        if not isinstance(intent, str) or len(intent) > 40:
            errors.append("intent must be an intent name of at most 40 characters")
    return errors


def branch_signature(kind: str, branch: dict[str, Any]) -> str:
    """Identity for dedupe: the same kind and rule content, whatever the wording."""
    canonical = json.dumps({"kind": kind, **branch}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


MAX_AMENDED_PROPERTIES = 10


def _amend_errors(branch: dict[str, Any]) -> list[str]:
    amend, errors = branch["amend"], []
    if not isinstance(amend, dict) or not amend or len(amend) > MAX_AMENDED_PROPERTIES:
        return [f"amend must map 1 to {MAX_AMENDED_PROPERTIES} property names to JSON Schemas"]
    for name, schema in amend.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}", name):
            errors.append(f"amend: {name!r} is not a property name")
        elif not isinstance(schema, dict) or not schema:
            errors.append(f"amend.{name} must be a non-empty JSON Schema object")
        else:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:
                errors.append(f"amend.{name} is invalid: {exc.message}")
            else:
                errors += schema_regex_problems(schema, f"amend.{name}")
                errors += schema_references_problems(schema, f"amend.{name}")
    version = branch.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        errors.append("version must be a positive integer")
    return errors


def branch_slot(kind: str, branch: dict[str, Any]) -> str:
    """Where a branch sits in the tree: two branches in one slot compete (EDIT, not ADD)."""
    key = {
        "pre_condition": branch.get("assign", ""),
        "validation_rule": (
            "amend:" + ",".join(sorted(branch["amend"]))
            if isinstance(branch.get("amend"), dict)
            else json.dumps(branch.get("schema", {}), sort_keys=True)[:60]
        ),
        "error_handler": branch.get("on", ""),
        "adapter": branch.get("field", "") or _steps_names(branch.get("steps")),
        "prompt_hint": branch.get("error_type", "") or branch.get("text", "")[:40],
    }[kind]
    return f"{kind}|{branch.get('tool', '')}|{branch.get('intent', '')}|{key}"


def _steps_names(steps: Any) -> str:
    """The arguments a steps-only adapter touches (its slot when it names no field)."""
    try:
        parsed = repair_steps_parse(steps)
    except ValueError:
        return ""
    return ",".join(sorted({name for step in parsed for name in step.names()}))


def adapter_rule(strategy_id: int, branch: dict[str, Any]) -> AdapterRule:
    """The AdapterRule of a valid adapter branch (a named transform, steps, or both)."""
    field = branch.get("field", "")
    steps = (
        tuple(repair_steps_parse(branch["steps"], field=field or None))
        if branch.get("steps")
        else ()
    )
    return AdapterRule(strategy_id, field, branch.get("transform", ""), steps)


def runtime_policy_compile(
    *, version: str, strategies: Iterable[tuple[int, str, dict[str, Any], str]]
) -> RuntimePolicy:
    """Compile (id, kind, branch, error_type) tuples; invalid branches are skipped."""
    hints: list[HintRule] = []
    adapters: dict[str, list[AdapterRule]] = defaultdict(list)
    rules: dict[str, list[ValidationRule]] = defaultdict(list)
    pre: dict[str, list[PreCondition]] = defaultdict(list)
    handlers: dict[str, list[ErrorHandler]] = defaultdict(list)
    amendments: dict[str, list[SchemaAmendment]] = defaultdict(list)
    for strategy_id, kind, branch, error_type in strategies:
        if branch_errors(kind, branch):
            continue
        tool = branch.get("tool", "")
        if kind == "prompt_hint":
            hints.append(
                HintRule(
                    strategy_id,
                    # One line: a newline in the text could open a section of its own in
                    # the prompt ("## Instructions"), not stay one bullet of the hints.
                    " ".join(branch["text"].split()),
                    tool,
                    branch.get("intent", ""),
                    branch.get("error_type", error_type),
                )
            )
        elif kind == "adapter":
            adapters[tool].append(adapter_rule(strategy_id, branch))
        elif kind == "validation_rule" and "amend" in branch:
            amendments[tool].append(
                SchemaAmendment(strategy_id, dict(branch["amend"]), int(branch.get("version", 1)))
            )
        elif kind == "validation_rule":
            rules[tool].append(ValidationRule(strategy_id, branch["schema"]))
        elif kind == "pre_condition":
            pre[tool].append(
                PreCondition(
                    strategy_id,
                    branch["arg"],
                    branch["not_pattern"],
                    branch["call"],
                    dict(branch["input"]),
                    branch["take"],
                    branch["assign"],
                )
            )
        elif kind == "error_handler":
            handlers[tool].append(
                ErrorHandler(
                    strategy_id,
                    branch["on"],
                    branch["action"],
                    branch.get("call", ""),
                    dict(branch.get("input", {})),
                    dict(branch.get("transform", {})),
                    max_retries=int(branch.get("max_retries", 1)),
                    max_wait_s=float(branch.get("max_wait_s", 30.0)),
                )
            )
    return RuntimePolicy(
        version=version,
        hints=tuple(hints),
        adapters={k: tuple(v) for k, v in adapters.items()},
        validation_rules={k: tuple(v) for k, v in rules.items()},
        pre_conditions={k: tuple(v) for k, v in pre.items()},
        error_handlers={k: tuple(v) for k, v in handlers.items()},
        schema_amendments={k: tuple(v) for k, v in amendments.items()},
    )


# How each transform and handler action reads in a sentence, for reviewers.
_TRANSFORM_WORDS = {
    "digits_to_int": "keep only its digits, as a number",
    "strip": "trim the spaces around it",
    "upper": "upper-case it",
    "lower": "lower-case it",
    "numeric_string_to_int": "turn a numeric string into a number",
}


def _retry_bounds_errors(branch: dict[str, Any]) -> list[str]:
    """retry_once retries once; wait_retry up to WAIT_RETRY_MAX_RETRIES times, each wait at
    most WAIT_RETRY_MAX_WAIT_S seconds (the run's time budget bounds it further)."""
    wait = branch["action"] == "wait_retry"
    limit = WAIT_RETRY_MAX_RETRIES if wait else 1
    retries = int(branch.get("max_retries", 1))
    max_wait = float(branch.get("max_wait_s", 30.0))
    errors = []
    if not wait and retries > 1:
        errors.append("at most 1 retry is allowed")
    elif not 1 <= retries <= limit:
        errors.append(f"max_retries must be between 1 and {limit}")
    if wait and not 0 < max_wait <= WAIT_RETRY_MAX_WAIT_S:
        errors.append(f"max_wait_s must be above 0 and at most {WAIT_RETRY_MAX_WAIT_S:g}")
    return errors


_HANDLER_WORDS = {
    "retry_once": "retry the call once",
    "wait_retry": "wait as long as the API's Retry-After asks (within the run's time budget), "
    "then retry",
    "degrade_cache": "answer from the last cached result, marked as possibly out of date",
    "handover": "hand the request over to a person",
    "call_tool": "call {call} instead",
}


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _arguments(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{key}={_value(value)}" for key, value in mapping.items()) or "no input"


def _rule_words(rule: Any) -> str:
    """One property's JSON Schema in words ("string matching ^\\d{7}$")."""
    if not isinstance(rule, dict):
        return ""
    if isinstance(rule.get("anyOf"), list):
        return " or ".join(w for w in (_rule_words(r) for r in rule["anyOf"]) if w)
    words = []
    if "type" in rule:
        kinds = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
        words.append(" or ".join(str(kind) for kind in kinds))
    if "pattern" in rule:
        words.append(f"matching {rule['pattern']}")
    if isinstance(rule.get("enum"), list):
        words.append("one of " + ", ".join(_value(item) for item in rule["enum"]))
    for key, sign in (("minimum", "≥"), ("maximum", "≤")):
        if key in rule:
            words.append(f"{sign} {_value(rule[key])}")
    for key, bound in (("minLength", "at least"), ("maxLength", "at most")):
        if key in rule:
            words.append(f"{bound} {_value(rule[key])} characters")
    return " ".join(words)


def _schema_words(schema: dict[str, Any]) -> str:
    """A JSON Schema's constraints on an object's fields, in a sentence."""
    parts: list[str] = []
    required = schema.get("required")
    if isinstance(required, list) and required:
        parts.append("requires " + ", ".join(str(name) for name in required))
    properties = schema.get("properties")
    for name, rule in properties.items() if isinstance(properties, dict) else ():
        words = _rule_words(rule)
        if words:
            parts.append(f"{name}: {words}")
    if schema.get("additionalProperties") is False:
        parts.append("no other fields")
    return "; ".join(parts) or "as the rule's JSON Schema says"


def branch_describe(kind: str, branch: Any) -> str:
    """What a branch does, in one sentence a reviewer can check against the root cause."""
    errors = branch_errors(kind, branch)
    if errors:
        return "Cannot be applied as written: " + "; ".join(errors) + "."
    tool = branch.get("tool", "")
    scope = f" for {branch['intent']} requests" if branch.get("intent") else ""
    if kind == "pre_condition":
        return (
            f"Before calling {tool}{scope}: when {branch['arg']} does not match "
            f"{branch['not_pattern']}, look it up with {branch['call']}"
            f"({_arguments(branch['input'])}) and use the result's {branch['take']} as "
            f"{branch['assign']}."
        )
    if kind == "validation_rule" and "amend" in branch:
        changes = "; ".join(
            f"{name} as {_rule_words(schema) or 'its new JSON Schema says'}"
            for name, schema in branch["amend"].items()
        )
        return (
            f"Amend {tool}'s parameter schema{scope} (version {branch.get('version', 1)}): "
            f"accept {changes}."
        )
    if kind == "validation_rule":
        return (
            f"Before calling {tool}{scope}: refuse the call unless the input "
            f"{_schema_words(branch['schema'])}."
        )
    if kind == "error_handler":
        action = _HANDLER_WORDS.get(branch["action"], branch["action"]).format(
            call=branch.get("call", "")
        )
        if branch.get("input"):
            action += f" with {_arguments(branch['input'])}"
        transform = branch.get("transform") or {}
        if transform:
            action += ", after changing " + ", ".join(
                f"{name} ({_TRANSFORM_WORDS.get(how, how)})" for name, how in transform.items()
            )
        return f"When {tool}{scope} fails with {branch['on']}: {action}."
    if kind == "adapter":
        parts = []
        if branch.get("transform"):
            how = _TRANSFORM_WORDS.get(branch["transform"], branch["transform"])
            parts.append(f"in {branch['field']}, {how}")
        if branch.get("steps"):
            parts.append(
                repair_steps_describe(
                    repair_steps_parse(branch["steps"], field=branch.get("field") or None)
                )
            )
        return f"Before calling {tool}{scope}: {'; then '.join(parts)}."
    target = f"about {tool}" if tool else "on every request"
    return f"Tells the model {target}{scope}: “{branch['text'].strip()}”"


# Each branch key as a reviewer reads it, in this order (scope first, then the rule).
_FIELD_LABELS = {
    "tool": "Tool",
    "intent": "Intent",
    "error_type": "For error type",
    "on": "When it fails with",
    "action": "Then",
    "arg": "Checks argument",
    "not_pattern": "Unless it matches",
    "field": "Field",
    "call": "Calls",
    "input": "With input",
    "take": "Takes from the result",
    "assign": "As argument",
    "transform": "Transform",
    "steps": "Steps",
    "max_retries": "At most retries",
    "max_wait_s": "Longest wait (s)",
    "schema": "Input",
    "text": "Hint text",
}


def branch_fields(kind: str, branch: Any) -> list[tuple[str, str]]:
    """A branch as labelled plain-text fields (no JSON) for the review item page; keys it
    does not know are listed last under their own name."""
    if not isinstance(branch, dict):
        return [("Branch", _value(branch))]
    fields: list[tuple[str, str]] = []
    for key in [*_FIELD_LABELS, *sorted(set(branch) - set(_FIELD_LABELS))]:
        if key not in branch:
            continue
        value = branch[key]
        if key == "schema" and isinstance(value, dict):
            text = _schema_words(value)
        elif key == "action" and kind == "error_handler" and isinstance(value, str):
            text = _HANDLER_WORDS.get(value, value).format(call=branch.get("call", ""))
        elif key == "transform" and isinstance(value, str):
            text = _TRANSFORM_WORDS.get(value, value)
        elif key == "steps" and kind == "adapter" and not branch_errors(kind, branch):
            text = repair_steps_describe(
                repair_steps_parse(value, field=branch.get("field") or None)
            )
        elif key == "transform" and isinstance(value, dict):
            text = ", ".join(f"{n}: {_TRANSFORM_WORDS.get(h, str(h))}" for n, h in value.items())
        elif isinstance(value, dict):
            text = _arguments(value)
        elif isinstance(value, str):
            text = value
        else:
            text = _value(value)
        fields.append((_FIELD_LABELS.get(key, key), text))
    return fields
