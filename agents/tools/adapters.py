"""Semantic-gap adapters: repair tool arguments that miss the schema only in form.

Models often send the right value in the wrong shape ("42" for an integer, "Shipped!" for
the enum member "shipped", an epoch for a date-time). The executor validates arguments
against the tool's JSON Schema (Draft 2020-12); when that fails, ``adapt_arguments`` tries
named adapters on each offending value, keeps a conversion only if the result satisfies
that value's sub-schema, and records every conversion so the trace shows what was changed.
Missing or extra fields are never invented or dropped: those issues are reported back.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema.validators import extend
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from agents.safe_regex import regex_search

JsonPath = tuple[str | int, ...]
# An adapter proposes replacement values in order of preference; an empty list means it
# does not apply. The caller keeps the first proposal that validates.
Adapter = Callable[[Any, Mapping[str, Any]], list[Any]]

MAX_MESSAGE_CHARS = 300
NUMERIC_PATTERN = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?$")
TRUE_WORDS = frozenset({"true", "yes", "y", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "n", "off", "0"})
EPOCH_FORMATS = frozenset({"unix-time", "epoch"})
ISO_FORMATS = frozenset({"date-time", "date"})
RFC3339_DATE_TIME_PATTERN = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)
DATE_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class AdapterFiring:
    """One value an adapter changed; ``path`` is slash-separated (``items/0/qty``)."""

    adapter: str
    path: str
    before: Any
    after: Any


@dataclass(frozen=True)
class ValidationIssue:
    """One way the arguments miss the schema, named by its JSON Schema keyword."""

    path: str
    validator: str
    message: str
    expected_type: str | None


def validate_arguments(*, schema: Mapping[str, Any], arguments: Any) -> list[ValidationIssue]:
    """Validate ``arguments`` against ``schema`` and return the issues in a stable order."""
    issues: list[ValidationIssue] = []
    for error in _schema_errors(schema, arguments):
        issues.extend(_issues_from_error(error))
    return sorted(set(issues), key=lambda issue: (issue.path, issue.validator, issue.message))


def adapt_arguments(
    *,
    schema: Mapping[str, Any],
    arguments: Mapping[str, Any],
    enabled: Iterable[str] | None = None,
) -> tuple[dict[str, Any], list[AdapterFiring], list[ValidationIssue]]:
    """Repair the values of ``arguments`` that fail ``schema``, using the enabled adapters.

    For every invalid value the adapters are tried in ``ADAPTERS`` order and the first
    proposal that satisfies the value's sub-schema is applied. ``arguments`` is not
    mutated. Returns the adapted copy, the firings, and the issues that remain.
    """
    adapter_names = _enabled_adapter_names(enabled)
    adapted: dict[str, Any] = copy.deepcopy(dict(arguments))
    firings: list[AdapterFiring] = []

    errors_by_path: dict[JsonPath, ValidationError] = {}
    for error in _schema_errors(schema, adapted):
        path = tuple(error.absolute_path)
        # "required" has nothing to convert, and the root is the whole argument object.
        if error.validator != "required" and path:
            errors_by_path.setdefault(path, error)

    for path in sorted(errors_by_path, key=_path_sort_key):
        error = errors_by_path[path]
        sub_schema = _subschema_at(schema, path)
        if sub_schema is None and isinstance(error.schema, Mapping):
            sub_schema = error.schema
        if sub_schema is None:
            continue
        before = _value_at(adapted, path)
        for name in adapter_names:
            after = _first_valid_proposal(ADAPTERS[name], before, sub_schema)
            if after is not _NO_PROPOSAL:
                _set_value_at(adapted, path, after)
                firings.append(
                    AdapterFiring(adapter=name, path=_format_path(path), before=before, after=after)
                )
                break

    return adapted, firings, validate_arguments(schema=schema, arguments=adapted)


# --- adapters ------------------------------------------------------------------------------


def adapt_numeric_string_to_int(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """``"42"``, ``"42.0"`` or ``3.0`` become an int where the schema wants an integer."""
    if "integer" not in _schema_types(schema):
        return []
    if isinstance(value, float) and value.is_integer():
        return [int(value)]
    number = _parse_decimal(value)
    if number is not None and number == number.to_integral_value():
        return [int(number)]
    return []


def adapt_numeric_string_to_number(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """``"3.5"`` becomes 3.5 (and ``"4"`` becomes 4) where the schema wants a number."""
    if "number" not in _schema_types(schema):
        return []
    number = _parse_decimal(value)
    if number is None:
        return []
    if number == number.to_integral_value():
        return [int(number)]
    return [float(number)]


def adapt_int_to_string(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """``42`` becomes ``"42"`` where the schema wants a string."""
    if "string" not in _schema_types(schema) or not _is_number(value):
        return []
    return [str(value)]


def adapt_bool_coercion(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """``"yes"``, ``"TRUE"``, ``1`` become True (``"no"``, ``"0"``, ``0`` become False)."""
    if "boolean" not in _schema_types(schema):
        return []
    if _is_number(value) and value in (0, 1):
        return [bool(value)]
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return [True]
        if word in FALSE_WORDS:
            return [False]
    return []


def adapt_iso8601_to_epoch(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """An ISO 8601 string becomes epoch seconds for an integer marked as a unix time."""
    types = _schema_types(schema)
    if not ({"integer", "number"} & types) or _declared_format(schema) not in EPOCH_FORMATS:
        return []
    # A bare number is left to numeric_string_to_int: fromisoformat reads some digit runs
    # as compact dates.
    if not isinstance(value, str) or _parse_decimal(value) is not None:
        return []
    moment = _parse_iso8601(value)
    if moment is None:
        return []
    return [int(moment.timestamp())]


def adapt_epoch_to_iso8601(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """Epoch seconds become an ISO 8601 UTC string for a date-time or date string."""
    schema_format = _declared_format(schema)
    if "string" not in _schema_types(schema) or schema_format not in ISO_FORMATS:
        return []
    if _is_number(value):
        seconds: Decimal | None = Decimal(value)
    else:
        seconds = _parse_decimal(value)
    if seconds is None:
        return []
    try:
        moment = datetime.fromtimestamp(float(seconds), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return []
    if schema_format == "date":
        return [moment.strftime("%Y-%m-%d")]
    return [moment.strftime("%Y-%m-%dT%H:%M:%SZ")]


def adapt_trim_whitespace(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """Strip surrounding whitespace; failing that, also collapse inner runs of whitespace."""
    if not isinstance(value, str):
        return []
    stripped = value.strip()
    collapsed = " ".join(stripped.split())
    return [candidate for candidate in dict.fromkeys((stripped, collapsed)) if candidate != value]


def adapt_enum_normalise(value: Any, schema: Mapping[str, Any]) -> list[Any]:
    """Match an enum member ignoring case and punctuation (``"Shipped!"`` -> ``"shipped"``)."""
    members = schema.get("enum")
    if not isinstance(value, str) or not isinstance(members, list):
        return []
    key = _enum_key(value)
    matches = [member for member in members if isinstance(member, str) and _enum_key(member) == key]
    # Two members that differ only in case or punctuation make the intent ambiguous.
    return matches if len(matches) == 1 and key else []


# The order is the preference order: specific conversions before generic ones, so that an
# epoch aimed at a date-time string becomes an ISO date rather than a digit string.
ADAPTERS: Mapping[str, Adapter] = MappingProxyType(
    {
        "trim_whitespace": adapt_trim_whitespace,
        "enum_normalise": adapt_enum_normalise,
        "iso8601_to_epoch": adapt_iso8601_to_epoch,
        "epoch_to_iso8601": adapt_epoch_to_iso8601,
        "numeric_string_to_int": adapt_numeric_string_to_int,
        "numeric_string_to_number": adapt_numeric_string_to_number,
        "bool_coercion": adapt_bool_coercion,
        "int_to_string": adapt_int_to_string,
    }
)


# --- validation --------------------------------------------------------------------------

_FORMAT_CHECKER = FormatChecker(formats=())


@_FORMAT_CHECKER.checks("date-time", raises=ValueError)
def _is_date_time(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    # RFC 3339 needs a date, a time and an offset; fromisoformat alone accepts less.
    if not RFC3339_DATE_TIME_PATTERN.match(instance):
        return False
    datetime.fromisoformat(instance.upper().replace("Z", "+00:00"))
    return True


@_FORMAT_CHECKER.checks("date", raises=ValueError)
def _is_date(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    if not DATE_PATTERN.match(instance):
        return False
    date.fromisoformat(instance)
    return True


def _is_strict_integer(checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's ``pattern`` on RE2 (``agents.safe_regex``): a validation rule the
    learning loop added can carry a pattern, and the value it runs on is the model's."""
    if validator.is_type(instance, "string") and not regex_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# JSON Schema counts 3.0 as an integer, but a tool handed 3.0 sends "3.0" in a URL or a
# float in a body; treating it as a type error lets numeric_string_to_int send 3.
_ArgumentValidator = extend(
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
)


def _no_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class


# Schemas come from admins, imported documents, reviewers and the learning loop's model:
# a reference is followed only inside the schema. Without a registry, jsonschema would
# fetch any other URI itself (http, file), past the SSRF guard and the allow-list.
OFFLINE_REGISTRY: Registry[Any] = Registry(retrieve=_no_retrieval)  # type: ignore[call-arg]
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _validator(schema: Mapping[str, Any]) -> Any:
    # Only the date formats are asserted: they are what the date adapters target, and the
    # other formats stay annotations as Draft 2020-12 specifies by default.
    return _ArgumentValidator(schema, format_checker=_FORMAT_CHECKER, registry=OFFLINE_REGISTRY)


def _schema_errors(schema: Mapping[str, Any], instance: Any) -> list[ValidationError]:
    """The validation errors; a reference the schema cannot resolve offline is one of them
    (a stored schema saved before references were checked), not a crash of the run."""
    try:
        return list(_validator(schema).iter_errors(instance))
    except Unresolvable as exc:
        return [
            ValidationError(
                f"the schema refers to {_clip(str(getattr(exc, 'ref', '')))!r}, which is not "
                "followed: only references inside the schema ('#/...') are",
                validator="$ref",
                instance=instance,
                schema=schema,
            )
        ]


def schema_references_problems(schema: Any, where: str = "schema") -> list[str]:
    """The references of ``schema`` that point outside it (``$ref``, ``$dynamicRef``): a
    validator follows only ``#...`` ones, so any other is refused where schemas are saved."""
    problems: list[str] = []
    stack: list[Any] = [schema]
    while stack and len(problems) < 5:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, Mapping):
            for keyword in _REFERENCE_KEYWORDS:
                ref = node.get(keyword)
                if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
                    problems.append(
                        f"{where}: only references inside the schema ('#/...') are allowed; "
                        f"{keyword} {_clip(str(ref))!r} is not"
                    )
            stack.extend(node.values())
    return problems


def _issues_from_error(error: ValidationError) -> Iterator[ValidationIssue]:
    path = tuple(error.absolute_path)
    validator = str(error.validator)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if validator == "required" and isinstance(error.instance, Mapping):
        properties = schema.get("properties", {})
        for name in _missing_required(error):
            yield ValidationIssue(
                path=_format_path((*path, name)),
                validator=validator,
                message=_clip(error.message),
                expected_type=_type_label(properties.get(name, {})),
            )
        return
    if validator == "additionalProperties" and isinstance(error.instance, Mapping):
        for name in _unexpected_properties(error.instance, schema):
            yield ValidationIssue(
                path=_format_path((*path, name)),
                validator=validator,
                message=_clip(f"Additional property {name!r} is not allowed"),
                expected_type=None,
            )
        return
    yield ValidationIssue(
        path=_format_path(path),
        validator=validator,
        message=_clip(error.message),
        expected_type=_type_label(schema),
    )


def _missing_required(error: ValidationError) -> list[str]:
    # jsonschema reports one error per missing name but exposes the name only in the message.
    missing = [name for name in error.validator_value if name not in error.instance]
    named = [name for name in missing if error.message.startswith(repr(name))]
    return named or missing


def _unexpected_properties(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return sorted(
        name
        for name in instance
        if name not in properties and not any(re.search(pattern, name) for pattern in patterns)
    )


def _type_label(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if isinstance(declared, str):
        return declared
    if isinstance(declared, list) and declared:
        return "|".join(str(item) for item in declared)
    return None


def _clip(message: str) -> str:
    # Messages quote the offending value, which can be arbitrarily long.
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


# --- paths and sub-schemas ---------------------------------------------------------------

_NO_PROPOSAL = object()


def _enabled_adapter_names(enabled: Iterable[str] | None) -> list[str]:
    if enabled is None:
        return list(ADAPTERS)
    wanted = set(enabled)
    unknown = wanted - set(ADAPTERS)
    if unknown:
        raise ValueError(f"unknown adapters: {', '.join(sorted(unknown))}")
    return [name for name in ADAPTERS if name in wanted]


def _first_valid_proposal(adapter: Adapter, value: Any, schema: Mapping[str, Any]) -> Any:
    validator = _validator(schema)
    for candidate_schema in _candidate_schemas(schema):
        for proposal in adapter(value, candidate_schema):
            try:
                if validator.is_valid(proposal):
                    return proposal
            except Unresolvable:
                return _NO_PROPOSAL
    return _NO_PROPOSAL


def _candidate_schemas(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The schema itself, then each ``anyOf``/``oneOf`` branch an adapter could aim at."""
    yield schema
    for keyword in ("anyOf", "oneOf"):
        for branch in schema.get(keyword, []):
            if isinstance(branch, Mapping):
                yield branch


def _subschema_at(schema: Mapping[str, Any], path: JsonPath) -> Mapping[str, Any] | None:
    node: Any = schema
    for part in path:
        if not isinstance(node, Mapping):
            return None
        if isinstance(part, int):
            prefix_items = node.get("prefixItems")
            if isinstance(prefix_items, list) and part < len(prefix_items):
                node = prefix_items[part]
            else:
                node = node.get("items")
            continue
        properties = node.get("properties", {})
        if part in properties:
            node = properties[part]
            continue
        pattern_matches = [
            sub_schema
            for pattern, sub_schema in node.get("patternProperties", {}).items()
            if re.search(pattern, part)
        ]
        node = pattern_matches[0] if pattern_matches else node.get("additionalProperties")
    return node if isinstance(node, Mapping) else None


def _value_at(document: Any, path: JsonPath) -> Any:
    for part in path:
        document = document[part]
    return document


def _set_value_at(document: Any, path: JsonPath, value: Any) -> None:
    *parents, last = path
    _value_at(document, tuple(parents))[last] = value


def _format_path(path: JsonPath) -> str:
    # JSON Pointer escaping keeps keys that contain "/" unambiguous.
    return "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _path_sort_key(path: JsonPath) -> tuple[tuple[int, int, str], ...]:
    # Document order, with list indexes compared as numbers (items/2 before items/10).
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in path)


# --- value helpers -----------------------------------------------------------------------


def _schema_types(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {item for item in declared if isinstance(item, str)}
    return set()


def _declared_format(schema: Mapping[str, Any]) -> str | None:
    declared = schema.get("format") or schema.get("x-format")
    return declared if isinstance(declared, str) else None


def _is_number(value: Any) -> bool:
    # bool is an int subclass but never a number in JSON Schema.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_decimal(value: Any) -> Decimal | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not NUMERIC_PATTERN.match(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _parse_iso8601(text: str) -> datetime | None:
    candidate = text.strip()
    if candidate[-1:] in ("Z", "z"):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    # A time without an offset is taken as UTC: the runtime's clock and the sandbox use UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _enum_key(text: str) -> str:
    return "".join(char for char in text.casefold() if char.isalnum())
