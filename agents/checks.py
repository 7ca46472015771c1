"""System checks: the model-call budgets fit inside the deadlines that wait for them.

A local model on two cores is slow; a budget that does not fit ends runs with a time-limit
error, or a CLI with a traceback, instead of the model's answer. ``manage.py check`` (and
every start) says which setting to change.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from agents.llm.structured import SETTING_CHOICES


@checks.register("agents")
def llm_budgets_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    budget = float(settings.LLM_CALL_BUDGET_SECONDS)
    timeout = float(settings.LLM_TIMEOUT_SECONDS)
    run_limit = float(settings.AGENT_RUN_SOFT_TIME_LIMIT)
    reflexion_limit = float(settings.REFLEXION_SOFT_TIME_LIMIT)
    ask_wait = float(settings.ASK_REFLEXION_WAIT_SECONDS)
    if budget < timeout:
        errors.append(
            checks.Error(
                f"LLM_CALL_BUDGET_SECONDS ({budget:g}) is shorter than one attempt's "
                f"LLM_TIMEOUT_SECONDS ({timeout:g}).",
                hint="Raise LLM_CALL_BUDGET_SECONDS or lower LLM_TIMEOUT_SECONDS.",
                id="agents.E101",
            )
        )
    if budget > run_limit:
        errors.append(
            checks.Error(
                f"One model call may take LLM_CALL_BUDGET_SECONDS ({budget:g}), longer than "
                f"a whole run may (AGENT_RUN_SOFT_TIME_LIMIT = {run_limit:g}).",
                hint="Lower LLM_CALL_BUDGET_SECONDS or raise AGENT_RUN_SOFT_TIME_LIMIT "
                "(and AGENT_RUN_HARD_TIME_LIMIT above it).",
                id="agents.E102",
            )
        )
    if budget > reflexion_limit:
        errors.append(
            checks.Error(
                f"The reflexion model call may take LLM_CALL_BUDGET_SECONDS ({budget:g}), "
                f"longer than Reflexion may (REFLEXION_SOFT_TIME_LIMIT = {reflexion_limit:g}).",
                hint="Lower LLM_CALL_BUDGET_SECONDS or raise REFLEXION_SOFT_TIME_LIMIT.",
                id="agents.E103",
            )
        )
    if ask_wait < reflexion_limit:
        errors.append(
            checks.Error(
                f"`manage.py ask` waits ASK_REFLEXION_WAIT_SECONDS ({ask_wait:g}) for "
                f"Reflexion, less than Reflexion may take ({reflexion_limit:g}).",
                hint="Raise ASK_REFLEXION_WAIT_SECONDS to REFLEXION_SOFT_TIME_LIMIT or more.",
                id="agents.E104",
            )
        )
    if settings.AGENT_RUN_HARD_TIME_LIMIT <= settings.AGENT_RUN_SOFT_TIME_LIMIT:
        errors.append(
            checks.Error(
                "AGENT_RUN_HARD_TIME_LIMIT must be above AGENT_RUN_SOFT_TIME_LIMIT.",
                id="agents.E105",
            )
        )
    if settings.LLM_STRUCTURED_OUTPUT not in SETTING_CHOICES:
        errors.append(
            checks.Error(
                f"LLM_STRUCTURED_OUTPUT={settings.LLM_STRUCTURED_OUTPUT!r} is not one of "
                f"{', '.join(SETTING_CHOICES)}.",
                id="agents.E106",
            )
        )
    bad = {
        purpose: value
        for purpose, value in settings.LLM_MAX_TOKENS.items()
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0
    }
    if bad:
        errors.append(
            checks.Error(
                f"LLM_MAX_TOKENS values must be positive integers: {bad}.",
                id="agents.E107",
            )
        )
    return errors
