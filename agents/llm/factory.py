"""Build the configured LLM client."""

from __future__ import annotations

from django.conf import settings

from agents.llm.base import LLMClient


def llm_client_build(*, backend: str | None = None) -> LLMClient:
    """Return a client for ``backend`` (default: settings.LLM_BACKEND)."""
    name = backend or settings.LLM_BACKEND
    if name == "simulated":
        from agents.llm.simulated import SimulatedLLM

        return SimulatedLLM(
            seed=settings.LLM_SIM_SEED,
            error_rates=settings.LLM_SIM_ERROR_RATES,
            hint_follow_rate=settings.LLM_SIM_HINT_FOLLOW_RATE,
            latency_ms=settings.LLM_SIM_LATENCY_MS,
        )
    if name == "openai":
        from agents.llm.openai_backend import OpenAILLM
        from agents.llm.pricing import model_price

        price = model_price(
            settings.LLM_MODEL,
            base_url=settings.LLM_BASE_URL or None,
            input_override=settings.LLM_PRICE_INPUT_PER_MTOK,
            output_override=settings.LLM_PRICE_OUTPUT_PER_MTOK,
        )
        return OpenAILLM(
            base_url=settings.LLM_BASE_URL or None,
            api_key=settings.LLM_API_KEY or "not-needed",
            model=settings.LLM_MODEL,
            timeout=settings.LLM_TIMEOUT_SECONDS,
            max_retries=settings.LLM_MAX_RETRIES,
            temperature=settings.LLM_TEMPERATURE,
            price_input_per_mtok=price.input_per_mtok,
            price_output_per_mtok=price.output_per_mtok,
            structured_output=settings.LLM_STRUCTURED_OUTPUT,
            max_tokens=settings.LLM_MAX_TOKENS,
            call_budget_seconds=settings.LLM_CALL_BUDGET_SECONDS,
        )
    raise ValueError(f"Unknown LLM_BACKEND {name!r}: use 'simulated' or 'openai'.")
