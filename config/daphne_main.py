"""``python -m config.daphne_main …``: daphne, refusing request bodies over the limit as
they arrive.

Twisted reads a request's whole body (into a temporary file past 100 kB) before daphne
hands it to Django, and Django spools it again before any view, authentication or size
check runs: an unauthenticated POST of 300 MB to any URL filled /tmp with two 300 MB
files before its 401. Here a ``Content-Length`` over ``REQUEST_BODY_MAX_BYTES`` is
answered 413 at once, and a body without one (chunked) is counted as it arrives and
answered 413 when it passes the limit; the connection is closed and nothing is spooled.
Same arguments as ``python -m daphne``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from daphne import http_protocol
from daphne.cli import CommandLineInterface

DEFAULT_MAX_BYTES = 20 * 1024 * 1024


def request_body_max_bytes() -> int:
    try:
        from django.conf import settings

        return int(settings.REQUEST_BODY_MAX_BYTES)
    except Exception:  # settings not configured: the environment, else the default
        return int(os.environ.get("REQUEST_BODY_MAX_BYTES") or DEFAULT_MAX_BYTES)


class _Discarded:
    """Where the rest of a refused body goes: nowhere."""

    closed = True

    def write(self, data: bytes) -> None:
        pass

    def seek(self, *args: Any) -> int:
        return 0

    def read(self, *args: Any) -> bytes:
        return b""

    def close(self) -> None:
        pass


class LimitedWebRequest(http_protocol.WebRequest):
    _received = 0
    _refused = False

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > request_body_max_bytes():
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > request_body_max_bytes():
            self._refuse()
            return
        super().handleContentChunk(data)

    def process(self) -> Any:
        if self._refused:
            return None
        return super().process()

    def _refuse(self) -> None:
        self._refused = True
        self.content = _Discarded()
        limit = request_body_max_bytes()
        body = json.dumps(
            {
                "detail": f"The request body is over the {limit} bytes this server accepts "
                "(REQUEST_BODY_MAX_BYTES)."
            }
        ).encode()
        head = (
            "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        transport = self.channel.transport if self.channel is not None else None
        if transport is not None:
            transport.write(head + body)
            transport.loseConnection()


def install() -> None:
    """Make daphne's HTTP protocol build LimitedWebRequest for every request."""
    # HTTPFactory.buildProtocol reads the module's WebRequest for every connection.
    http_protocol.WebRequest = LimitedWebRequest


if __name__ == "__main__":
    install()
    CommandLineInterface.entrypoint()
