"""A real HTTP server on loopback speaking the OpenAI chat-completions wire protocol.

Scripted: each request to ``POST /v1/chat/completions`` (or ``/chat/completions``)
takes the next planned step. A step is a tuple:

- ``("ok", content)`` or ``("ok", content, usage)``: 200 with a chat.completion body;
  ``usage`` is ``{"prompt_tokens": .., "completion_tokens": ..}``.
- ``("status", code)`` or ``("status", code, headers)``: that status with an
  OpenAI-style error body, e.g. ``("status", 429, {"Retry-After": "2"})``.
- ``("hang", seconds)``: waits (interruptibly, ends on shutdown), then answers 200.
- ``("raw", status, body_bytes)`` or ``("raw", status, body_bytes, content_type)``.
- ``("echo_key", status)``: that status with an error body quoting the request's bearer
  token back, as many OpenAI-compatible proxies do on a 401.

With the script empty the server answers 500 saying so. Every request is recorded.
A message whose ``role`` the Chat Completions API does not know is refused before the
script is consulted, as the real API refuses it (400, ``messages[i].role``).

``flavour`` imitates how a server family treats structured-output requests (before the
script is consulted, and without using it):

- ``"openai"`` (default): takes ``response_format`` ``json_schema`` and forced tool calls
  (an ``ok`` step's content becomes the call's arguments); ``json_object`` ignores a
  ``schema``; an unknown field such as ``guided_json`` is a 400.
- ``"llama_cpp"``: llama-cpp-python's server. ``json_schema`` is a 500; ``json_object``
  with a ``schema`` is enforced, but a schema with a ``maxLength``/``maxItems`` bound makes
  a grammar it refuses (500; the real server may crash instead); tools and
  ``guided_json`` are ignored.
- ``"vllm"``: ``guided_json`` is enforced; ``response_format`` ``json_schema`` is a 400
  (older vLLM); tool calls are a 400 (no ``--enable-auto-tool-choice``).
- ``"plain"``: every structured-output field is ignored.

A structured-output probe (a request whose schema has a ``colour`` enum) is answered by
the flavour itself: valid JSON when the dialect is enforced, the colour the prompt asks
for (outside the enum) when it is ignored, as a model that copies its prompt would.

    with FakeOpenAIServer() as server:
        server.enqueue(("status", 429), ("ok", '{"a": 1}'))
        client = OpenAILLM(base_url=server.base_url, ...)
        ...
        assert server.requests[0].json["model"] == "m"

or the ``openai_server`` fixture, made visible to a test module (or conftest) with
``from tests.fakes.openai_server import openai_server_fixture  # noqa: F401``.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions")
# The roles the Chat Completions API accepts in ``messages``.
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
DEFAULT_USAGE = {"prompt_tokens": 10, "completion_tokens": 5}
ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    422: ("invalid_request_error", "unprocessable_entity"),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}

Step = tuple[Any, ...]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any = None
    # The client's (host, port): requests on one kept-alive connection share it.
    peer: tuple[str, int] = ("", 0)


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: with tens of runs opening a connection at once,
    # the kernel dropped the rest of the SYNs, and each of those calls waited a second for
    # the retransmission (or failed), as no real model server makes a client wait.
    request_queue_size = 1024


@dataclass
class FakeOpenAIServer:
    """Threaded loopback server; a context manager, or ``start()`` / ``stop()``."""

    model: str = "fake-model"
    flavour: str = "openai"
    requests: list[RecordedRequest] = field(default_factory=list)
    # With the script empty: a step made from the request's JSON (a model that answers
    # what it is asked, for many runs at once), instead of a 500.
    responder: Callable[[Any], Step] | None = None

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"Unknown fake server flavour {self.flavour!r}: {FLAVOURS}")
        self._script: collections.deque[Step] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections_open = 0

    def __enter__(self) -> FakeOpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("The fake OpenAI server is not running.")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *steps: Step) -> None:
        """Append planned responses, answered in order, one per request."""
        for step in steps:
            if not step or step[0] not in {"ok", "status", "hang", "raw", "echo_key"}:
                raise ValueError(f"Unknown fake OpenAI step: {step!r}")
        with self._lock:
            self._script.extend(steps)

    @property
    def remaining(self) -> int:
        """Planned responses not yet used."""
        with self._lock:
            return len(self._script)

    @property
    def connections_open(self) -> int:
        """Client connections this server has accepted and not yet seen closed."""
        with self._lock:
            return self._connections_open

    def connections_closed(self, *, within: float = 5.0) -> bool:
        """Wait until every client connection is closed; False if one is still open after
        ``within`` seconds (the server learns of a close on its handler thread)."""
        deadline = time.monotonic() + within
        while self.connections_open:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # the poll interval: no event marks a handler's end
        return True

    def _connection_count(self, change: int) -> None:
        with self._lock:
            self._connections_open += change

    def start(self) -> None:
        self._stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), _handler_class(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai-server",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        # Set first so hanging handlers wake up instead of holding shutdown.
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def _next_step(self, request: Any = None) -> Step | None:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return self.responder(request) if self.responder is not None else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def structured_verdict(self, request: Any) -> tuple[str, Any]:
        """How this flavour treats the request's structured-output fields.

        ``("reject", (status, message))``, ``("enforce", schema)``, ``("tool", schema)``
        (enforced as a forced tool call) or ``("ignore", None)``.
        """
        if not isinstance(request, dict):
            return "ignore", None
        response_format = request.get("response_format") or {}
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        tools = request.get("tools") or []
        forced_tool = bool(tools) and isinstance(request.get("tool_choice"), dict)
        guided = request.get("guided_json")
        if self.flavour == "openai":
            if guided is not None:
                return "reject", (400, "Unrecognized request argument supplied: guided_json")
            if kind == "json_schema":
                return "enforce", response_format.get("json_schema", {}).get("schema")
            if forced_tool:
                return "tool", tools[0].get("function", {}).get("parameters")
            return "ignore", None
        if self.flavour == "llama_cpp":
            if kind == "json_schema":
                # What llama-cpp-python 0.3.x answers: FastAPI's validation error, wrapped
                # as a 500 by its error handler.
                return "reject", (
                    500,
                    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                    "'msg': \"Input should be 'text' or 'json_object'\", "
                    "'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}]",
                )
            if kind == "json_object" and isinstance(response_format.get("schema"), dict):
                schema = response_format["schema"]
                if _has_repetition_bound(schema):
                    return "reject", (500, "failed to parse grammar: number of repetitions")
                return "enforce", schema
            return "ignore", None
        if self.flavour == "vllm":
            if kind == "json_schema":
                return "reject", (400, "response_format json_schema is not supported")
            if forced_tool:
                return "reject", (400, '"auto" tool choice requires --enable-auto-tool-choice')
            if isinstance(guided, dict):
                return "enforce", guided
            return "ignore", None
        return "ignore", None

    def completion_body(
        self,
        content: str | None,
        usage: dict[str, int] | None = None,
        *,
        tool_name: str | None = None,
    ) -> bytes:
        """A chat.completion JSON body, as the OpenAI API returns it."""
        usage = usage if usage is not None else DEFAULT_USAGE
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        completion_tokens = int(usage.get("completion_tokens", 0))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_name:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "function",
                        "function": {"name": tool_name, "arguments": content or ""},
                    }
                ],
            }
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_name else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return json.dumps(body).encode()


FLAVOURS = ("openai", "llama_cpp", "vllm", "plain")


def _has_repetition_bound(schema: Any) -> bool:
    if isinstance(schema, dict):
        if any(key in schema for key in ("maxLength", "maxItems")):
            return True
        return any(_has_repetition_bound(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_has_repetition_bound(item) for item in schema)
    return False


def _is_probe(schema: Any) -> bool:
    return isinstance(schema, dict) and "colour" in (schema.get("properties") or {})


def _probe_reply(request: dict[str, Any], verdict: str, schema: Any) -> str:
    """What a model answers the probe: in the enum when enforced, else what it was asked."""
    if verdict in ("enforce", "tool") and _is_probe(schema):
        return json.dumps({"ok": True, "colour": schema["properties"]["colour"]["enum"][-1]})
    return json.dumps({"ok": True, "colour": "blue"})


def _request_is_probe(request: Any) -> bool:
    if not isinstance(request, dict):
        return False
    text = json.dumps(request.get("messages") or [])
    return "colour" in text and '\\"blue\\"' in text


def _unknown_role(request: Any) -> str:
    """The API's refusal of the first message with a role it does not know, or ""."""
    messages = request.get("messages") if isinstance(request, dict) else None
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in MESSAGE_ROLES:
            supported = ", ".join(repr(r) for r in MESSAGE_ROLES)
            return (
                f"Invalid value: {role!r}. Supported values are: {supported}. "
                f"(param: messages[{index}].role)"
            )
    return ""


def error_body(status: int, message: str) -> bytes:
    """An OpenAI-style error body."""
    error_type, code = ERROR_TYPES.get(status, ("server_error", "server_error"))
    return json.dumps({"error": {"message": message, "type": error_type, "code": code}}).encode()


def _handler_class(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as real servers set it: the headers and the body go out in two
        # writes, and on a kept-alive connection Nagle's algorithm held the body back for
        # the client's delayed ACK (about 40 ms per call).
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            server._connection_count(+1)

        def finish(self) -> None:
            server._connection_count(-1)
            super().finish()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parsed: Any
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            path = self.path.split("?", 1)[0]
            server._record(
                RecordedRequest(
                    method="POST",
                    path=path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    json=parsed,
                    peer=(str(self.client_address[0]), int(self.client_address[1])),
                )
            )
            if path not in COMPLETION_PATHS:
                self._send(404, error_body(404, f"Unknown path {path}"))
                return
            refused = _unknown_role(parsed)
            if refused:
                self._send(400, error_body(400, refused))
                return
            verdict, detail = server.structured_verdict(parsed)
            if verdict == "reject":
                status, message = detail
                self._send(status, error_body(status, message))
                return
            tool_name = None
            if verdict == "tool":
                tool_name = parsed["tools"][0]["function"]["name"]
            if _request_is_probe(parsed):
                reply = _probe_reply(parsed, verdict, detail)
                self._send(200, server.completion_body(reply, tool_name=tool_name))
                return
            self._answer(server._next_step(parsed), tool_name=tool_name)

        def _answer(self, step: Step | None, *, tool_name: str | None = None) -> None:
            if step is None:
                message = "Fake OpenAI server: no scripted response left for this request."
                self._send(500, error_body(500, message))
                return
            kind = step[0]
            if kind == "ok":
                usage = step[2] if len(step) > 2 else None
                self._send(200, server.completion_body(step[1], usage, tool_name=tool_name))
            elif kind == "status":
                status = int(step[1])
                headers = step[2] if len(step) > 2 else {}
                message = f"Fake OpenAI server: scripted status {status}."
                self._send(status, error_body(status, message), headers=headers)
            elif kind == "hang":
                if server._stopping.wait(float(step[1])):
                    return
                self._send(200, server.completion_body("{}"))
            elif kind == "echo_key":
                status = int(step[1])
                authorization = self.headers.get("Authorization", "")
                key = authorization.removeprefix("Bearer ").strip()
                message = (
                    f"Incorrect API key provided: {key}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys."
                )
                self._send(status, error_body(status, message))
            elif kind == "raw":
                content_type = step[3] if len(step) > 3 else "application/json"
                self._send(int(step[1]), bytes(step[2]), content_type=content_type)

        def _send(
            self,
            status: int,
            body: bytes,
            *,
            headers: dict[str, str] | None = None,
            content_type: str = "application/json",
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (a timeout test); nothing left to tell it.
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture(name="openai_server")
def openai_server_fixture() -> Iterator[FakeOpenAIServer]:
    """A running fake OpenAI server, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
