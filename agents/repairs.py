"""The repair vocabulary: typed, composable steps that change a tool call's arguments.

A repair is data, never code. An analyzer or a model proposes a list of step mappings
(``{"op": "strip_prefix", "field": "order_id", "value": "#W"}``);
``repair_steps_parse`` validates them into frozen ``Step`` objects (a ``ValueError`` says
what is wrong), and ``repair_apply`` runs them on a copy of the arguments. Policy adapters
carry such chains (``AdapterRule.steps``; ``agents.policy_runtime``), so the runtime, the
replay and the review page all read the same data.

Two families of steps:

- **value transforms** change one argument's value (``field``): ``case``, ``trim``,
  ``strip_prefix`` / ``strip_suffix`` / ``add_prefix`` / ``add_suffix``,
  ``regex_replace`` (bounded, checked pattern), ``zero_pad``, ``separators``, ``coerce``
  (integer, number, string), ``date_format`` (strftime patterns), ``enum_map``, ``scale``;
- **argument moves** change which arguments are sent: ``rename`` (optionally to another
  location: path, query or body), ``drop``, and ``add`` whose value comes from the user's
  query, the customer id, a key fact of the run (an earlier successful result), or a
  constant.

A chain applies all or nothing: when one step cannot apply (a value that is not a number,
a missing argument, a date in no known format), ``repair_apply`` raises
``RepairNotApplicable`` with the step and the reason, and the arguments stay as they were.
A step marked ``"optional": true`` is skipped instead. Steps are idempotent where that can
be known: a prefix already stripped, a value already in the target date format or already
one of an enum map's targets is left alone, so a chain can be applied to a value the model
already got right. ``scale`` is the exception: it multiplies every time.
"""

from __future__ import annotations

import json
import math
import re
import re._parser as sre_parse  # the stdlib's own regex parser, to inspect a pattern's tree
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import re2

from agents.safe_regex import regex_compiled, regex_unsafe_reason

# Bounds that keep a proposed repair cheap and predictable.
MAX_STEPS = 12
MAX_PATTERN_CHARS = 100
MAX_REPEAT_BOUND = 100
MAX_VALUE_CHARS = 1000
MAX_AFFIX_CHARS = 32
MAX_ENUM_ENTRIES = 100
MAX_PAD_WIDTH = 64
LOCATIONS = ("path", "query", "body")
CASES = ("lower", "upper", "title")
COERCIONS = ("integer", "number", "string")
SOURCES = ("query", "customer", "fact", "value")
# strftime directives a date_format step may use (all of them strptime understands).
DATE_DIRECTIVES = frozenset("aAbBdfHIjmMpSyYzZ%")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?$")


class RepairNotApplicable(Exception):
    """A chain did not apply: which step, and why. The arguments were left unchanged."""

    def __init__(self, index: int, op: str, reason: str) -> None:
        self.index = index
        self.op = op
        self.reason = reason
        super().__init__(f"step {index + 1} ({op}): {reason}")


class _Cannot(Exception):
    """Raised inside a step; ``repair_apply`` turns it into RepairNotApplicable."""


@dataclass(frozen=True)
class RepairContext:
    """What an ``add`` step may draw from: the user's query, the customer id, and the run's
    key facts — ``(tool, result text)`` of its earlier successful calls, oldest first."""

    query: str = ""
    customer_id: str = ""
    facts: tuple[tuple[str, str], ...] = ()


@dataclass
class _State:
    arguments: dict[str, Any]
    tool_locations: Mapping[str, str]
    locations: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)

    def touch(self, name: str) -> None:
        if name not in self.changed:
            self.changed.append(name)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a chain; subclasses set ``op`` and implement ``_apply``."""

    op: ClassVar[str] = ""
    optional: bool = False

    def _apply(self, state: _State, context: RepairContext) -> None:
        raise NotImplementedError

    def names(self) -> tuple[str, ...]:
        """The arguments this step reads or writes."""
        return ()

    def as_data(self) -> dict[str, Any]:
        """The mapping ``repair_steps_parse`` reads back into this step."""
        data: dict[str, Any] = {"op": self.op}
        for key, value in self._data().items():
            if value is not None:
                data[key] = value
        if self.optional:
            data["optional"] = True
        return data

    def _data(self) -> dict[str, Any]:
        return {}

    def describe(self) -> str:
        raise NotImplementedError


# --- value transforms -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ValueStep(Step):
    """A transform of one argument's value; a missing argument cannot be transformed."""

    field: str

    def names(self) -> tuple[str, ...]:
        return (self.field,)

    def _apply(self, state: _State, context: RepairContext) -> None:
        if self.field not in state.arguments:
            raise _Cannot(f"no argument {self.field!r}")
        before = state.arguments[self.field]
        after = self.transform(before)
        if after != before or type(after) is not type(before):
            state.arguments[self.field] = after
            state.touch(self.field)

    def transform(self, value: Any) -> Any:
        raise NotImplementedError

    def _text(self, value: Any) -> str:
        if not isinstance(value, str):
            raise _Cannot(f"{self.field} is {_kind(value)}, not text")
        if len(value) > MAX_VALUE_CHARS:
            raise _Cannot(f"{self.field} is longer than {MAX_VALUE_CHARS} characters")
        return value

    def as_data(self) -> dict[str, Any]:
        return {"op": self.op, "field": self.field, **super().as_data()}


@dataclass(frozen=True, kw_only=True)
class Case(ValueStep):
    op: ClassVar[str] = "case"
    to: str

    def transform(self, value: Any) -> Any:
        text = self._text(value)
        return {"lower": text.lower, "upper": text.upper, "title": text.title}[self.to]()

    def _data(self) -> dict[str, Any]:
        return {"to": self.to}

    def describe(self) -> str:
        return f"{self.to}-case {self.field}" if self.to != "title" else f"title-case {self.field}"


@dataclass(frozen=True, kw_only=True)
class Trim(ValueStep):
    op: ClassVar[str] = "trim"
    chars: str | None = None

    def transform(self, value: Any) -> Any:
        return self._text(value).strip(self.chars)

    def _data(self) -> dict[str, Any]:
        return {"chars": self.chars}

    def describe(self) -> str:
        what = f"the characters {self.chars!r}" if self.chars else "the spaces"
        return f"trim {what} around {self.field}"


@dataclass(frozen=True, kw_only=True)
class Affix(ValueStep):
    """strip_prefix, strip_suffix, add_prefix, add_suffix: idempotent by construction (a
    value already without / with the affix is left as it is)."""

    op: ClassVar[str] = ""
    value: str
    ignore_case: bool = False

    def _has(self, text: str, *, prefix: bool) -> bool:
        a, b = (text.lower(), self.value.lower()) if self.ignore_case else (text, self.value)
        return a.startswith(b) if prefix else a.endswith(b)

    def _data(self) -> dict[str, Any]:
        return {"value": self.value, "ignore_case": self.ignore_case or None}


@dataclass(frozen=True, kw_only=True)
class StripPrefix(Affix):
    op: ClassVar[str] = "strip_prefix"

    def transform(self, value: Any) -> Any:
        text = self._text(value)
        return text[len(self.value) :] if self._has(text, prefix=True) else text

    def describe(self) -> str:
        return f"remove the prefix {self.value!r} from {self.field}"


@dataclass(frozen=True, kw_only=True)
class StripSuffix(Affix):
    op: ClassVar[str] = "strip_suffix"

    def transform(self, value: Any) -> Any:
        text = self._text(value)
        return text[: -len(self.value)] if self._has(text, prefix=False) else text

    def describe(self) -> str:
        return f"remove the suffix {self.value!r} from {self.field}"


@dataclass(frozen=True, kw_only=True)
class AddPrefix(Affix):
    op: ClassVar[str] = "add_prefix"

    def transform(self, value: Any) -> Any:
        text = _scalar_text(value, self.field)
        return text if self._has(text, prefix=True) else self.value + text

    def describe(self) -> str:
        return f"put {self.value!r} before {self.field}"


@dataclass(frozen=True, kw_only=True)
class AddSuffix(Affix):
    op: ClassVar[str] = "add_suffix"

    def transform(self, value: Any) -> Any:
        text = _scalar_text(value, self.field)
        return text if self._has(text, prefix=False) else text + self.value

    def describe(self) -> str:
        return f"put {self.value!r} after {self.field}"


@dataclass(frozen=True, kw_only=True)
class RegexReplace(ValueStep):
    op: ClassVar[str] = "regex_replace"
    pattern: str
    replacement: str = ""
    count: int = 0
    must_match: bool = False

    def transform(self, value: Any) -> Any:
        text = _scalar_text(value, self.field)
        if len(text) > MAX_VALUE_CHARS:
            raise _Cannot(f"{self.field} is longer than {MAX_VALUE_CHARS} characters")
        try:
            compiled = regex_compiled(self.pattern)
        except ValueError as exc:  # stored before such patterns were refused
            raise _Cannot(f"{self.pattern!r} is {exc}") from None
        if self.must_match and not compiled.search(text):
            raise _Cannot(f"{self.field} {text!r} does not match {self.pattern!r}")
        return compiled.sub(self.replacement, text, count=self.count)

    def _data(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "replacement": self.replacement,
            "count": self.count or None,
            "must_match": self.must_match or None,
        }

    def describe(self) -> str:
        return f"in {self.field}, replace {self.pattern!r} by {self.replacement!r}"


@dataclass(frozen=True, kw_only=True)
class ZeroPad(ValueStep):
    op: ClassVar[str] = "zero_pad"
    width: int
    char: str = "0"

    def transform(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise _Cannot(f"{self.field} is {_kind(value)}, not text or an integer")
        text = str(value)
        if isinstance(value, int) and value < 0:
            raise _Cannot(f"{self.field} is negative")
        return text.rjust(self.width, self.char)

    def _data(self) -> dict[str, Any]:
        return {"width": self.width, "char": self.char if self.char != "0" else None}

    def describe(self) -> str:
        return f"left-pad {self.field} with {self.char!r} to {self.width} characters"


@dataclass(frozen=True, kw_only=True)
class Separators(ValueStep):
    op: ClassVar[str] = "separators"
    source: tuple[str, ...]
    to: str

    def transform(self, value: Any) -> Any:
        text = self._text(value)
        for separator in self.source:
            text = text.replace(separator, self.to)
        return text

    def _data(self) -> dict[str, Any]:
        return {"from": list(self.source), "to": self.to}

    def describe(self) -> str:
        source = " or ".join(repr(s) for s in self.source)
        return (
            f"in {self.field}, write {source} as {self.to!r}"
            if self.to
            else (f"in {self.field}, remove {source}")
        )


@dataclass(frozen=True, kw_only=True)
class Coerce(ValueStep):
    op: ClassVar[str] = "coerce"
    to: str
    digits_only: bool = False

    def transform(self, value: Any) -> Any:
        if isinstance(value, bool):
            raise _Cannot(f"{self.field} is a boolean")
        if self.to == "string":
            if isinstance(value, str):
                return value
            if isinstance(value, int | float):
                return _number_text(value)
            raise _Cannot(f"{self.field} is {_kind(value)}, not a scalar")
        if self.to == "integer":
            if self.digits_only:
                digits = re.sub(r"\D", "", _scalar_text(value, self.field))
                if not digits:
                    raise _Cannot(f"{self.field} has no digits")
                return int(digits)
            if isinstance(value, int):
                return value
            if isinstance(value, float):
                if not value.is_integer():
                    raise _Cannot(f"{self.field} {value!r} is not a whole number")
                return int(value)
            text = _scalar_text(value, self.field).strip()
            if not _INTEGER.match(text):
                raise _Cannot(f"{self.field} {text!r} is not an integer")
            return int(text)
        if isinstance(value, int | float):
            return value
        text = _scalar_text(value, self.field).strip()
        if not _NUMBER.match(text):
            raise _Cannot(f"{self.field} {text!r} is not a number")
        number = float(text)
        return int(number) if _INTEGER.match(text) else number

    def _data(self) -> dict[str, Any]:
        return {"to": self.to, "digits_only": self.digits_only or None}

    def describe(self) -> str:
        if self.digits_only:
            return f"keep only the digits of {self.field}, as an integer"
        return f"send {self.field} as {'a' if self.to != 'integer' else 'an'} {self.to}"


@dataclass(frozen=True, kw_only=True)
class DateFormat(ValueStep):
    op: ClassVar[str] = "date_format"
    source: tuple[str, ...]
    to: str

    def transform(self, value: Any) -> Any:
        text = self._text(value).strip()
        for pattern in self.source:
            try:
                return datetime.strptime(text, pattern).strftime(self.to)
            except ValueError:
                continue
        try:
            datetime.strptime(text, self.to)
        except ValueError:
            formats = ", ".join(self.source)
            raise _Cannot(f"{self.field} {text!r} is in none of {formats}") from None
        return text  # already in the target format

    def _data(self) -> dict[str, Any]:
        source: Any = self.source[0] if len(self.source) == 1 else list(self.source)
        return {"from": source, "to": self.to}

    def describe(self) -> str:
        return f"rewrite the date {self.field} from {' or '.join(self.source)} to {self.to}"


@dataclass(frozen=True, kw_only=True)
class EnumMap(ValueStep):
    op: ClassVar[str] = "enum_map"
    mapping: tuple[tuple[str, Any], ...]
    ignore_case: bool = False
    otherwise: str = "fail"

    def transform(self, value: Any) -> Any:
        if value in [target for _, target in self.mapping]:
            return value  # already a target value
        if isinstance(value, str):
            key = value.lower() if self.ignore_case else value
            for source, target in self.mapping:
                if (source.lower() if self.ignore_case else source) == key:
                    return target
        if self.otherwise == "keep":
            return value
        raise _Cannot(f"{self.field} {value!r} is not in the map")

    def _data(self) -> dict[str, Any]:
        return {
            "map": dict(self.mapping),
            "ignore_case": self.ignore_case or None,
            "otherwise": self.otherwise if self.otherwise != "fail" else None,
        }

    def describe(self) -> str:
        pairs = ", ".join(f"{s!r} → {json.dumps(t)}" for s, t in self.mapping[:6])
        more = ", …" if len(self.mapping) > 6 else ""
        return f"map {self.field}: {pairs}{more}"


@dataclass(frozen=True, kw_only=True)
class Scale(ValueStep):
    op: ClassVar[str] = "scale"
    factor: float
    digits: int | None = None

    def transform(self, value: Any) -> Any:
        if isinstance(value, bool):
            raise _Cannot(f"{self.field} is a boolean")
        text = _scalar_text(value, self.field).strip()
        if not _NUMBER.match(text):
            raise _Cannot(f"{self.field} {text!r} is not a number")
        try:
            result = Decimal(text) * Decimal(repr(self.factor))
        except InvalidOperation:
            raise _Cannot(f"{self.field} {text!r} is not a number") from None
        if self.digits is not None:
            result = round(result, self.digits)
        if result == result.to_integral_value():
            return int(result)
        return float(result)

    def _data(self) -> dict[str, Any]:
        return {"factor": self.factor, "round": self.digits}

    def describe(self) -> str:
        rounding = f", rounded to {self.digits} decimals" if self.digits is not None else ""
        return f"multiply {self.field} by {_number_text(self.factor)}{rounding}"


# --- argument moves -------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Rename(Step):
    op: ClassVar[str] = "rename"
    source: str
    to: str
    location: str | None = None

    def names(self) -> tuple[str, ...]:
        return (self.source, self.to)

    def _apply(self, state: _State, context: RepairContext) -> None:
        args = state.arguments
        if self.source not in args:
            if self.to in args:
                return  # already renamed
            raise _Cannot(f"no argument {self.source!r}")
        if self.to in args:
            raise _Cannot(f"both {self.source!r} and {self.to!r} are given")
        args[self.to] = args.pop(self.source)
        where = (
            self.location
            or state.locations.pop(self.source, None)
            or state.tool_locations.get(self.source)
        )
        state.locations.pop(self.source, None)
        if where:
            state.locations[self.to] = where
        state.touch(self.source)
        state.touch(self.to)

    def _data(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.to, "in": self.location}

    def describe(self) -> str:
        where = f" (in the {self.location})" if self.location else ""
        return f"send {self.source} as {self.to}{where}"


@dataclass(frozen=True, kw_only=True)
class Drop(Step):
    op: ClassVar[str] = "drop"
    name: str

    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def _apply(self, state: _State, context: RepairContext) -> None:
        if self.name in state.arguments:
            del state.arguments[self.name]
            state.locations.pop(self.name, None)
            state.touch(self.name)

    def _data(self) -> dict[str, Any]:
        return {"name": self.name}

    def describe(self) -> str:
        return f"do not send {self.name}"


@dataclass(frozen=True, kw_only=True)
class Add(Step):
    """A new argument whose value comes from the query (a regex group), the customer id, a
    key fact (a dotted path in, or a regex group of, an earlier successful result) or a
    constant. An argument already given is kept unless ``overwrite``."""

    op: ClassVar[str] = "add"
    name: str
    source: str
    pattern: str | None = None
    group: int = 0
    path: str | None = None
    tool: str | None = None
    value: Any = None
    location: str | None = None
    overwrite: bool = False

    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def _apply(self, state: _State, context: RepairContext) -> None:
        if self.name in state.arguments and not self.overwrite:
            return
        found = self._find(context)
        if found is None:
            raise _Cannot(f"no value for {self.name} in the {self._where()}")
        state.arguments[self.name] = found
        if self.location:
            state.locations[self.name] = self.location
        state.touch(self.name)

    def _where(self) -> str:
        return {
            "query": "query",
            "customer": "customer id",
            "fact": f"key facts{f' of {self.tool}' if self.tool else ''}",
            "value": "step",
        }[self.source]

    def _find(self, context: RepairContext) -> Any:
        if self.source == "value":
            return self.value
        if self.source == "customer":
            return context.customer_id or None
        if self.source == "query":
            return self._match(context.query)
        for tool, text in reversed(context.facts):
            if self.tool and tool != self.tool:
                continue
            if self.path is not None:
                try:
                    data = json.loads(text)
                except ValueError:
                    continue
                found = dotted_get(data, self.path)
                if found is not None and not isinstance(found, dict | list):
                    return found
            else:
                found = self._match(text)
                if found is not None:
                    return found
        return None

    def _match(self, text: str) -> str | None:
        if not text:
            return None
        if self.pattern is None:
            return text.strip() or None
        try:
            match = regex_compiled(self.pattern).search(text[:MAX_VALUE_CHARS])
        except ValueError:  # stored before such patterns were refused: finds nothing
            return None
        return match.group(self.group) if match else None

    def _data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "from": self.source,
            "pattern": self.pattern,
            "group": self.group or None,
            "path": self.path,
            "tool": self.tool,
            "value": self.value,
            "in": self.location,
            "overwrite": self.overwrite or None,
        }

    def describe(self) -> str:
        source = {
            "query": "the customer's question"
            + (f" (matching {self.pattern!r})" if self.pattern else ""),
            "customer": "the customer id",
            "fact": (f"{self.path} of " if self.path else "")
            + f"the last result of {self.tool or 'any tool'}",
            "value": json.dumps(self.value),
        }[self.source]
        where = f" in the {self.location}" if self.location else ""
        return f"add {self.name}{where} from {source}"


STEP_TYPES: dict[str, type[Step]] = {
    cls.op: cls
    for cls in (
        Case,
        Trim,
        StripPrefix,
        StripSuffix,
        AddPrefix,
        AddSuffix,
        RegexReplace,
        ZeroPad,
        Separators,
        Coerce,
        DateFormat,
        EnumMap,
        Scale,
        Rename,
        Drop,
        Add,
    )
}


# --- applying -------------------------------------------------------------------------
@dataclass(frozen=True)
class RepairOutcome:
    """What a chain did: the new arguments (the old ones when it did not apply), the
    arguments it changed, where moved arguments go, and why it did not apply."""

    arguments: dict[str, Any]
    applied: bool
    changed: tuple[str, ...] = ()
    locations: dict[str, str] = field(default_factory=dict)
    reason: str = ""


def _run(
    steps: Sequence[Step],
    args: Mapping[str, Any],
    context: RepairContext | None,
    tool_locations: Mapping[str, str] | None,
) -> _State:
    context = context or RepairContext()
    state = _State(arguments=dict(args), tool_locations=tool_locations or {})
    for index, step in enumerate(steps):
        snapshot = (dict(state.arguments), dict(state.locations), list(state.changed))
        try:
            step._apply(state, context)
        except _Cannot as exc:
            if not step.optional:
                raise RepairNotApplicable(index, step.op, str(exc)) from None
            state.arguments, state.locations, state.changed = snapshot
    return state


def repair_apply(
    steps: Sequence[Step],
    args: Mapping[str, Any],
    context: RepairContext | None = None,
    *,
    tool_locations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Apply ``steps`` in order to a copy of ``args`` and return it; raises
    ``RepairNotApplicable`` (and changes nothing) when a step that is not optional cannot
    apply. ``tool_locations`` are the tool's parameter locations: a renamed argument keeps
    its old location unless the step names another."""
    return _run(steps, args, context, tool_locations).arguments


def repair_attempt(
    steps: Sequence[Step],
    args: Mapping[str, Any],
    context: RepairContext | None = None,
    *,
    tool_locations: Mapping[str, str] | None = None,
) -> RepairOutcome:
    """``repair_apply`` that reports instead of raising, with what changed and where moved
    arguments go."""
    try:
        state = _run(steps, args, context, tool_locations)
    except RepairNotApplicable as exc:
        return RepairOutcome(arguments=dict(args), applied=False, reason=str(exc))
    return RepairOutcome(
        arguments=state.arguments,
        applied=True,
        changed=tuple(state.changed),
        locations=state.locations,
    )


def repair_steps_describe(steps: Sequence[Step]) -> str:
    return "; then ".join(step.describe() for step in steps)


def repair_steps_data(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [step.as_data() for step in steps]


# --- parsing --------------------------------------------------------------------------
def repair_steps_parse(data: Any, *, field: str | None = None) -> list[Step]:
    """Validate step mappings into ``Step`` objects; ``field`` is the argument a value
    transform without its own ``field`` applies to. Raises ``ValueError`` naming the step
    and what is wrong with it."""
    if not isinstance(data, list | tuple):
        raise ValueError("steps must be a list of step mappings")
    if not data:
        raise ValueError("steps must not be empty")
    if len(data) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps")
    steps = []
    for index, item in enumerate(data):
        op = item.get("op") if isinstance(item, dict) else None
        label = f"step {index + 1}" + (f" ({op})" if op in _PARSERS else "")
        try:
            steps.append(_step_parse(item, field))
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
    return steps


_COMMON = ("op", "optional")


def _step_parse(item: Any, default_field: str | None) -> Step:
    if not isinstance(item, dict):
        raise ValueError("must be a mapping with an 'op'")
    op = item.get("op")
    if not isinstance(op, str) or op not in _PARSERS:
        raise ValueError(f"op must be one of {', '.join(_PARSERS)}")
    required, optional, build = _PARSERS[op]
    missing = [key for key in required if key not in item]
    if missing:
        raise ValueError("missing " + ", ".join(repr(key) for key in missing))
    unknown = sorted(set(item) - set(required) - set(optional) - set(_COMMON))
    if unknown:
        raise ValueError("unexpected " + ", ".join(repr(key) for key in unknown))
    flag = _bool(item, "optional")
    common: dict[str, Any] = {"optional": flag}
    if issubclass(STEP_TYPES[op], ValueStep):
        name = item.get("field", default_field)
        if name is None:
            raise ValueError("a value transform needs a 'field' (or the adapter's field)")
        common["field"] = _name(name, "field")
    return build(item, common)


def _bool(item: dict[str, Any], key: str, default: bool = False) -> bool:
    value = item.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _text(item: dict[str, Any], key: str, *, low: int = 1, high: int = MAX_AFFIX_CHARS) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not low <= len(value) <= high:
        raise ValueError(f"{key} must be a string of {low}..{high} characters")
    return value


def _int(item: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    value = item.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{key} must be an integer {low}..{high}")
    return value


def _choice(item: dict[str, Any], key: str, choices: Sequence[str]) -> str:
    value = item.get(key)
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}")
    return str(value)


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{key} must be an argument name (letters, digits, _ . -)")
    return value


def _location(item: dict[str, Any]) -> str | None:
    if "in" not in item:
        return None
    return _choice(item, "in", LOCATIONS)


def _strings(item: dict[str, Any], key: str, high: int) -> tuple[str, ...]:
    value = item.get(key)
    values = [value] if isinstance(value, str) else value
    if (
        not isinstance(values, list)
        or not values
        or len(values) > 8
        or not all(isinstance(v, str) and 1 <= len(v) <= high for v in values)
    ):
        raise ValueError(f"{key} must be a string or a list of strings of 1..{high} characters")
    return tuple(values)


def regex_problem(pattern: Any) -> str:
    """Why ``pattern`` may not run on arguments ('' when it may): too long, not a regex,
    a backreference, or a quantifier over something that itself repeats or alternates —
    the shapes that backtrack catastrophically. With no timeout available this check, plus
    the value length cap, is what keeps a proposed pattern cheap."""
    if not isinstance(pattern, str) or not pattern:
        return "pattern must be a non-empty string"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"pattern is longer than {MAX_PATTERN_CHARS} characters"
    try:
        tree = sre_parse.parse(pattern)
    except re.error as exc:
        return f"pattern is not a regex: {exc}"
    # The shape check says why a pattern would be slow in words a proposer can act on; RE2,
    # which runs every accepted pattern, bounds the time whatever the shape.
    return _tree_problem(tree, repeated=False) or regex_unsafe_reason(pattern)


_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _tree_problem(tree: Any, *, repeated: bool) -> str:
    for op, value in tree:
        name = str(op)
        if name in _REPEATS:
            _low, high, sub = value
            if repeated:
                return "nested quantifiers are not allowed (they can backtrack for ever)"
            if high != sre_parse.MAXREPEAT and high > MAX_REPEAT_BOUND:
                return f"a repeat bound above {MAX_REPEAT_BOUND} is not allowed"
            if _contains(sub, "BRANCH"):
                return "alternation under a quantifier is not allowed; use a character class"
            problem = _tree_problem(sub, repeated=True)
        elif name in {"GROUPREF", "GROUPREF_EXISTS"}:
            return "backreferences are not allowed"
        elif name == "SUBPATTERN":
            problem = _tree_problem(value[-1], repeated=repeated)
        elif name == "ATOMIC_GROUP":
            problem = _tree_problem(value, repeated=repeated)
        elif name in {"ASSERT", "ASSERT_NOT"}:
            problem = _tree_problem(value[1], repeated=repeated)
        elif name == "BRANCH":
            problem = next(
                (p for p in (_tree_problem(b, repeated=repeated) for b in value[1]) if p), ""
            )
        else:
            problem = ""
        if problem:
            return problem
    return ""


def _contains(tree: Any, wanted: str) -> bool:
    for op, value in tree:
        name = str(op)
        if name == wanted:
            return True
        children: list[Any] = []
        if name in _REPEATS:
            children = [value[2]]
        elif name == "SUBPATTERN":
            children = [value[-1]]
        elif name == "ATOMIC_GROUP":
            children = [value]
        elif name in {"ASSERT", "ASSERT_NOT"}:
            children = [value[1]]
        elif name == "BRANCH":
            children = list(value[1])
        if any(_contains(child, wanted) for child in children):
            return True
    return False


def _pattern(item: dict[str, Any], key: str = "pattern") -> str:
    problem = regex_problem(item.get(key))
    if problem:
        raise ValueError(problem if key == "pattern" else problem.replace("pattern", key, 1))
    return str(item[key])


def _date_pattern(value: Any, key: str) -> str:
    if not isinstance(value, str) or not 2 <= len(value) <= 40:
        raise ValueError(f"{key} must be a strftime pattern of 2..40 characters")
    directives = re.findall(r"%(.)", value)
    if not directives:
        raise ValueError(f"{key} has no strftime directive (e.g. %Y-%m-%d)")
    bad = sorted({d for d in directives if d not in DATE_DIRECTIVES})
    if bad or (value.endswith("%") and not value.endswith("%%")):
        shown = ", ".join(f"%{d}" for d in bad) or "a lone %"
        raise ValueError(f"{key} uses {shown}; allowed: %" + " %".join(sorted(DATE_DIRECTIVES)))
    return value


def _parse_case(item: dict[str, Any], common: dict[str, Any]) -> Step:
    return Case(to=_choice(item, "to", CASES), **common)


def _parse_trim(item: dict[str, Any], common: dict[str, Any]) -> Step:
    chars = _text(item, "chars", high=10) if "chars" in item else None
    return Trim(chars=chars, **common)


def _affix(cls: type[Affix]) -> Callable[[dict[str, Any], dict[str, Any]], Step]:
    def build(item: dict[str, Any], common: dict[str, Any]) -> Step:
        return cls(value=_text(item, "value"), ignore_case=_bool(item, "ignore_case"), **common)

    return build


def _parse_regex(item: dict[str, Any], common: dict[str, Any]) -> Step:
    pattern = _pattern(item)
    replacement = item.get("replacement", "")
    if not isinstance(replacement, str) or len(replacement) > MAX_AFFIX_CHARS:
        raise ValueError(f"replacement must be a string of at most {MAX_AFFIX_CHARS} characters")
    try:
        re.compile(pattern).sub(replacement, "")
        regex_compiled(pattern).sub(replacement, "")
    except (re.error, re2.error, IndexError) as exc:
        raise ValueError(f"replacement is invalid: {exc}") from None
    return RegexReplace(
        pattern=pattern,
        replacement=replacement,
        count=_int(item, "count", 0, 100, default=0),
        must_match=_bool(item, "must_match"),
        **common,
    )


def _parse_zero_pad(item: dict[str, Any], common: dict[str, Any]) -> Step:
    char = item.get("char", "0")
    if not isinstance(char, str) or len(char) != 1:
        raise ValueError("char must be one character")
    return ZeroPad(width=_int(item, "width", 1, MAX_PAD_WIDTH), char=char, **common)


def _parse_separators(item: dict[str, Any], common: dict[str, Any]) -> Step:
    source = _strings(item, "from", 3)
    to = item.get("to")
    if not isinstance(to, str) or len(to) > 3:
        raise ValueError("to must be a string of 0..3 characters")
    if to in source:
        raise ValueError("to must differ from every separator in from")
    return Separators(source=source, to=to, **common)


def _parse_coerce(item: dict[str, Any], common: dict[str, Any]) -> Step:
    to = _choice(item, "to", COERCIONS)
    digits_only = _bool(item, "digits_only")
    if digits_only and to != "integer":
        raise ValueError("digits_only applies to an integer coercion only")
    return Coerce(to=to, digits_only=digits_only, **common)


def _parse_date(item: dict[str, Any], common: dict[str, Any]) -> Step:
    sources = item.get("from")
    listed = [sources] if isinstance(sources, str) else sources
    if not isinstance(listed, list) or not 1 <= len(listed) <= 8:
        raise ValueError("from must be a strftime pattern or a list of 1..8 of them")
    source = tuple(_date_pattern(value, "from") for value in listed)
    return DateFormat(source=source, to=_date_pattern(item.get("to"), "to"), **common)


def _parse_enum(item: dict[str, Any], common: dict[str, Any]) -> Step:
    mapping = item.get("map")
    if not isinstance(mapping, dict) or not 1 <= len(mapping) <= MAX_ENUM_ENTRIES:
        raise ValueError(f"map must be a mapping of 1..{MAX_ENUM_ENTRIES} entries")
    for key, value in mapping.items():
        if not isinstance(key, str) or len(key) > 100:
            raise ValueError("map keys must be strings of at most 100 characters")
        if not (value is None or isinstance(value, str | int | float | bool)):
            raise ValueError(f"map value for {key!r} must be a string, number or boolean")
    otherwise = item.get("otherwise", "fail")
    if otherwise not in ("fail", "keep"):
        raise ValueError("otherwise must be fail or keep")
    return EnumMap(
        mapping=tuple(mapping.items()),
        ignore_case=_bool(item, "ignore_case"),
        otherwise=otherwise,
        **common,
    )


def _parse_scale(item: dict[str, Any], common: dict[str, Any]) -> Step:
    factor = item.get("factor")
    if (
        not isinstance(factor, int | float)
        or isinstance(factor, bool)
        or not math.isfinite(factor)
        or factor == 0
        or not 1e-9 <= abs(factor) <= 1e9
    ):
        raise ValueError("factor must be a non-zero finite number between 1e-9 and 1e9")
    digits = _int(item, "round", 0, 10) if "round" in item else None
    return Scale(factor=factor, digits=digits, **common)


def _parse_rename(item: dict[str, Any], common: dict[str, Any]) -> Step:
    source, to = _name(item.get("from"), "from"), _name(item.get("to"), "to")
    if source == to:
        raise ValueError("from and to must differ")
    return Rename(source=source, to=to, location=_location(item), **common)


def _parse_drop(item: dict[str, Any], common: dict[str, Any]) -> Step:
    return Drop(name=_name(item.get("name"), "name"), **common)


def _parse_add(item: dict[str, Any], common: dict[str, Any]) -> Step:
    name = _name(item.get("name"), "name")
    source = _choice(item, "from", SOURCES)
    allowed = {
        "query": {"pattern", "group"},
        "customer": set(),
        "fact": {"pattern", "group", "path", "tool"},
        "value": {"value"},
    }[source]
    extra = sorted({"pattern", "group", "path", "tool", "value"} & set(item) - allowed)
    if extra:
        raise ValueError(f"{', '.join(extra)} cannot be used with from={source}")
    pattern = _pattern(item) if "pattern" in item else None
    group = _int(item, "group", 0, 9, default=0)
    if pattern is not None and group > re.compile(pattern).groups:
        raise ValueError(f"group {group} does not exist in the pattern")
    path = item.get("path")
    if path is not None and (not isinstance(path, str) or not 1 <= len(path) <= 200):
        raise ValueError("path must be a dotted path such as results.0.sku")
    tool = _name(item["tool"], "tool") if "tool" in item else None
    if source == "fact" and (path is None) == (pattern is None):
        raise ValueError("a fact needs exactly one of path or pattern")
    if source == "value":
        if "value" not in item:
            raise ValueError("from=value needs 'value'")
        if not (item["value"] is None or isinstance(item["value"], str | int | float | bool)):
            raise ValueError("value must be a string, number or boolean")
    return Add(
        name=name,
        source=source,
        pattern=pattern,
        group=group,
        path=path,
        tool=tool,
        value=item.get("value"),
        location=_location(item),
        overwrite=_bool(item, "overwrite"),
        **common,
    )


_VALUE_KEYS = ("field",)
_PARSERS: dict[
    str, tuple[tuple[str, ...], tuple[str, ...], Callable[[dict[str, Any], dict[str, Any]], Step]]
] = {
    "case": (("to",), _VALUE_KEYS, _parse_case),
    "trim": ((), (*_VALUE_KEYS, "chars"), _parse_trim),
    "strip_prefix": (("value",), (*_VALUE_KEYS, "ignore_case"), _affix(StripPrefix)),
    "strip_suffix": (("value",), (*_VALUE_KEYS, "ignore_case"), _affix(StripSuffix)),
    "add_prefix": (("value",), (*_VALUE_KEYS, "ignore_case"), _affix(AddPrefix)),
    "add_suffix": (("value",), (*_VALUE_KEYS, "ignore_case"), _affix(AddSuffix)),
    "regex_replace": (
        ("pattern",),
        (*_VALUE_KEYS, "replacement", "count", "must_match"),
        _parse_regex,
    ),
    "zero_pad": (("width",), (*_VALUE_KEYS, "char"), _parse_zero_pad),
    "separators": (("from", "to"), _VALUE_KEYS, _parse_separators),
    "coerce": (("to",), (*_VALUE_KEYS, "digits_only"), _parse_coerce),
    "date_format": (("from", "to"), _VALUE_KEYS, _parse_date),
    "enum_map": (("map",), (*_VALUE_KEYS, "ignore_case", "otherwise"), _parse_enum),
    "scale": (("factor",), (*_VALUE_KEYS, "round"), _parse_scale),
    "rename": (("from", "to"), ("in",), _parse_rename),
    "drop": (("name",), (), _parse_drop),
    "add": (
        ("name", "from"),
        ("pattern", "group", "path", "tool", "value", "in", "overwrite"),
        _parse_add,
    ),
}


# --- helpers --------------------------------------------------------------------------
def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _number_text(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _scalar_text(value: Any, name: str) -> str:
    """A string, or a number written as text; anything else cannot be edited as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number_text(value)
    raise _Cannot(f"{name} is {_kind(value)}, not text or a number")


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


# --- for constrained decoding ---------------------------------------------------------
_STRING: dict[str, Any] = {"type": "string"}
_KEY_SCHEMAS: dict[str, dict[str, Any]] = {
    "optional": {"type": "boolean"},
    "ignore_case": {"type": "boolean"},
    "must_match": {"type": "boolean"},
    "digits_only": {"type": "boolean"},
    "overwrite": {"type": "boolean"},
    "width": {"type": "integer"},
    "count": {"type": "integer"},
    "group": {"type": "integer"},
    "round": {"type": "integer"},
    "factor": {"type": "number"},
    "map": {"type": "object"},
    "in": {"type": "string", "enum": list(LOCATIONS)},
    "otherwise": {"type": "string", "enum": ["fail", "keep"]},
}
_OP_KEY_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("case", "to"): {"type": "string", "enum": list(CASES)},
    ("coerce", "to"): {"type": "string", "enum": list(COERCIONS)},
    ("add", "from"): {"type": "string", "enum": list(SOURCES)},
    ("add", "value"): {"type": ["string", "number", "boolean"]},
    ("separators", "from"): {"anyOf": [_STRING, {"type": "array", "items": _STRING}]},
    ("date_format", "from"): {"anyOf": [_STRING, {"type": "array", "items": _STRING}]},
}


def repair_steps_json_schema() -> dict[str, Any]:
    """A JSON Schema of a step list (one object shape per op), so a model's typed output
    can cover the whole vocabulary; ``repair_steps_parse`` still checks the values."""
    shapes = []
    for op, (required, optional, _build) in _PARSERS.items():
        properties: dict[str, Any] = {"op": {"type": "string", "enum": [op]}}
        for key in (*required, *optional, "optional"):
            properties[key] = _OP_KEY_SCHEMAS.get((op, key)) or _KEY_SCHEMAS.get(key, _STRING)
        shapes.append(
            {
                "type": "object",
                "properties": properties,
                "required": ["op", *required],
                "additionalProperties": False,
            }
        )
    return {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": {"anyOf": shapes}}
