"""Parsers that turn model text into ``ReasoningStep`` and ``Reflection`` objects.

Models are asked for one JSON object, and most comply; the rest write ReAct-style lines
("Thought: ... / Action: get_order(order_id="#W1")"), wrap JSON in prose, or type
full-width punctuation. Strict parsing is tried first and the lenient forms only when it
fails, so the trace can record which one succeeded. Anything unreadable raises
``ModelFormatError`` whose reason is written for the model: it is shown to it as the
observation of a format error, so it names the problem and the expected format.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from agents.llm.schemas import FINAL_ANSWER, ReasoningStep, Reflection
from traces.redaction import MAX_JSON_DEPTH, json_depth, storable_value, untrusted_json

ParseMode = Literal["strict", "lenient"]
ModelT = TypeVar("ModelT", bound=BaseModel)

# Full-width and typographic punctuation that models (and input methods) produce, spelled
# by name because the glyphs are indistinguishable from ASCII on screen.
FW_LEFT_PAREN = "\N{FULLWIDTH LEFT PARENTHESIS}"
FW_RIGHT_PAREN = "\N{FULLWIDTH RIGHT PARENTHESIS}"
FW_LEFT_BRACKET = "\N{FULLWIDTH LEFT SQUARE BRACKET}"
FW_RIGHT_BRACKET = "\N{FULLWIDTH RIGHT SQUARE BRACKET}"
FW_LEFT_BRACE = "\N{FULLWIDTH LEFT CURLY BRACKET}"
FW_RIGHT_BRACE = "\N{FULLWIDTH RIGHT CURLY BRACKET}"
FW_COMMA = "\N{FULLWIDTH COMMA}"
FW_COLON = "\N{FULLWIDTH COLON}"
FW_EQUALS = "\N{FULLWIDTH EQUALS SIGN}"
FW_FULL_STOP = "\N{IDEOGRAPHIC FULL STOP}"
DOUBLE_QUOTES = (
    '"'
    "\N{LEFT DOUBLE QUOTATION MARK}\N{RIGHT DOUBLE QUOTATION MARK}"
    "\N{FULLWIDTH QUOTATION MARK}\N{DOUBLE LOW-9 QUOTATION MARK}"
)
SINGLE_QUOTES = (
    "'\N{LEFT SINGLE QUOTATION MARK}\N{RIGHT SINGLE QUOTATION MARK}\N{FULLWIDTH APOSTROPHE}"
)
OPEN_PARENS = "(" + FW_LEFT_PAREN
CLOSE_PARENS = ")" + FW_RIGHT_PAREN
OPEN_BRACES = "{" + FW_LEFT_BRACE
OPENING_BRACKETS = OPEN_PARENS + "[" + FW_LEFT_BRACKET + OPEN_BRACES
CLOSING_BRACKETS = CLOSE_PARENS + "]" + FW_RIGHT_BRACKET + "}" + FW_RIGHT_BRACE
ARGUMENT_SEPARATORS = "," + FW_COMMA
KEY_VALUE_SEPARATORS = "=" + FW_EQUALS + ":" + FW_COLON
FULL_WIDTH_TO_ASCII = str.maketrans(
    {
        FW_LEFT_PAREN: "(",
        FW_RIGHT_PAREN: ")",
        FW_LEFT_BRACKET: "[",
        FW_RIGHT_BRACKET: "]",
        FW_LEFT_BRACE: "{",
        FW_RIGHT_BRACE: "}",
        FW_COMMA: ",",
        FW_COLON: ":",
        FW_EQUALS: "=",
        **dict.fromkeys(DOUBLE_QUOTES[1:], '"'),
        **dict.fromkeys(SINGLE_QUOTES[1:], "'"),
        "\N{IDEOGRAPHIC SPACE}": " ",
    }
)

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARGUMENT_NAME_PATTERN = re.compile(r"^[^\W\d]\w*$")
INTEGER_PATTERN = re.compile(r"^-?(0|[1-9]\d*)$")
FLOAT_PATTERN = re.compile(r"^-?(0|[1-9]\d*)(\.\d+([eE][+-]?\d+)?|[eE][+-]?\d+)$")
FENCE_PATTERN = re.compile(r"^```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)\n?[ \t]*```$", re.DOTALL)
FINAL_ACTION_PATTERN = re.compile(r"^final[\s_-]*answer\b(.*)$", re.IGNORECASE | re.DOTALL)
ACTION_NAME_PATTERN = re.compile(
    rf"([^\s{re.escape(OPEN_PARENS + OPEN_BRACES)}]+)\s*(.*)$", re.DOTALL
)
LABEL_COLON = f"[:{FW_COLON}]"
LABEL_SEPARATOR = f"[:{FW_COLON}=]"
REASONING_LABEL_PATTERN = re.compile(
    r"^[ \t]*(?:[-*>#]+[ \t]*)?\**[ \t]*"
    r"(thought|action[ \t_]*input|action|expectation|final[ \t_]*answer|observation|reflection)"
    rf"[ \t]*\**[ \t]*{LABEL_COLON}[ \t]*\**[ \t]*(.*)$",
    re.IGNORECASE,
)
REFLECTION_LINE_PATTERNS = {
    "expectation_met": re.compile(
        rf"^[\s*_>-]*expectation[\s_]*met\??[\s*]*{LABEL_SEPARATOR}[\s*]*(.*)$", re.IGNORECASE
    ),
    "likely_cause": re.compile(
        rf"^[\s*_>-]*(?:likely[\s_]*)?cause[\s*]*{LABEL_SEPARATOR}[\s*]*(.*)$", re.IGNORECASE
    ),
    "next": re.compile(
        rf"^[\s*_>-]*next(?:[\s_]*(?:move|step))?[\s*]*{LABEL_SEPARATOR}[\s*]*(.*)$",
        re.IGNORECASE,
    ),
}
FINAL_ANSWER_ARGUMENT_NAMES = ("answer", "final_answer", "text", "reply", "response")
TRUE_WORDS = frozenset({"yes", "y", "true", "met", "1"})
FALSE_WORDS = frozenset({"no", "n", "false", "not met", "unmet", "0"})
NextMove = Literal["continue", "switch", "stop"]
NEXT_MOVES: dict[str, NextMove] = {"continue": "continue", "switch": "switch", "stop": "stop"}

MAX_RAW_CHARS = 500
# A reasoning step is at most ~13k characters of fields; far longer text is not a step,
# and the embedded-JSON search is quadratic in the number of braces.
MAX_TEXT_CHARS = 50_000
MAX_EMBEDDED_CANDIDATES = 50

REASONING_FORMAT_HINT = (
    'Reply with ONE JSON object and nothing else: {"thought": "...", "action": "<tool name '
    'or final_answer>", "action_input": {"<param>": <value>}, "expectation": "...", '
    '"final_answer": "<only when action is final_answer>"}.'
)
REFLECTION_FORMAT_HINT = (
    'Reply with ONE JSON object: {"expectation_met": true|false, "likely_cause": "...", '
    '"next": "continue|switch|stop"}.'
)


class ModelFormatError(Exception):
    """The model's reply could not be read; ``reason`` says why and what was expected."""

    def __init__(self, reason: str, *, raw: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw[:MAX_RAW_CHARS]


class _FormatProblem(Exception):
    """An internal parse failure, turned into a ``ModelFormatError`` at the entry points."""


def model_json(text: str) -> Any:
    """A model's JSON (``untrusted_json``): NaN, Infinity and deep nesting are a
    ``ValueError``, which the callers report as a format error the model can fix."""
    return untrusted_json(text)


def parse_reasoning(text: str) -> tuple[ReasoningStep, ParseMode]:
    """Parse one reasoning reply into a step and the mode (``strict`` or ``lenient``) used.

    Strict: the whole reply, optionally in a ```json fence, is one JSON object. Lenient:
    ``Thought:``/``Action: tool(key=value, ...)``/``Expectation:`` lines or
    ``Final Answer: ...``, else the first JSON object in the prose that is a valid step.
    """
    body = _strip_fence(text.strip())
    if not body:
        raise ModelFormatError(f"The reply was empty. {REASONING_FORMAT_HINT}", raw=text)
    if len(body) > MAX_TEXT_CHARS:
        raise ModelFormatError(
            f"The reply was {len(body)} characters long; keep it short. {REASONING_FORMAT_HINT}",
            raw=text,
        )

    strict_problem: str | None = None
    try:
        document = model_json(body)
    except ValueError as exc:
        strict_problem = f"the reply is not valid JSON ({exc})"
    else:
        if isinstance(document, dict):
            return _reasoning_step(document, raw=text), "strict"
        strict_problem = "the reply is JSON but not an object"

    sections = _labelled_sections(body)
    labels = {label for label, _ in sections}
    if labels & {"action", "final answer"}:
        try:
            return _reasoning_from_sections(sections), "lenient"
        except _FormatProblem as exc:
            raise ModelFormatError(f"{exc} {REASONING_FORMAT_HINT}", raw=text) from None
        except ValidationError as exc:
            raise ModelFormatError(
                f"{_describe_validation_error(exc)}. {REASONING_FORMAT_HINT}", raw=text
            ) from None

    embedded_problem: str | None = None
    for candidate in _embedded_objects(body):
        if "action" not in candidate:
            continue
        try:
            return _reasoning_step(candidate, raw=text), "lenient"
        except ModelFormatError as exc:
            embedded_problem = embedded_problem or exc.reason
    if embedded_problem:
        raise ModelFormatError(embedded_problem, raw=text)
    raise ModelFormatError(
        f"Could not find an action in the reply: {strict_problem}, and there is no "
        f"'Action:' line. {REASONING_FORMAT_HINT}",
        raw=text,
    )


def parse_reflection(text: str) -> Reflection:
    """Parse a reflection reply: strict JSON, else ``Expectation met:``/``Cause:``/``Next:``."""
    body = _strip_fence(text.strip())
    if not body:
        raise ModelFormatError(f"The reply was empty. {REFLECTION_FORMAT_HINT}", raw=text)
    if len(body) > MAX_TEXT_CHARS:
        raise ModelFormatError(
            f"The reply was {len(body)} characters long. {REFLECTION_FORMAT_HINT}", raw=text
        )
    try:
        document = model_json(body)
    except ValueError:
        document = None
    if isinstance(document, dict):
        return _validated(Reflection, document, raw=text, hint=REFLECTION_FORMAT_HINT)

    fields = _reflection_lines(body)
    if "expectation_met" in fields:
        try:
            return Reflection(
                expectation_met=_reflection_bool(fields["expectation_met"]),
                likely_cause=fields.get("likely_cause", "").strip(),
                next=_reflection_next(fields.get("next", "continue")),
            )
        except _FormatProblem as exc:
            raise ModelFormatError(f"{exc} {REFLECTION_FORMAT_HINT}", raw=text) from None
        except ValidationError as exc:
            raise ModelFormatError(
                f"{_describe_validation_error(exc)}. {REFLECTION_FORMAT_HINT}", raw=text
            ) from None

    for candidate in _embedded_objects(body):
        if "expectation_met" in candidate:
            return _validated(Reflection, candidate, raw=text, hint=REFLECTION_FORMAT_HINT)
    raise ModelFormatError(
        f"Could not find 'expectation_met' in the reply. {REFLECTION_FORMAT_HINT}", raw=text
    )


# --- reasoning: objects ------------------------------------------------------------------


def _reasoning_step(document: dict[str, Any], *, raw: str) -> ReasoningStep:
    step = _validated(ReasoningStep, document, raw=raw, hint=REASONING_FORMAT_HINT)
    try:
        return _checked_step(step)
    except _FormatProblem as exc:
        raise ModelFormatError(f"{exc} {REASONING_FORMAT_HINT}", raw=raw) from None


def _checked_step(step: ReasoningStep) -> ReasoningStep:
    """Enforce what the schema cannot: a real tool name, and a final answer with text."""
    action = step.action.strip()
    if FINAL_ACTION_PATTERN.match(action):
        answer = step.final_answer or _answer_from_arguments(step.action_input, [])
        if not answer or not answer.strip():
            raise _FormatProblem(
                'The action is final_answer but "final_answer" is empty; put the reply to '
                'the customer in "final_answer".'
            )
        return step.model_copy(
            update={"action": FINAL_ANSWER, "action_input": {}, "final_answer": answer.strip()}
        )
    if not TOOL_NAME_PATTERN.match(action):
        raise _FormatProblem(
            f"{action[:60]!r} is not a tool name; the action must be exactly one tool name "
            "from the Tools list (letters, digits and underscores) or final_answer."
        )
    return step.model_copy(update={"action": action})


# --- reasoning: labelled lines -----------------------------------------------------------


def _labelled_sections(body: str) -> list[tuple[str, str]]:
    """Split text into (label, content) pairs; text before the first label is ``""``."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in body.splitlines():
        match = REASONING_LABEL_PATTERN.match(line)
        if match:
            label = re.sub(r"[\s_]+", " ", match.group(1).lower())
            sections.append((label, [match.group(2)]))
        else:
            sections[-1][1].append(line)
    return [(label, "\n".join(lines).strip()) for label, lines in sections]


def _reasoning_from_sections(sections: list[tuple[str, str]]) -> ReasoningStep:
    def contents(label: str) -> list[str]:
        return [content for name, content in sections if name == label]

    actions = contents("action")
    finals = contents("final answer")
    thoughts = contents("thought") or [content for name, content in sections if not name]
    thought = "\n".join(part for part in thoughts if part)
    expectation = "\n".join(part for part in contents("expectation") if part)
    action_inputs = contents("action input")

    if len(actions) > 1:
        raise _FormatProblem(
            f"The reply has {len(actions)} 'Action:' lines; call exactly one tool per reply "
            "and wait for its observation."
        )
    call = _parse_action_call(actions[0]) if actions else None
    is_final = bool(finals) and (call is None or call[0] == FINAL_ANSWER)
    if finals and not is_final:
        raise _FormatProblem(
            "The reply has both an 'Action:' and a 'Final Answer:'; give either one tool call "
            "or the final answer."
        )

    if call is None or call[0] == FINAL_ANSWER:
        positional = call[2] if call else []
        arguments = call[1] if call else {}
        answer = finals[0] if finals else _answer_from_arguments(arguments, positional)
        if not answer:
            raise _FormatProblem(
                "The action is final_answer but no answer text was given; write "
                "'Final Answer: <reply to the customer>'."
            )
        return ReasoningStep(
            thought=thought,
            action=FINAL_ANSWER,
            expectation=expectation,
            final_answer=answer,
        )

    name, arguments, positional = call
    if positional:
        raise _FormatProblem(
            f"Arguments of {name} must be named: write {name}(param=value, ...) or "
            f'{name}({{"param": value}}).'
        )
    if action_inputs:
        if arguments:
            raise _FormatProblem(
                "The arguments were given both in the Action line and in 'Action Input:'; "
                "give them once."
            )
        input_arguments, input_positional = _parse_arguments(action_inputs[0])
        if input_positional:
            raise _FormatProblem("'Action Input:' must be a JSON object or param=value pairs.")
        arguments = input_arguments
    return ReasoningStep(
        thought=thought, action=name, action_input=arguments, expectation=expectation
    )


def _parse_action_call(content: str) -> tuple[str, dict[str, Any], list[Any]]:
    """Read ``tool(key=value, ...)``, ``tool({...})``, ``tool {...}`` or a bare ``tool``."""
    text = content.strip().strip("`").strip()
    final_match = FINAL_ACTION_PATTERN.match(text)
    if final_match:
        rest = final_match.group(1).strip()
        arguments, positional = _parse_call_rest(FINAL_ANSWER, rest) if rest else ({}, [])
        return FINAL_ANSWER, arguments, positional
    match = ACTION_NAME_PATTERN.match(text)
    if not match:
        raise _FormatProblem("The 'Action:' line is empty; name one tool.")
    name, rest = match.group(1), match.group(2).strip()
    if not TOOL_NAME_PATTERN.match(name):
        raise _FormatProblem(
            f"{name[:60]!r} is not a tool name; tool names use letters, digits and "
            'underscores, e.g. Action: get_order(order_id="#W1234567").'
        )
    arguments, positional = _parse_call_rest(name, rest)
    return name, arguments, positional


def _parse_call_rest(name: str, rest: str) -> tuple[dict[str, Any], list[Any]]:
    if not rest:
        return {}, []
    if rest[0] in OPEN_PARENS:
        close = max(rest.rfind(")"), rest.rfind(FW_RIGHT_PAREN))
        if close <= 0:
            raise _FormatProblem(f"The call to {name} has no closing parenthesis.")
        trailing = rest[close + 1 :].strip()
        if trailing.strip(".;`" + FW_FULL_STOP):
            raise _FormatProblem(
                f"Unexpected text after the call to {name}: {trailing[:60]!r}. Put only the "
                "call on the 'Action:' line."
            )
        return _parse_arguments(rest[1:close])
    if rest[0] in OPEN_BRACES:
        return _parse_object_literal(rest), []
    raise _FormatProblem(
        f"Could not read the call to {name}; write {name}(param=value, ...) with the "
        "arguments in parentheses."
    )


def _parse_arguments(text: str) -> tuple[dict[str, Any], list[Any]]:
    """Parse ``key=value, key: value`` pairs (or one object literal) and positional values."""
    stripped = text.strip()
    if not stripped:
        return {}, []
    if stripped[0] in OPEN_BRACES:
        return _parse_object_literal(stripped), []
    arguments: dict[str, Any] = {}
    positional: list[Any] = []
    for piece in _split_top_level(stripped, ARGUMENT_SEPARATORS):
        piece = piece.strip()
        if not piece:
            continue
        separator = next(
            (index for index, char in _top_level_chars(piece) if char in KEY_VALUE_SEPARATORS),
            None,
        )
        if separator is None:
            positional.append(_parse_value(piece))
            continue
        key = piece[:separator].strip().strip(DOUBLE_QUOTES + SINGLE_QUOTES).strip()
        if not ARGUMENT_NAME_PATTERN.match(key):
            raise _FormatProblem(f"{key[:60]!r} is not a valid parameter name.")
        if key in arguments:
            raise _FormatProblem(f"The parameter {key!r} is given twice.")
        arguments[key] = _parse_value(piece[separator + 1 :])
    return arguments, positional


def _parse_value(text: str) -> Any:
    """Convert one argument value: quoted text stays a string, bare literals are typed."""
    value = text.strip()
    if not value:
        return ""
    quoted = _quoted_string(value)
    if quoted is not None:
        return quoted
    if value[0] in DOUBLE_QUOTES + SINGLE_QUOTES:
        raise _FormatProblem(
            f"Could not read the quoted value {value[:60]!r}; close every quote and quote "
            "each text value once."
        )
    if value[0] in "[" + FW_LEFT_BRACKET + OPEN_BRACES:
        return _parse_structured_literal(value)
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    if lowered in ("null", "none"):
        return None
    # Leading zeros and a plus sign stay text: "0042" is an identifier and "+1415..." a phone.
    if INTEGER_PATTERN.match(value) and len(value) <= 300:  # int() refuses 4,300+ digits
        return int(value)
    if FLOAT_PATTERN.match(value):
        number = float(value)
        return number if math.isfinite(number) else value
    return value


def _quoted_string(value: str) -> str | None:
    """The content of ``value`` if it is exactly one quoted string, else None."""
    opening = value[0]
    if opening in DOUBLE_QUOTES:
        family = DOUBLE_QUOTES
    elif opening in SINGLE_QUOTES:
        family = SINGLE_QUOTES
    else:
        return None
    escaped = False
    for index in range(1, len(value)):
        char = value[index]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif _closes_quote(value, index, family):
            if index != len(value) - 1:
                return None
            if opening == value[-1] == '"':
                try:
                    decoded = json.loads(value)
                except ValueError:
                    break
                return str(decoded)
            break
    else:
        return None
    return re.sub(r"\\(.)", r"\1", value[1:-1])


def _parse_object_literal(text: str) -> dict[str, Any]:
    value = _parse_structured_literal(text)
    if not isinstance(value, dict):
        raise _FormatProblem("The arguments must be one JSON object.")
    return value


def _parse_structured_literal(text: str) -> Any:
    """Read a JSON (or Python-literal) object or array, tolerating full-width punctuation."""
    for candidate in dict.fromkeys((text, text.translate(FULL_WIDTH_TO_ASCII))):
        try:
            return model_json(candidate)
        except ValueError:
            pass
        try:
            # Models trained on Python often write {'a': 'b', 'flag': True}.
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if (
            isinstance(value, dict | list)
            and json_depth(value, stop_past=MAX_JSON_DEPTH) <= MAX_JSON_DEPTH
        ):
            return storable_value(value)
    raise _FormatProblem(f"Could not read {text[:60]!r} as a JSON object or array.")


def _answer_from_arguments(arguments: dict[str, Any], positional: list[Any]) -> str:
    if len(positional) == 1 and isinstance(positional[0], str):
        return positional[0].strip()
    for name in FINAL_ANSWER_ARGUMENT_NAMES:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


# --- scanning helpers --------------------------------------------------------------------


def _top_level_chars(text: str) -> Iterator[tuple[int, str]]:
    """Yield (index, char) for characters outside quotes and brackets."""
    quote_family: str | None = None
    escaped = False
    depth = 0
    for index, char in enumerate(text):
        if quote_family is not None:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif _closes_quote(text, index, quote_family):
                quote_family = None
            continue
        if char in DOUBLE_QUOTES:
            quote_family = DOUBLE_QUOTES
        elif char in SINGLE_QUOTES and (index == 0 or not text[index - 1].isalnum()):
            # An apostrophe inside a bare word (O'Brien) does not open a quote.
            quote_family = SINGLE_QUOTES
        elif char in OPENING_BRACKETS:
            depth += 1
        elif char in CLOSING_BRACKETS:
            depth = max(0, depth - 1)
        elif depth == 0:
            yield index, char


def _closes_quote(text: str, index: int, family: str) -> bool:
    if text[index] not in family:
        return False
    # A single quote followed by a letter is an apostrophe (a typographic one in "it's"),
    # not the end of the string.
    following = text[index + 1 : index + 2]
    return not (family == SINGLE_QUOTES and following.isalnum())


def _split_top_level(text: str, separators: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for index, char in _top_level_chars(text):
        if char in separators:
            pieces.append(text[start:index])
            start = index + 1
    pieces.append(text[start:])
    return pieces


def _embedded_objects(text: str) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects found in prose, outermost first, in order of appearance."""
    candidates = 0
    start = text.find("{")
    while start != -1 and candidates < MAX_EMBEDDED_CANDIDATES:
        candidates += 1
        end = _balanced_object_end(text, start)
        if end is not None:
            try:
                document = model_json(text[start : end + 1])
            except ValueError:
                document = None
            if isinstance(document, dict):
                yield document
        start = text.find("{", start + 1)


def _balanced_object_end(text: str, start: int) -> int | None:
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _strip_fence(text: str) -> str:
    match = FENCE_PATTERN.match(text)
    return match.group(1).strip() if match else text


# --- reflection --------------------------------------------------------------------------


def _reflection_lines(body: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in body.splitlines():
        for field, pattern in REFLECTION_LINE_PATTERNS.items():
            match = pattern.match(line)
            if match and field not in fields:
                fields[field] = match.group(1).strip().strip("*").strip()
                break
    return fields


def _reflection_bool(value: str) -> bool:
    word = re.sub(r"[^\w\s]", "", value).strip().lower()
    if word in TRUE_WORDS or word.split()[:1] in (["yes"], ["true"]):
        return True
    if word in FALSE_WORDS or word.split()[:1] in (["no"], ["false"]):
        return False
    raise _FormatProblem(f"'Expectation met' must be yes or no, not {value[:40]!r}.")


def _reflection_next(value: str) -> NextMove:
    words = re.sub(r"[^\w\s]", " ", value).lower().split()
    if words and words[0] in NEXT_MOVES:
        return NEXT_MOVES[words[0]]
    raise _FormatProblem(f"'Next' must be continue, switch or stop, not {value[:40]!r}.")


# --- errors ------------------------------------------------------------------------------


def _validated(model: type[ModelT], document: dict[str, Any], *, raw: str, hint: str) -> ModelT:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise ModelFormatError(f"{_describe_validation_error(exc)}. {hint}", raw=raw) from None


def _describe_validation_error(error: ValidationError) -> str:
    problems: list[str] = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"]) or "reply"
        context = detail.get("ctx") or {}
        if detail["type"] == "string_too_long":
            problems.append(f"{field} is too long (at most {context['max_length']} characters)")
        elif detail["type"] == "string_too_short":
            problems.append(f"{field} is empty")
        elif detail["type"] == "missing":
            problems.append(f"{field} is missing")
        else:
            problems.append(f"{field}: {detail['msg']}")
    return "Invalid reply: " + "; ".join(problems)
