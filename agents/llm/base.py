"""The one interface every LLM backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel


class LLMError(Exception):
    """The backend could not produce an answer (after its retries)."""

    def __init__(self, message: str, *, transient: bool = False, status_code: int | None = None):
        super().__init__(message)
        self.transient = transient
        self.status_code = status_code


@dataclass(frozen=True)
class LLMUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LLMResponse:
    """Raw text of one completion; the runtime parses it into a typed model."""

    text: str
    backend: str
    model: str
    usage: LLMUsage = field(default_factory=LLMUsage)
    latency_ms: float = 0.0
    attempts: int = 1


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


class LLMClient(Protocol):
    """Backends: ``openai`` (any OpenAI-compatible server) and ``simulated``."""

    backend: str
    model: str

    async def complete(
        self,
        *,
        messages: list[ChatMessage],
        schema: type[BaseModel],
        purpose: str,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """Ask for one completion whose text should be JSON matching ``schema``.

        ``purpose`` names the call ("reasoning", "reflection", ...) for logs, usage and
        its ``max_tokens``. ``json_schema``, when given, is what constrained decoding
        enforces instead of ``schema``'s own (tool names as an enum, say).
        Raises LLMError when no answer could be had.
        """
        ...


async def llm_close(llm: object) -> None:
    """Release what a client keeps between its calls (the OpenAI backend's connections);
    clients that keep nothing have no ``aclose``."""
    close = getattr(llm, "aclose", None)
    if close is not None:
        await close()
