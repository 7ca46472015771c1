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

import httpcore
import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS client context: certificate checks as httpx's default."""
    return httpx.create_ssl_context()


def tool_http_client(**options: Any) -> httpx.AsyncClient:
    """A client for tool calls: no proxy or netrc from the environment (``trust_env``), and
    the SSRF check again as each connection opens (``SSRFGuardedBackend``), on the address
    it connects to. ``resolver``: how host names are looked up (tests)."""
    from agents.tools.endpoints import sandbox_host
    from agents.tools.ssrf import SSRFGuardedBackend

    resolver = options.pop("resolver", None)
    backend = SSRFGuardedBackend(
        exempt_hosts=lambda: {sandbox_host()},
        **({"resolver": resolver} if resolver is not None else {}),
    )
    return httpx.AsyncClient(trust_env=False, transport=_GuardedTransport(backend), **options)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport on a network backend of the caller's. httpx takes no backend, so
    its connection pool is made again with the same settings and this one (a test sends
    a request through it: ``tests/agents/test_ssrf.py``)."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        super().__init__(verify=tls_context(), trust_env=False)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=5.0,
            network_backend=backend,
        )
