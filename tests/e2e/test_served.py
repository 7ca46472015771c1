"""The product as ``make run`` (embedded) and the production shape serve it: daphne,
the in-process worker or a real Celery worker, production settings, token auth."""

from __future__ import annotations

import json
import urllib.error
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.served import ServedApp, app_teardown, embedded_app

pytestmark = pytest.mark.served


def test_a_run_posted_with_a_token_ends_terminal_with_its_steps(served: ServedApp) -> None:
    # given a support agent's API token, made from a second shell of the installation
    token = served.api_token("support")
    # when a run is posted the way the README shows
    status, body = served.request(
        "POST",
        "/api/runs/",
        token=token,
        body={"query": f"Where is my order {served.demo_order}?"},
    )
    assert status == 202, body
    trace_id = json.loads(body)["id"]
    # then it ends, answered from the sandbox, with every step recorded
    trace = served.wait_terminal(trace_id, token=token)
    assert trace["status"] == "finished", (trace, served.log_tail())
    assert served.demo_order in trace["final_answer"]
    status, body = served.request("GET", f"/api/traces/{trace_id}/steps/", token=token)
    assert status == 200, body
    steps = json.loads(body)
    assert len(steps) == trace["total_steps"] >= 3
    assert {"reasoning", "action", "final"} <= {step["phase"] for step in steps}


def test_a_request_without_credentials_is_refused(served: ServedApp) -> None:
    status, _ = served.request("POST", "/api/runs/", body={"query": "hi"})
    assert status in (401, 403)


def _otlp_body(trace_hex: str, spans: list[tuple[str, str, str, int]]) -> dict:
    """OTLP/JSON with GenAI spans (span id, parent id, operation, HTTP status or 0)."""

    def attr(key: str, value: str | int) -> dict:
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [attr("service.name", "served-otel-agent")]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_hex,
                                "spanId": span_id,
                                "parentSpanId": parent,
                                "name": operation,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000001000000000",
                                "attributes": [attr("gen_ai.operation.name", operation)]
                                + (
                                    [
                                        attr("gen_ai.tool.name", "get_order"),
                                        attr("http.response.status_code", status),
                                    ]
                                    if status
                                    else []
                                ),
                                "status": {"code": 2 if status >= 400 else 0},
                            }
                            for span_id, parent, operation, status in spans
                        ]
                    }
                ],
            }
        ]
    }


def test_otlp_spans_sent_in_pieces_and_resent_make_one_classified_trace(
    served: ServedApp,
) -> None:
    # given an ops token, and a trace exported in two requests, children first
    token = served.api_token("ops")
    trace_hex = uuid.uuid4().hex
    children = [("00000000000000b2", "00000000000000b1", "execute_tool", 404)]
    root = [("00000000000000b1", "", "invoke_agent", 0)]
    for spans in (children, children, root, root):  # each request sent twice (a retry)
        status, body = served.request(
            "POST", "/otlp/v1/traces", token=token, body=_otlp_body(trace_hex, spans)
        )
        assert status == 200, (body, served.log_tail())
    # then the served shape (SQLite embedded, PostgreSQL in production) holds one trace
    trace_id = str(uuid.UUID(hex=trace_hex))
    status, body = served.request("GET", f"/api/traces/{trace_id}/", token=token)
    assert status == 200, body
    trace = json.loads(body)
    assert (trace["status"], trace["error_type"], trace["total_steps"]) == (
        "failed",
        "RESOURCE_NOT_FOUND",
        1,
    )


LEAKS = (
    "Using the URLconf",
    "urlpatterns",
    "Traceback",
    "DJANGO_SETTINGS_MODULE",
    "CELERY_BROKER_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "CHANNEL_LAYERS",
)


def test_production_unknown_page_shows_the_apps_own_404(production_server: ServedApp) -> None:
    status, body = production_server.request("GET", "/no-such-page")
    page = body.decode()
    assert status == 404
    assert "Agent Ops" in page
    for leak in LEAKS:
        assert leak not in page


def test_production_forced_error_shows_the_apps_own_500(production_server: ServedApp) -> None:
    # given a database that lost a table under the running app
    token = production_server.api_token("ops")
    browser = production_server.login("ops", "ops-demo")
    url = production_server.env["DATABASE_URL"].replace("postgres://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE traces_trace RENAME TO traces_trace_away")
        try:
            # when a page and an API list need it
            try:
                browser.open(production_server.url + "/traces/", timeout=30)
                raise AssertionError("the page did not fail")
            except urllib.error.HTTPError as exc:
                page_status, page = exc.code, exc.read().decode()
            api_status, api_body = production_server.request("GET", "/api/traces/", token=token)
        finally:
            conn.execute("ALTER TABLE traces_trace_away RENAME TO traces_trace")
    # then the page is the app's own, the API answers JSON, and neither shows its settings
    assert page_status == 500
    assert "Agent Ops" in page
    assert api_status == 500
    assert json.loads(api_body) == {"detail": "A server error occurred."}
    for leak in LEAKS:
        assert leak not in page
        assert leak not in api_body.decode()


def test_bin_serve_alone_on_a_fresh_installation_lets_the_demo_users_log_in(
    tmp_path: Path,
) -> None:
    # given a fresh checkout's state: no env file, no database, nothing migrated or seeded
    app = embedded_app(tmp_path)
    try:
        # when a user starts bin/serve and nothing else
        app.start(prepare=False)
        # then the printed demo logins work and the assistant opens
        browser = app.login("support", "support-demo")
        with browser.open(app.url + "/", timeout=30) as response:
            assert response.status == 200
            assert "Support assistant" in response.read().decode()
    finally:
        app_teardown(app)


def test_production_web_keeps_no_database_connection_per_request(
    production_server: ServedApp,
) -> None:
    # given an ops token and 48 requests at once to a page that reads the database
    token = production_server.api_token("ops")
    from concurrent.futures import ThreadPoolExecutor

    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    database = production_server.database_name

    def sessions_opened() -> int:
        with psycopg.connect(admin) as conn:
            row = conn.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = %s", [database]
            ).fetchone()
        assert row is not None
        return int(row[0])

    before = sessions_opened()
    with ThreadPoolExecutor(max_workers=48) as pool:
        statuses = list(
            pool.map(
                lambda _: production_server.request("GET", "/api/traces/", token=token)[0],
                range(48),
            )
        )
    opened = sessions_opened() - before
    assert statuses == [200] * 48
    # then the requests borrowed connections from daphne's bounded pool (DB_POOL_MAX_SIZE,
    # 20) instead of opening one each (48), and the web holds no more than the pool's size;
    # the worker's and beat's are theirs (persistent, one per thread that used one)
    assert opened < 48, (opened, production_server.log_tail())
    with psycopg.connect(admin) as conn:
        held = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND application_name = 'agentops-web'",
            [database],
        ).fetchone()
    assert held is not None and 1 <= held[0] <= 20, (held, production_server.log_tail())


def _raw_post(served: ServedApp, head: bytes, chunks: int = 0) -> bytes:
    """Send ``head`` then ``chunks`` 1 MiB chunks (chunked encoding) on a raw socket; return
    what the server answered before it closed."""
    import socket

    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(head)
        try:
            for _ in range(chunks):
                sock.sendall(b"100000\r\n" + b"\0" * 0x100000 + b"\r\n")
        except OSError:
            pass  # the server stopped reading: it answered already
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            answer += data
    return answer


def test_a_body_over_the_limit_is_refused_before_it_is_read_or_authenticated(
    served: ServedApp,
) -> None:
    """An unauthenticated 300 MB POST used to be spooled to /tmp twice (Twisted's file,
    then Django's) before its 401."""
    declared = _raw_post(
        served,
        b"POST /otlp/v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\nContent-Length: 300000000\r\n\r\n",
    )
    chunked = _raw_post(
        served,
        b"POST /otlp/v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n",
        chunks=40,
    )
    for answer in (declared, chunked):
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"REQUEST_BODY_MAX_BYTES" in answer
    # and the server goes on serving
    status, _ = served.request("GET", "/healthz")
    assert status == 200
