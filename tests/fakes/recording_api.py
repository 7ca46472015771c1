"""A real HTTP API on loopback that records every request and answers with JSON.

Stands in for a third-party API that needs a credential: tests point a tool (through
``SANDBOX_BASE_URL``, the one loopback origin the SSRF guard exempts) at it and check what
arrived. ``respond`` builds each answer from the recorded request, so a test can make the
API echo the credential back the way careless APIs do.

    with RecordingAPI(respond=lambda req: (200, {"ok": True})) as api:
        ... api.base_url ... api.requests[0].headers["x-api-key"]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class ApiRequest:
    """One request as received; header names lower-cased, query values as lists."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


# (status, JSON payload) or (status, JSON payload, extra response headers).
Responder = Callable[[ApiRequest], tuple[Any, ...]]


@dataclass
class RecordingAPI:
    """Threaded loopback server; a context manager."""

    respond: Responder = lambda request: (200, {"ok": True})
    requests: list[ApiRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RecordingAPI:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="recording-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("The recording API is not running.")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/api"

    def _record(self, request: ApiRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _handler_class(api: RecordingAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            parts = urlsplit(self.path)
            request = ApiRequest(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self.rfile.read(length) if length else b"",
            )
            api._record(request)
            status, payload, *extra = api.respond(request)
            body = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler
