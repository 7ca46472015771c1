"""A step as the trace store takes it: what the runtime (``agents``) hands the recorder.

Defined here, in the lowest layer, so that the store never imports the runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepRecord:
    """One persisted phase. Field names match ``traces.models.Step``."""

    phase: str
    round_number: int
    thought: str = ""
    action_type: str = "none"
    tool_name: str = ""
    action_input: dict[str, Any] = field(default_factory=dict)
    endpoint: str = ""
    request_payload: dict[str, Any] = field(default_factory=dict)
    status_code: int | None = None
    ok: bool = True
    error_type: str = ""
    error_detail: str = ""
    response_size: int = 0
    response_summary: str = ""
    latency_ms: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    llm_backend: str = ""
    parse_mode: str = ""
    adapters_fired: list[dict[str, Any]] = field(default_factory=list)
    strategies_applied: list[Any] = field(default_factory=list)
    strategy_version: str = ""
    idempotency_key: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # Set by the sink when it stores the record (0 until then): what facts point back to.
    step_number: int = 0
