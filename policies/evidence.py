"""Enumerate repair chains for one refused value and keep the first the evidence accepts.

The evidence is what an engineer would read: the hints of the API's error body
(``policies.error_bodies``: expected type, case, pattern, format, allowed values, length,
a prefix to add or drop) and the values the same tool accepted in recent successful calls.
Candidates come from the repair vocabulary (``agents.repairs``), simplest first: one step,
then two. A candidate fits only if its result satisfies every piece of evidence there is —
and there must be some: with no hint and no differently-shaped accepted example, nothing
is proposed. The replay still has the last word.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.policy_runtime import TRANSFORMS
from agents.repairs import (
    RepairNotApplicable,
    regex_problem,
    repair_apply,
    repair_steps_parse,
)
from policies.error_bodies import ErrorHints, strftime_from_format

# Date layouts tried on a refused value when the evidence asks for a date in another one.
DATE_FORMATS = (
    "%Y-%m-%d",
    "%d/%m/%Y",
    "%m/%d/%Y",
    "%d.%m.%Y",
    "%Y/%m/%d",
    "%d-%m-%Y",
    "%Y%m%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
)
_NAMED_DATE = {"date": "%Y-%m-%d", "date-time": "%Y-%m-%dT%H:%M:%S"}
SEPARATORS = ("-", "_", " ", ".", "/")
MAX_EXAMPLES = 50


def value_shape(value: Any) -> str:
    """A value's look: ``#W1234567`` → ``#A9{7}``, ``ab_cd`` → ``a_a``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if not isinstance(value, str):
        return type(value).__name__
    # Letter runs collapse (words vary in length); digit runs keep their length (ids and
    # dates are fixed-width).
    out: list[str] = []
    for char in value[:200]:
        kind = "9" if char.isdigit() else "a" if char.islower() else "A" if char.isupper() else char
        if out and out[-1] == kind and kind in "aA":
            continue
        out.append(kind)
    return re.sub(r"9+", lambda m: f"9{{{len(m.group(0))}}}", "".join(out))


@dataclass(frozen=True)
class Target:
    """What the repaired value must look like: the error's hints and accepted examples
    whose shape differs from the refused value's."""

    hints: ErrorHints = field(default_factory=ErrorHints)
    examples: tuple[Any, ...] = ()
    original_type: str = ""

    @classmethod
    def build(cls, value: Any, hints: ErrorHints, accepted: Sequence[Any]) -> Target:
        refused = value_shape(value)
        examples = tuple(
            example
            for example in list(accepted)[:MAX_EXAMPLES]
            if example is not None and value_shape(example) != refused
        )
        return cls(hints=hints, examples=examples, original_type=_json_type(value))

    def has_evidence(self) -> bool:
        return bool(self.examples) or bool(self._hint_checks("x"))

    def fits(self, candidate: Any) -> bool:
        if not self.hints.expected_type:
            # A change of JSON type needs evidence of its own: the hint, or examples.
            types = {_json_type(e) for e in self.examples} or {self.original_type}
            if _json_type(candidate) not in types:
                return False
        checks = self._hint_checks(candidate)
        if self.examples:
            checks.append(self._like_examples(candidate))
        return bool(checks) and all(checks)

    def date_target(self) -> str | None:
        """The strftime layout the evidence asks for, if it asks for a date."""
        fmt = self.hints.expected_format
        layout = _NAMED_DATE.get(fmt or "") or strftime_from_format(fmt)
        if layout:
            return layout
        strings = [e for e in self.examples if isinstance(e, str)]
        for candidate in DATE_FORMATS:
            if strings and all(_parses(e, candidate) for e in strings):
                return candidate
        return None

    def _hint_checks(self, value: Any) -> list[bool]:
        hints, checks = self.hints, []
        text = value if isinstance(value, str) else None
        if hints.expected_type:
            checks.append(
                _json_type(value) == hints.expected_type
                or (hints.expected_type == "number" and _json_type(value) == "integer")
            )
        if hints.expected_case:
            letters = re.sub(r"[^A-Za-z]", "", text or "")
            want = letters.lower() if hints.expected_case == "lower" else letters.upper()
            checks.append(bool(letters) and letters == want)
        if hints.expected_pattern and not regex_problem(hints.expected_pattern):
            checks.append(re.search(hints.expected_pattern, str(value)) is not None)
        if hints.allowed_values:
            checks.append(str(value) in hints.allowed_values)
        if hints.length is not None:
            checks.append(len(str(value)) == hints.length)
        if hints.required_prefix:
            checks.append(str(value).startswith(hints.required_prefix))
        if hints.forbidden_prefix:
            checks.append(not str(value).lower().startswith(hints.forbidden_prefix.lower()))
        if hints.separator:
            others = [s for s in SEPARATORS if s != hints.separator]
            checks.append(
                text is not None
                and hints.separator in text
                and not any(other in text for other in others)
            )
        layout = _NAMED_DATE.get(hints.expected_format or "") or strftime_from_format(
            hints.expected_format
        )
        if layout:
            checks.append(text is not None and _parses(text, layout))
        return checks

    def _like_examples(self, value: Any) -> bool:
        shape = value_shape(value)
        same = [e for e in self.examples if value_shape(e) == shape]
        if not same:
            return False
        lengths = {len(str(e)) for e in same}
        # Fixed-width examples (ids): the width is part of the format.
        return len(lengths) > 1 or len(str(value)) in lengths


def candidate_chains(value: Any, target: Target) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(named transform or '', steps without a field), simplest first; may repeat."""
    for name in ("lower", "upper", "strip", "numeric_string_to_int", "digits_to_int"):
        yield name, list(TRANSFORMS[name])
    singles = list(_single_steps(value, target))
    for step in singles:
        yield "", [step]
    for first in singles:
        if first["op"] not in ("strip_prefix", "strip_suffix", "trim", "case", "separators"):
            continue
        try:
            middle = repair_apply(repair_steps_parse([first], field="v"), {"v": value})["v"]
        except RepairNotApplicable:
            continue
        for second in _single_steps(middle, target):
            if second["op"] != first["op"]:
                yield "", [first, second]


def _single_steps(value: Any, target: Target) -> Iterator[dict[str, Any]]:
    yield {"op": "coerce", "to": "integer"}
    yield {"op": "coerce", "to": "number"}
    yield {"op": "coerce", "to": "string"}
    text = value if isinstance(value, str) else str(value)
    for prefix in _leading_runs(text):
        yield {"op": "strip_prefix", "value": prefix}
    for suffix in _trailing_runs(text):
        yield {"op": "strip_suffix", "value": suffix}
    for prefix in _wanted_prefixes(target):
        yield {"op": "add_prefix", "value": prefix}
    for width in _wanted_widths(target):
        yield {"op": "zero_pad", "width": width}
    present = [s for s in SEPARATORS if s in text]
    wanted = target.hints.separator
    targets = ("", *SEPARATORS, *((wanted,) if wanted and wanted not in SEPARATORS else ()))
    for source in present:
        for to in targets:
            if to != source:
                yield {"op": "separators", "from": source, "to": to}
    layout = target.date_target()
    if layout and isinstance(value, str):
        for source in DATE_FORMATS:
            if source != layout and _parses(value, source):
                yield {"op": "date_format", "from": source, "to": layout}
    yield {"op": "case", "to": "title"}
    for allowed in target.hints.allowed_values or _string_examples(target):
        if isinstance(value, str) and _loose(allowed) == _loose(value) and allowed != value:
            yield {"op": "enum_map", "map": {value: allowed}}


def chains_for(
    value: Any, target: Target, *, limit: int = 3
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Up to ``limit`` candidates whose results the target accepts, simplest first; two
    chains with the same result count once. The evidence can fit more than one repair
    ("must start with 'ORD-'": add the prefix, or replace '#W' by it); the replay decides."""
    if not target.has_evidence() or target.fits(value):
        return
    results: list[Any] = []
    for name, steps in candidate_chains(value, target):
        try:
            parsed = repair_steps_parse(steps, field="v")
            result = repair_apply(parsed, {"v": value})["v"]
        except (ValueError, RepairNotApplicable):
            continue
        if result == value or result in results or not target.fits(result):
            continue
        results.append(result)
        yield name, steps
        if len(results) >= limit:
            return


def chain_for(value: Any, target: Target) -> tuple[str, list[dict[str, Any]]] | None:
    """The first candidate whose result the target accepts (and that changes the value)."""
    return next(chains_for(value, target, limit=1), None)


# --- helpers ------------------------------------------------------------------------
def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _parses(text: str, layout: str) -> bool:
    try:
        datetime.strptime(text, layout)
    except ValueError:
        return False
    return True


def _leading_runs(text: str) -> list[str]:
    """Prefixes made of the characters before the first digit (or of punctuation)."""
    match = re.match(r"^([^0-9]{1,8})\d", text) or re.match(r"^([^A-Za-z0-9]{1,8})", text)
    if not match:
        return []
    run = match.group(1)
    return [run[:i] for i in range(len(run), 0, -1)]


def _trailing_runs(text: str) -> list[str]:
    match = re.search(r"\d([^0-9]{1,8})$", text) or re.search(r"([^A-Za-z0-9]{1,8})$", text)
    if not match:
        return []
    run = match.group(1)
    return [run[-i:] for i in range(len(run), 0, -1)]


def _string_examples(target: Target) -> list[str]:
    return [e for e in target.examples if isinstance(e, str)]


def _wanted_prefixes(target: Target) -> list[str]:
    found = []
    if target.hints.required_prefix:
        found.append(target.hints.required_prefix)
    strings = _string_examples(target)
    if strings:
        common = strings[0]
        for example in strings[1:]:
            while not example.startswith(common):
                common = common[:-1]
        common = re.sub(r"[0-9].*$", "", common, flags=re.DOTALL)
        if common and len(common) <= 8:
            found.append(common)
    return found


def _wanted_widths(target: Target) -> list[int]:
    widths = []
    if target.hints.length is not None:
        widths.append(target.hints.length)
    digit_examples = {len(e) for e in _string_examples(target) if e.isdigit()}
    if len(digit_examples) == 1:
        widths.append(digit_examples.pop())
    return [w for w in widths if 1 <= w <= 64]


def _loose(text: str) -> str:
    return re.sub(r"[\s_\-.]", "", text).lower()
