"""Typed outputs of every model call the runtime makes.

Nothing a model says is trusted: each call's text is parsed into one of these models
(strictly, then leniently for reasoning) before the runtime acts on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FINAL_ANSWER = "final_answer"


class ReasoningStep(BaseModel):
    """One Thought + one Action. ``action`` is a tool name or ``final_answer``."""

    model_config = ConfigDict(extra="ignore")

    thought: str = Field(default="", max_length=4000)
    action: str = Field(min_length=1, max_length=100)
    action_input: dict[str, Any] = Field(default_factory=dict)
    expectation: str = Field(default="", max_length=1000)
    final_answer: str | None = Field(default=None, max_length=8000)

    @property
    def is_final(self) -> bool:
        return self.action == FINAL_ANSWER


class Reflection(BaseModel):
    """The mandatory reflection after every action."""

    model_config = ConfigDict(extra="ignore")

    expectation_met: bool
    likely_cause: str = Field(default="", max_length=1000)
    next: Literal["continue", "switch", "stop"] = "continue"


class RagDraft(BaseModel):
    """A Self-RAG draft answer, written only from the retrieved documents."""

    model_config = ConfigDict(extra="ignore")

    answer: str = Field(min_length=1, max_length=8000)
    cited_slugs: list[str] = Field(default_factory=list, max_length=20)


class RagGrade(BaseModel):
    """The Self-RAG self-grade of a draft against the question and the documents."""

    model_config = ConfigDict(extra="ignore")

    is_grounded: bool
    is_helpful: bool
    critique: str = Field(default="", max_length=2000)
    improved_search_query: str | None = Field(default=None, max_length=500)


def reasoning_json_schema(tools: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The reasoning step's schema for constrained decoding: ``action`` is an enum of the
    run's tool names and ``final_answer``, so a grammar cannot produce any other action.

    Property order is generation order for grammar engines: think first, then act. No
    length bounds (they are checked after parsing, by :class:`ReasoningStep`).
    """
    return {
        "type": "object",
        "properties": {
            "thought": {"type": "string"},
            "action": {"type": "string", "enum": [*tools, FINAL_ANSWER]},
            "action_input": {"type": "object"},
            "expectation": {"type": "string"},
            "final_answer": {"type": "string"},
        },
        "required": ["thought", "action"],
    }
