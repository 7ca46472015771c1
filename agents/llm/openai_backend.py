"""LLM backend for the OpenAI API and any server speaking its chat-completions protocol."""

from __future__ import annotations

import asyncio
import email.utils
import functools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
from pydantic import BaseModel

from agents.http_clients import tls_context
from agents.llm import structured
from agents.llm.base import ChatMessage, LLMError, LLMResponse, LLMUsage
from traces.redaction import redact_text, secret_register

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 8.0
# An error body can be a proxy's whole HTML page; the start says what went wrong.
ERROR_TEXT_MAX_CHARS = 1000
# No retry starts with less time than this left in the call's budget.
MIN_ATTEMPT_SECONDS = 0.1
DEFAULT_MAX_TOKENS: dict[str, int] = {"default": 512}

Sleep = Callable[[float], Awaitable[None]]


@functools.cache
def _model_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """``schema``'s JSON Schema, made once per class (pydantic builds it again on every
    call: about 15% of a model call's client CPU). Shared: never mutated here, since
    ``structured.request_fields`` sends a reshaped copy."""
    return schema.model_json_schema()


class OpenAILLM:
    """Chat completions asking for schema-shaped JSON, retried on transient errors.

    How the request asks for JSON is the structured-output dialect (``agents.llm.
    structured``): a fixed one, or ``auto``, probed once per base URL and model.

    Transient, and retried up to ``max_retries`` times with capped exponential backoff
    and jitter (a ``Retry-After`` header wins when present, within the same cap), while
    the call's ``call_budget_seconds`` lasts: 408, 429, 5xx, client-side timeouts and
    connection errors. A refusal of the request itself fails at once with
    ``LLMError(transient=False)``: every other 4xx, and a 500 whose body says the request
    is unsupported (llama-cpp-python's answer to a response format it does not know).
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
        structured_output: str = "json_schema",
        max_tokens: dict[str, int] | None = None,
        call_budget_seconds: float | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if structured_output not in structured.SETTING_CHOICES:
            raise ValueError(
                f"Unknown structured-output dialect {structured_output!r}; "
                f"use one of {', '.join(structured.SETTING_CHOICES)}."
            )
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.temperature = temperature
        self.price_input_per_mtok = price_input_per_mtok
        self.price_output_per_mtok = price_output_per_mtok
        self.structured_output = structured_output
        self.max_tokens = dict(DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens)
        # None: no budget beyond the retries (each attempt its whole timeout).
        self.call_budget_seconds = (
            call_budget_seconds if call_budget_seconds is not None else math.inf
        )
        self._api_key = api_key
        self._sleep = sleep
        # One SDK client (its connection pool) for every call on one event loop: built per
        # call, each paid the client's set-up and a new connection (a TLS handshake with a
        # hosted API). ``aclose`` releases it.
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        # Servers and proxies echo the key in 401 bodies; no stored field or log may.
        secret_register(api_key)

    def __repr__(self) -> str:
        return f"OpenAILLM(model={self.model!r}, base_url={self.base_url!r})"

    async def complete(
        self,
        *,
        messages: list[ChatMessage],
        schema: type[BaseModel],
        purpose: str,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """Ask for one completion whose text should be JSON matching ``schema``.

        ``json_schema`` replaces ``schema``'s own JSON Schema for constrained decoding
        (the reasoning step sends its tool names as an enum); the text is still parsed
        with ``schema``. Raises LLMError when the server refuses the request, answers with
        something that is not a chat completion, or keeps failing transiently past the
        retries or the call's time budget.
        """
        started = time.monotonic()
        deadline = started + self.call_budget_seconds
        client = self._client_shared()
        dialect = await self.dialect(client)
        request: dict[str, Any] = {
            "model": self.model,
            "temperature": self.temperature,
            **structured.request_fields(
                dialect,
                name=schema.__name__,
                schema=json_schema if json_schema is not None else _model_schema(schema),
                messages=[{"role": m.role, "content": m.content} for m in messages],
            ),
        }
        max_tokens = self.max_tokens.get(purpose) or self.max_tokens.get("default")
        if max_tokens:
            request["max_tokens"] = int(max_tokens)
        completion, attempts = await self._create(client, request, purpose, deadline)

        latency_ms = (time.monotonic() - started) * 1000
        text = structured.completion_text(dialect, completion)
        if text is None:
            logger.warning(
                "llm.error",
                extra={
                    "backend": self.backend,
                    "model": self.model,
                    "purpose": purpose,
                    "attempts": attempts,
                    "reason": "no_content",
                    "dialect": dialect,
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
                "dialect": dialect,
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

    async def _create(
        self, client: openai.AsyncOpenAI, request: dict[str, Any], purpose: str, deadline: float
    ) -> tuple[Any, int]:
        """The completion, retried on transient errors within retries and the deadline."""
        attempts = 0
        while True:
            attempts += 1
            remaining = deadline - time.monotonic()
            failure: Exception
            try:
                completion = await client.chat.completions.create(
                    **request, timeout=max(MIN_ATTEMPT_SECONDS, min(self.timeout, remaining))
                )
                return completion, attempts
            except openai.APIStatusError as exc:
                body = _error_body_text(exc)
                if structured.status_is_request_error(exc.status_code, body):
                    raise self._error(
                        "rejected", exc, purpose, attempts, transient=False, body=body
                    ) from exc
                failure, headers = exc, exc.response.headers
            except openai.APIConnectionError as exc:
                # Also catches APITimeoutError, its subclass.
                failure, headers = exc, None
            except (openai.APIResponseValidationError, ValueError) as exc:
                # A 2xx whose body is not JSON (the SDK raises json's ValueError).
                raise self._error("bad_body", exc, purpose, attempts, transient=False) from exc
            if attempts > self.max_retries:
                raise self._error("exhausted", failure, purpose, attempts) from failure
            delay = _retry_delay(attempts, headers)
            if time.monotonic() + delay + MIN_ATTEMPT_SECONDS > deadline:
                raise self._error("budget", failure, purpose, attempts) from failure
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

    async def dialect(self, client: openai.AsyncOpenAI | None = None) -> str:
        """The structured-output dialect in use: the setting, or the probe's cached result."""
        if self.structured_output != "auto":
            return self.structured_output
        key = structured.cache_key(self.base_url, self.model)
        found = structured.cached_dialect(key)
        if found is not None:
            return found
        if client is None:
            async with self._client_build() as own:
                return await self.probe(own)
        return await self.probe(client)

    async def probe(self, client: openai.AsyncOpenAI | None = None) -> str:
        """Try each constrained dialect once; cache and return the first that works.

        The probe's prompt asks for a colour its schema forbids, so only a server that
        really constrains the output passes; with none, ``prompt``. A server that cannot
        be reached raises LLMError and caches nothing.
        """
        if client is None:
            async with self._client_build() as own:
                return await self.probe(own)
        tried: dict[str, str] = {}
        chosen = "prompt"
        for dialect in structured.PROBE_ORDER:
            request = {
                "model": self.model,
                "temperature": 0,
                "max_tokens": int(self.max_tokens.get("probe") or 64),
                **structured.request_fields(
                    dialect,
                    name="probe",
                    schema=structured.PROBE_SCHEMA,
                    messages=structured.PROBE_MESSAGES,
                ),
            }
            try:
                completion = await client.chat.completions.create(**request, timeout=self.timeout)
            except openai.APIStatusError as exc:
                body = redact_text(_error_body_text(exc), extra_secrets=[self._api_key])
                tried[dialect] = f"HTTP {exc.status_code}: {body[:200]}"
                continue
            except openai.APIConnectionError as exc:
                raise LLMError(
                    f"The structured-output probe could not reach the LLM server: {exc}",
                    transient=True,
                ) from exc
            except (openai.APIResponseValidationError, ValueError) as exc:
                tried[dialect] = f"bad body: {type(exc).__name__}"
                continue
            text = structured.completion_text(dialect, completion)
            if structured.probe_answer_valid(text):
                tried[dialect] = "ok"
                chosen = dialect
                break
            reply = redact_text(text or "", extra_secrets=[self._api_key])
            tried[dialect] = f"unconstrained reply: {reply[:120]!r}"
        key = structured.cache_key(self.base_url, self.model)
        structured.cache_store(key, chosen, tried=tried)
        logger.info(
            "llm.probe", extra={"backend": self.backend, "model": self.model, "dialect": chosen}
        )
        return chosen

    def _client_shared(self) -> openai.AsyncOpenAI:
        """This client's SDK client on the running event loop (made on first use; a client
        made on another loop is left behind, since its connections belong to that loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client, self._client_loop = self._client_build(), loop
        return self._client

    async def aclose(self) -> None:
        """Close the connections the calls left open (a later call opens new ones)."""
        client, loop = self._client, self._client_loop
        self._client = self._client_loop = None
        if client is not None and loop is asyncio.get_running_loop():
            await client.close()

    def _client_build(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self.timeout,
            max_retries=0,
            # the process's TLS context: building one per call cost 75 ms of CPU
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    def _usage(self, completion: Any) -> LLMUsage:
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
        body: str = "",
    ) -> LLMError:
        status_code = getattr(exc, "status_code", None)
        if reason == "rejected":
            detail = body or str(exc)
            text = redact_text(detail, extra_secrets=[self._api_key])[:ERROR_TEXT_MAX_CHARS]
            message = (
                f"the LLM server rejected the structured-output request: HTTP {status_code}: {text}"
            )
            if status_code in (401, 403):
                message = f"the LLM server refused the credentials: HTTP {status_code}: {text}"
            elif status_code == 404:
                message = f"the LLM server does not know this model or path: HTTP 404: {text}"
        else:
            text = redact_text(str(exc), extra_secrets=[self._api_key])[:ERROR_TEXT_MAX_CHARS]
            budget = (
                f" within the call budget of {self.call_budget_seconds:g} s"
                if reason == "budget"
                else ""
            )
            message = (
                f"OpenAI call failed after {attempts} attempt(s){budget}: "
                f"{type(exc).__name__}: {text}"
            )
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
                "error": message,
            },
        )
        return LLMError(message, transient=transient, status_code=status_code)


def _error_body_text(exc: openai.APIStatusError) -> str:
    """The error's body as text (the server's own words), at most ERROR_TEXT_MAX_CHARS."""
    try:
        text = exc.response.text
    except Exception:  # a streamed or closed response
        text = ""
    return (text or str(exc))[:ERROR_TEXT_MAX_CHARS]


def worst_case_call_seconds(timeout: float, max_retries: int) -> float:
    """The longest one call can take: every attempt times out, every backoff is maximal."""
    backoffs = sum(
        min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
        for attempt in range(1, max(0, max_retries) + 1)
    )
    return timeout * (max(0, max_retries) + 1) + backoffs


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
