"""HTTP clients of the runtime, cheap to make: one TLS context per process.

A new httpx client (an ``openai.AsyncOpenAI`` makes one too) loads the CA bundle into a new
SSL context: 55-75 ms of CPU each time, measured here. A run makes one for its tool calls
and one per model call, so on a busy worker that CPU, not the model, set the pace of every
run in flight. The context is built once and shared (an ``ssl.SSLContext`` is safe to share
between clients and threads); the clients themselves stay per run or per call, since an
httpx connection pool belongs to the event loop it was used on.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS client context: certificate checks as httpx's default."""
    return httpx.create_ssl_context()


def tool_http_client(**options: Any) -> httpx.AsyncClient:
    """A client for tool calls: no proxy or netrc from the environment (``trust_env``)."""
    return httpx.AsyncClient(trust_env=False, verify=tls_context(), **options)
