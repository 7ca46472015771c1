"""What a model's tokens cost, for the cost columns of steps and traces.

USD per 1M input and output tokens. A model served on this machine or a private network
(llama.cpp, vLLM, Ollama on loopback) costs 0: its cost is hardware, not tokens. An
unknown hosted model also costs 0, with a warning in the log, rather than a guess.
``LLM_PRICE_INPUT_PER_MTOK`` / ``LLM_PRICE_OUTPUT_PER_MTOK`` override the table.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    source: str


# Longest prefix wins: "gpt-4o-mini-2024-07-18" is priced as "gpt-4o-mini".
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "o3-mini": (1.10, 4.40),
    "gpt-3.5-turbo": (0.50, 1.50),
}

LOCAL_HOSTS = frozenset({"localhost", "host.docker.internal"})


def server_is_local(base_url: str | None) -> bool:
    """Whether ``base_url`` points at this machine or a private network."""
    if not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    if host in LOCAL_HOSTS or host.endswith(".local") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def model_price(
    model: str,
    *,
    base_url: str | None,
    input_override: float | None = None,
    output_override: float | None = None,
) -> Price:
    """The price of ``model`` on the server at ``base_url``."""
    if input_override is not None or output_override is not None:
        return Price(input_override or 0.0, output_override or 0.0, "settings")
    if server_is_local(base_url):
        return Price(0.0, 0.0, "local")
    name = model.lower().rsplit("/", 1)[-1]
    for prefix in sorted(PRICES_PER_MTOK, key=len, reverse=True):
        if name.startswith(prefix):
            price_in, price_out = PRICES_PER_MTOK[prefix]
            return Price(price_in, price_out, f"table:{prefix}")
    logger.warning("llm.price_unknown", extra={"model": model})
    return Price(0.0, 0.0, "unknown")
