"""Rule-based failure classifier: an ordered table of ErrorRule rows, first match wins.

The rules are data (editable in admin). ``DEFAULT_ERROR_RULES`` seeds the table through a
data migration and ``errorrules_seed_defaults``; code never hard-wires the mapping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from traces.db_threads import db_async
from traces.models import ErrorRule, ErrorType
from traces.patterns import body_regex

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorEvent:
    """What went wrong, as the classifier sees it."""

    source: str  # one of ErrorRule.Source
    status_code: int | None = None
    exception_class: str = ""
    body: str = ""


@dataclass(frozen=True)
class CompiledRule:
    position: int
    name: str
    source: str
    status_min: int | None
    status_max: int | None
    exception_class: str
    body_regex: Any  # an RE2 pattern (traces.patterns), or None
    error_type: str

    def matches(self, event: ErrorEvent) -> bool:
        if self.source != event.source:
            return False
        if self.status_min is not None or self.status_max is not None:
            if event.status_code is None:
                return False
            if self.status_min is not None and event.status_code < self.status_min:
                return False
            if self.status_max is not None and event.status_code > self.status_max:
                return False
        if self.exception_class and self.exception_class != event.exception_class:
            return False
        return self.body_regex is None or self.body_regex.search(event.body or "") is not None


# A 4xx naming a wrong type: this project's words, and pydantic v2's error codes and
# messages ("int_parsing", "Input should be a valid integer"), so that one change of an
# API (order ids became integers) is one error type whichever framework reports it.
TYPE_MISMATCH_PATTERN = (
    r"type_mismatch|expected_type|must be an? (integer|number|boolean)"
    r"|\b(int|float|bool|decimal)_(parsing|type)\b|should be a valid (integer|number|boolean)"
)


def _rule(
    position: int,
    name: str,
    source: str,
    error_type: str,
    *,
    status: tuple[int, int] | None = None,
    exception_class: str = "",
    body_pattern: str = "",
) -> dict[str, Any]:
    return {
        "position": position,
        "name": name,
        "source": source,
        "status_min": status[0] if status else None,
        "status_max": status[1] if status else None,
        "exception_class": exception_class,
        "body_pattern": body_pattern,
        "error_type": error_type,
    }


E, H, M, F, R, G = (
    ErrorRule.Source.EXECUTOR,
    ErrorRule.Source.HTTP,
    ErrorRule.Source.MODEL_OUTPUT,
    ErrorRule.Source.FINAL_ANSWER,
    ErrorRule.Source.RUNTIME,
    ErrorRule.Source.REASONING_GUARD,
)
T = ErrorType

NOT_FOUND_PATTERN = (
    r"not[ _-]?found|no such|does not exist|doesn't exist"
    r"|unknown (order|sku|id|customer|product|item)"
)

DEFAULT_ERROR_RULES: list[dict[str, Any]] = [
    _rule(
        10,
        "Tool not on the agent's whitelist",
        E,
        T.TOOL_NOT_ALLOWED,
        exception_class="TOOL_NOT_ALLOWED",
    ),
    _rule(
        20,
        "Tool suspended by the timeout breaker",
        E,
        T.TOOL_SUSPENDED,
        exception_class="TOOL_SUSPENDED",
    ),
    _rule(
        30,
        "Endpoint not on the allow-list",
        E,
        T.INVALID_ENDPOINT,
        exception_class="INVALID_ENDPOINT",
    ),
    _rule(
        31, "SSRF guard blocked the address", E, T.INVALID_ENDPOINT, exception_class="SSRF_BLOCKED"
    ),
    _rule(
        40,
        "Schema: required field missing",
        E,
        T.MISSING_REQUIRED_FIELD,
        exception_class="SCHEMA_VIOLATION",
        body_pattern=r"\bvalidator=required\b",
    ),
    _rule(
        41,
        "Schema: wrong JSON type",
        E,
        T.TYPE_MISMATCH,
        exception_class="SCHEMA_VIOLATION",
        body_pattern=r"\bvalidator=type\b",
    ),
    _rule(
        42,
        "Schema: any other violation",
        E,
        T.INVALID_PARAMETER,
        exception_class="SCHEMA_VIOLATION",
    ),
    _rule(50, "Tool call timed out", E, T.TIMEOUT, exception_class="TIMEOUT"),
    _rule(51, "Connection failed", E, T.CONNECTION_ERROR, exception_class="CONNECTION_ERROR"),
    _rule(
        52,
        "Response over the size cap",
        E,
        T.RESPONSE_TOO_LARGE,
        exception_class="RESPONSE_TOO_LARGE",
    ),
    _rule(53, "In-process tool raised", E, T.INTERNAL_SERVER_ERROR, exception_class="TOOL_ERROR"),
    # A 2xx that is no result (agents.tools.executor.response_body_problem): an error
    # envelope naming a missing resource, else a broken upstream.
    _rule(
        55,
        "2xx whose body says the resource does not exist",
        E,
        T.RESOURCE_NOT_FOUND,
        exception_class="BAD_RESPONSE",
        body_pattern=NOT_FOUND_PATTERN,
    ),
    _rule(
        56,
        "2xx whose body is an error, an HTML page or broken JSON",
        E,
        T.INTERNAL_SERVER_ERROR,
        exception_class="BAD_RESPONSE",
    ),
    # Ahead of the 4xx rules that read the body: "the Authorization header is required" on
    # a 401 is no missing argument, nor is "order id is required" on a 404.
    _rule(57, "401 / 403", H, T.UNAUTHORIZED, status=(401, 403)),
    _rule(58, "404", H, T.RESOURCE_NOT_FOUND, status=(404, 404)),
    # Gone for good is not found: nothing a changed argument fixes (it was "any other 4xx",
    # INVALID_PARAMETER, and Reflexion tried to repair the call). Beside the 404, ahead of
    # the rules that read a 4xx's wording.
    _rule(58, "410 gone", H, T.RESOURCE_NOT_FOUND, status=(410, 410)),
    _rule(
        54,
        "Tool credential not configured",
        E,
        T.UNAUTHORIZED,
        exception_class="CREDENTIAL_MISSING",
    ),
    # A 503 says "not now" (often with Retry-After), unlike a 500: its own class, so a
    # strategy may wait and retry on it while a 500 still degrades.
    _rule(59, "503 service unavailable", H, T.SERVICE_UNAVAILABLE, status=(503, 503)),
    _rule(
        60,
        "4xx naming a type mismatch",
        H,
        T.TYPE_MISMATCH,
        status=(400, 422),
        body_pattern=TYPE_MISMATCH_PATTERN,
    ),
    _rule(
        61,
        "4xx naming a missing field",
        H,
        T.MISSING_REQUIRED_FIELD,
        status=(400, 422),
        body_pattern=r"missing_required_field|is required|required field",
    ),
    _rule(64, "408 / 504 gateway timeout", H, T.TIMEOUT, status=(408, 408)),
    _rule(65, "504", H, T.TIMEOUT, status=(504, 504)),
    _rule(66, "429", H, T.RATE_LIMITED, status=(429, 429)),
    _rule(67, "Any other 5xx", H, T.INTERNAL_SERVER_ERROR, status=(500, 599)),
    _rule(68, "Any other 4xx", H, T.INVALID_PARAMETER, status=(400, 499)),
    # Redirects are followed (and checked) by the executor: a 3xx that reaches here has no
    # usable Location, or is a 304 to a request that asked for no cache.
    _rule(69, "Unexpected 3xx", H, T.INVALID_ENDPOINT, status=(300, 399)),
    _rule(70, "Unparseable model output", M, T.MODEL_FORMAT_ERROR),
    _rule(
        80,
        "Final answer without supporting tool result",
        F,
        T.HALLUCINATED_ANSWER,
        exception_class="UNSUPPORTED_ANSWER",
    ),
    _rule(
        85,
        "Thought states a fact the request and context do not hold",
        G,
        T.UNGROUNDED_THOUGHT,
        exception_class="UNGROUNDED_THOUGHT",
    ),
    _rule(
        86,
        "Reflection glosses over a failed observation",
        G,
        T.FAKE_REFLECTION,
        exception_class="FAKE_REFLECTION",
    ),
    _rule(90, "Repeated identical action", R, T.LOOP_DETECTED, exception_class="LOOP_DETECTED"),
    _rule(91, "Iteration cap", R, T.MAX_STEPS, exception_class="MAX_STEPS"),
    _rule(92, "LLM unavailable", R, T.LLM_ERROR, exception_class="LLM_ERROR"),
    _rule(93, "Run time limit", R, T.RUN_TIME_LIMIT, exception_class="RUN_TIME_LIMIT"),
]


RULE_FIELDS = (
    "position",
    "name",
    "source",
    "status_min",
    "status_max",
    "exception_class",
    "body_pattern",
    "error_type",
)


def compile_rules(rows: list[dict[str, Any]]) -> list[CompiledRule]:
    compiled = []
    for row in rows:
        pattern = row.get("body_pattern") or ""
        try:
            regex = body_regex(pattern) if pattern else None
        except ValueError as exc:
            # Saved past ErrorRule.clean() (a queryset update, an old row): this rule is
            # skipped, the others still classify.
            logger.warning(
                "classifier.rule_skipped",
                extra={"position": row["position"], "rule": row["name"], "error": str(exc)},
            )
            continue
        compiled.append(
            CompiledRule(
                position=row["position"],
                name=row["name"],
                source=row["source"],
                status_min=row.get("status_min"),
                status_max=row.get("status_max"),
                exception_class=row.get("exception_class") or "",
                body_regex=regex,
                error_type=row["error_type"],
            )
        )
    return sorted(compiled, key=lambda rule: rule.position)


def classify_error(event: ErrorEvent, rules: list[CompiledRule]) -> str:
    """Return the error_type of the first matching rule, or UNKNOWN."""
    for rule in rules:
        if rule.matches(event):
            return rule.error_type
    return ErrorType.UNKNOWN.value


def error_rules_load() -> list[CompiledRule]:
    """Read the enabled rules from the table (one query; the runtime loads once per run)."""
    rows = ErrorRule.objects.filter(enabled=True).values(*RULE_FIELDS)
    return compile_rules([dict(row) for row in rows])


async def error_rules_aload() -> list[CompiledRule]:
    return await db_async(error_rules_load)()


def errorrules_seed_defaults() -> int:
    """Insert the default rules when the table is empty; return how many were added."""
    if ErrorRule.objects.exists():
        return 0
    ErrorRule.objects.bulk_create([ErrorRule(**row) for row in DEFAULT_ERROR_RULES])
    return len(DEFAULT_ERROR_RULES)
