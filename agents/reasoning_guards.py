"""The reasoning guards: checks of what the model *thinks* and *reflects*, not of what it
does (the executor checks actions) or tells the customer (``agents.grounding`` checks
answers).

- **Think validator** (seeds/000 §4.1): every concrete fact a thought states (an id, a
  date, an amount, a duration, a quoted value, a shop status) must come from the user
  request, the customer's details or an observation shown to the model. The fact check
  itself is ``agents.grounding.thought_unsupported_fact``, which reuses the answer
  check's fact extraction; this module says what the model is told when it fails.
- **Fake-reflection detector** (seeds/001 §5.4 and §6.2): after a failed call, a
  reflection must admit the failure, name a concrete cause taken from the observation
  and change something. One that claims success, names no cause, names a cause the
  observation does not show, never admits anything went wrong, or carries on unchanged
  is sent back to be rewritten.

Both are heuristics over untrusted model text. The runtime re-prompts a bounded number
of times (``RuntimeConfig.think_reprompts_max`` / ``reflection_reprompts_max``), records
each rejection as a failed Step with its own error type (``UNGROUNDED_THOUGHT``,
``FAKE_REFLECTION``), and then lets the run go on: the final answer's grounding check,
not these guards, is what keeps an unsupported fact from the customer.
"""

from __future__ import annotations

import re

from agents.llm.schemas import Reflection
from agents.prompts import RoundRecord

# Words that admit a failure (seeds/001 §5.4: "失败", "错误", "不符", "替代方案").
_ADMITS = re.compile(
    r"\b(?:fail\w*|error\w*|wrong|incorrect|invalid|mismatch\w*|missing|absent|not|no|none|"
    r"never|cannot|can't|couldn't|didn't|doesn't|don't|isn't|wasn't|won't|unable|unknown|"
    r"refus\w*|reject\w*|den(?:y|ied)|forbidden|unauthori[sz]ed|expired|unavailable|down|"
    r"time[sd]? ?out|timeout|throttl\w*|limit\w*|rate|exceed\w*|too|bad|malformed|"
    r"broken|empty|differ\w*|instead|only|lacks?|unexpected)\b|n't\b",
    re.I,
)
# What a reflection may change after a failure when it carries on ("continue").
_CHANGES = re.compile(
    r"\b(?:retry\w*|try|tried|use|using|send|sending|search\w*|look\w* up|ask\w*|convert\w*|"
    r"correct\w*|fix\w*|chang\w*|instead|switch\w*|strip\w*|add\w*|remov\w*|rename\w*|"
    r"format\w*|wait\w*|call\w* (?:another|a different|the other)|stop\w*|hand\w* over)\b",
    re.I,
)
# Upstream failures, where sending the same call again is itself a change: the fault was
# on the other side, not in the arguments. A client error repeated unchanged is not.
_TRANSIENT_TYPES = frozenset(
    {"RATE_LIMITED", "SERVICE_UNAVAILABLE", "TIMEOUT", "CONNECTION_ERROR", "INTERNAL_SERVER_ERROR"}
)
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})
# Words too generic to show that a cause was read from the observation.
_GENERIC_WORDS = """
    error errors failed failure fails request response result results status tool tools
    call called calling value values data detail details message code type field unknown
    something issue problem reason because there their this that with from have been were
    which would could should about again expected expectation observation reply does will
    what when where your please more than into only also some such very just then them they
    same next time"""
_GENERIC = frozenset(_GENERIC_WORDS.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z_]{3,}")


def _label(rnd: RoundRecord) -> str:
    return rnd.observation_label()


def _anchors(rnd: RoundRecord) -> tuple[set[str], list[str]]:
    """The words and values a cause may cite to show it read the observation: the status
    code, the error type (and its words), the tool, the argument names and values, and
    the specific words of the observation itself."""
    words: set[str] = set()
    values: list[str] = []
    if rnd.status_code is not None:
        values.append(str(rnd.status_code))
    if rnd.error_type:
        values.append(rnd.error_type.lower())
        values.append(rnd.error_type.lower().replace("_", " "))
        words.update(w for w in rnd.error_type.lower().split("_") if len(w) > 3)
    if rnd.action:
        values.append(rnd.action.lower())
    for name, value in (rnd.action_input or {}).items():
        values.append(str(name).lower())
        if isinstance(value, str | int | float) and str(value).strip():
            values.append(str(value).lower())
    words.update(
        w.lower() for w in _WORD.findall(rnd.observation or "") if w.lower() not in _GENERIC
    )
    return words - _GENERIC, [v for v in values if v]


def _anchored(cause: str, rnd: RoundRecord) -> bool:
    lowered = cause.lower()
    words, values = _anchors(rnd)
    if any(value in lowered for value in values):
        return True
    return any(w.lower() in words for w in _WORD.findall(cause))


def _transient(rnd: RoundRecord) -> bool:
    return rnd.error_type in _TRANSIENT_TYPES or (rnd.status_code in _TRANSIENT_CODES)


def reflection_problems(reflection: Reflection, rnd: RoundRecord) -> list[str]:
    """Why ``reflection`` on round ``rnd`` is a fake one; empty when it is a real one.

    After a successful call the only check is that an expectation called unmet comes
    with a cause. After a failed call (seeds/001 §5.4, §6.2) the reflection must not
    claim success, must name a cause taken from the observation, must admit the failure
    in words, and must change something: ``switch`` or ``stop``, or ``continue`` after an
    upstream failure (retrying is the change) or with a cause that says what to do
    differently.
    """
    cause = reflection.likely_cause.strip()
    if rnd.ok is not False:
        if not reflection.expectation_met and not cause:
            return ["it says the expectation was not met but names no cause"]
        return []
    problems: list[str] = []
    if reflection.expectation_met:
        problems.append(f"it says the expectation was met, but the call failed ({_label(rnd)})")
    if not cause:
        problems.append("it names no cause")
    elif not _anchored(cause, rnd):
        problems.append(
            "its cause cites nothing the observation shows (no status, error type, "
            "argument or detail of the error)"
        )
    if cause and not _ADMITS.search(cause):
        problems.append("its cause does not admit that anything went wrong")
    if (
        reflection.next == "continue"
        and not _transient(rnd)
        and not (cause and _CHANGES.search(cause))
    ):
        problems.append("it carries on ('continue') without saying what to do differently")
    return problems


def reflection_correction(problems: list[str], rnd: RoundRecord) -> str:
    """The re-prompt's message: what was wrong, and what a usable reflection holds."""
    return (
        "Reflection rejected: "
        + "; ".join(problems)
        + f". The observation was [{_label(rnd)}]. Reply again with expectation_met "
        "false if the call failed, a likely_cause that names what the observation shows "
        "(its status, error type, or the field or value it refuses), and a next move "
        "that changes something: switch (another tool or corrected arguments), stop, or "
        "continue only with a cause that says what you will do differently."
    )


def thought_correction(reason: str) -> str:
    """The re-prompt's message when the think validator rejects a thought."""
    return (
        f"Thought rejected: {reason}. State only facts from the user request, the "
        "customer's details and the observations shown to you; do not guess or assume "
        "ids, dates, amounts or statuses. If you need a fact you were not shown, call a "
        "tool to get it or ask the customer. Reply again with one JSON object."
    )
