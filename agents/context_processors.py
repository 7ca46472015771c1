"""Template context shared by every staff page."""

from django.conf import settings
from django.http import HttpRequest


def llm_backend(request: HttpRequest) -> dict[str, object]:
    """Expose the LLM backend so pages can label simulated output as simulated, and
    whether runs stream live (without events the chat keeps polling)."""
    return {
        "llm_backend": settings.LLM_BACKEND,
        "llm_is_simulated": settings.LLM_BACKEND == "simulated",
        "live_run_events": settings.LIVE_RUN_EVENTS,
    }
