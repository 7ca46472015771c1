"""LLM backend for the OpenAI API and any server speaking its chat-completions protocol."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from agents.llm.base import ChatMessage, LLMError, LLMResponse, LLMUsage
from traces.redaction import redact_text, secret_register

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 8.0
# An error body can be a proxy's whole HTML page; the start says what went wrong.
ERROR_TEXT_MAX_CHARS = 1000

Sleep = Callable[[float], Awaitable[None]]


class OpenAILLM:
    """Chat completions with a JSON-schema response format, retried on transient errors.

    Transient, and retried up to ``max_retries`` times with capped exponential backoff
    and jitter (a ``Retry-After`` header wins when present, within the same cap):
    429, any 5xx, client-side timeouts and connection errors. Every other status
    (400, 401, 403, 404, 422, ...) fails at once with ``LLMError(transient=False)``.
    The SDK's own retries are off so that this policy is the only one.

    The completion text is returned unparsed: malformed JSON is the runtime parser's
    business, not an error here.
    """

    backend = "openai"

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        model: str,
        timeout: float,
        max_retries: int,
        temperature: float,
        price_input_per_mtok: float,
        price_output_per_mtok: float,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.temperature = temperature
        self.price_input_per_mtok = price_input_per_mtok
        self.price_output_per_mtok = price_output_per_mtok
        self._api_key = api_key
        self._sleep = sleep
        # Servers and proxies echo the key in 401 bodies; no stored field or log may.
        secret_register(api_key)

    def __repr__(self) -> str:
        return f"OpenAILLM(model={self.model!r}, base_url={self.base_url!r})"

    async def complete(
        self, *, messages: list[ChatMessage], schema: type[BaseModel], purpose: str
    ) -> LLMResponse:
        """Ask for one completion whose text should be JSON matching ``schema``.

        Raises LLMError when the server refuses the request, answers with something
        that is not a chat completion, or keeps failing transiently past the retries.
        """
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": self.temperature,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.__name__,
                    "schema": schema.model_json_schema(),
                    "strict": False,
                },
            },
        }
        started = time.monotonic()
        attempts = 0
        # A client per call: callers drive this from a fresh event loop each time
        # (async_to_sync, asyncio.run), and pooled connections must not outlive their loop.
        async with self._client_build() as client:
            while True:
                attempts += 1
                try:
                    completion = await client.chat.completions.create(**request)
                    break
                except openai.APIStatusError as exc:
                    if not _status_is_transient(exc.status_code):
                        raise self._error(
                            "rejected", exc, purpose, attempts, transient=False
                        ) from exc
                    if attempts > self.max_retries:
                        raise self._error("exhausted", exc, purpose, attempts) from exc
                    delay = _retry_delay(attempts, exc.response.headers)
                except openai.APIConnectionError as exc:
                    # Also catches APITimeoutError, its subclass.
                    if attempts > self.max_retries:
                        raise self._error("exhausted", exc, purpose, attempts) from exc
                    delay = _retry_delay(attempts, None)
                except (openai.APIResponseValidationError, ValueError) as exc:
                    # A 2xx whose body is not JSON (the SDK raises json's ValueError).
                    raise self._error("bad_body", exc, purpose, attempts, transient=False) from exc
                logger.warning(
                    "llm.retry",
                    extra={
                        "backend": self.backend,
                        "model": self.model,
                        "purpose": purpose,
                        "attempt": attempts,
                        "delay_s": round(delay, 3),
                    },
                )
                await self._sleep(delay)

        latency_ms = (time.monotonic() - started) * 1000
        text = _completion_text(completion)
        if text is None:
            logger.warning(
                "llm.error",
                extra={
                    "backend": self.backend,
                    "model": self.model,
                    "purpose": purpose,
                    "attempts": attempts,
                    "reason": "no_content",
                },
            )
            raise LLMError(
                "The response is not a chat completion with message content.", transient=False
            )

        usage = self._usage(completion)
        model = getattr(completion, "model", None) or self.model
        logger.info(
            "llm.call",
            extra={
                "backend": self.backend,
                "model": model,
                "purpose": purpose,
                "attempts": attempts,
                "latency_ms": round(latency_ms, 1),
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cost_usd": usage.cost_usd,
            },
        )
        return LLMResponse(
            text=text,
            backend=self.backend,
            model=model,
            usage=usage,
            latency_ms=latency_ms,
            attempts=attempts,
        )

    def _client_build(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self.timeout,
            max_retries=0,
        )

    def _usage(self, completion: ChatCompletion) -> LLMUsage:
        usage = getattr(completion, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = (
            prompt_tokens * self.price_input_per_mtok
            + completion_tokens * self.price_output_per_mtok
        ) / 1_000_000
        return LLMUsage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost_usd=cost
        )

    def _error(
        self,
        reason: str,
        exc: Exception,
        purpose: str,
        attempts: int,
        *,
        transient: bool = True,
    ) -> LLMError:
        status_code = getattr(exc, "status_code", None)
        logger.warning(
            "llm.error",
            extra={
                "backend": self.backend,
                "model": self.model,
                "purpose": purpose,
                "attempts": attempts,
                "reason": reason,
                "status_code": status_code,
                "error_type": type(exc).__name__,
            },
        )
        text = redact_text(str(exc), extra_secrets=[self._api_key])[:ERROR_TEXT_MAX_CHARS]
        return LLMError(
            f"OpenAI call failed after {attempts} attempt(s): {type(exc).__name__}: {text}",
            transient=transient,
            status_code=status_code,
        )


def _status_is_transient(status_code: int) -> bool:
    return status_code == 429 or status_code >= 500


def _retry_delay(attempt: int, headers: httpx.Headers | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based)."""
    retry_after = _retry_after_seconds(headers) if headers is not None else None
    if retry_after is not None:
        return min(retry_after, BACKOFF_CAP_SECONDS)
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
    # Equal jitter: keeps a floor so retries never hammer, spreads the rest.
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _retry_after_seconds(headers: httpx.Headers) -> float | None:
    retry_after_ms = headers.get("retry-after-ms")
    if retry_after_ms is not None:
        try:
            return max(0.0, float(retry_after_ms) / 1000)
        except ValueError:
            pass
    retry_after = headers.get("retry-after")
    if retry_after is None:
        return None
    try:
        return max(0.0, float(retry_after))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _completion_text(completion: object) -> str | None:
    """The first choice's content, or None when the body is not a usable completion."""
    # Without strict response validation the SDK hands back a plain str for a
    # non-JSON content type, and builds models without the fields a server left out.
    if not isinstance(completion, ChatCompletion):
        return None
    choices = getattr(completion, "choices", None)
    if not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None
