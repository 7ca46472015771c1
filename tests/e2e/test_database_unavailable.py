"""The production shape served by ``bin/serve`` while its PostgreSQL is stopped: every
request that needs the database is a 503 with a clear message (JSON for the API, a small
page for people), never a 500, and the health check says the database is down, then up
again once PostgreSQL is back.

The cluster and the redis-server are the test's own (the shared PostgreSQL on 5432 is
never stopped). The database is left empty: what is checked is what the web app answers
while the server is away, and the health check once it is back.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_cluster import PgCluster, own_pg_fixture  # noqa: F401
from tests.redis_server import RedisServer, own_redis_fixture  # noqa: F401
from tests.served import ServedApp, production_env

pytestmark = pytest.mark.served

MESSAGE = (
    "The database is unavailable; Agent Ops will answer again when it is back. "
    "Try again in a moment."
)
PASSWORD = "e2e-dsn-password-never-shown"


@pytest.fixture
def served_on_own_pg(own_pg: PgCluster, own_redis: RedisServer) -> Iterator[ServedApp]:
    workdir = Path(tempfile.mkdtemp(prefix="agentops-dbdown-"))
    # The cluster trusts loopback and ignores the password: it must show nowhere.
    url = own_pg.create_database("agentops").replace(
        "postgres://postgres@", f"postgres://postgres:{PASSWORD}@"
    )
    env = production_env(workdir, database_url=url, redis_url=own_redis.url)
    app = ServedApp(shape="production-db-down", env=env, workdir=workdir)
    try:
        app.start(prepare=False)
        yield app
    finally:
        app.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_while_postgresql_is_stopped_the_app_answers_503_and_recovers(
    served_on_own_pg: ServedApp, own_pg: PgCluster
) -> None:
    app = served_on_own_pg
    status, body = app.request("GET", "/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok", "database": "ok"})
    # given PostgreSQL stopped under the running app (fast shutdown)
    own_pg.stop("fast")
    # when an API client lists traces and posts a run (a token needs the database)
    answers = {
        "list": app.request("GET", "/api/traces/", token="0" * 40),
        "post": app.request("POST", "/api/runs/", token="0" * 40, body={"query": "hi"}),
    }
    # and a signed-in person opens a page (the session needs the database)
    page_status, page = app.request("GET", "/traces/", headers={"Cookie": "sessionid=" + "k" * 32})
    health_status, health = app.request("GET", "/healthz")
    try:
        urllib.request.urlopen(app.url + "/healthz", timeout=30)
        raise AssertionError("the health check answered 2xx while PostgreSQL was stopped")
    except urllib.error.HTTPError as exc:
        retry_after = exc.headers.get("Retry-After")
    # then the API answers JSON 503s with the message and its code
    for status, body in answers.values():
        assert status == 503, (body, app.log_tail())
        assert json.loads(body) == {"detail": MESSAGE, "code": "database_unavailable"}
    # the person gets a plain page saying the same
    assert page_status == 503, app.log_tail()
    assert MESSAGE in page.decode() and "<html" in page.decode()
    # the health check reports the database as down
    assert health_status == 503
    assert json.loads(health)["database"] == "unavailable"
    assert retry_after and int(retry_after) > 0
    # and the log has one warning line per request, no traceback, no password
    log = app.log_path.read_text()
    assert log.count("WARNING config.db_unavailable db.unavailable") >= 5
    web_lines = [line for line in log.splitlines() if "django.request" in line]
    assert not web_lines, web_lines
    for text in (log, page.decode(), *(body.decode() for _, body in answers.values())):
        assert PASSWORD not in text
    # when PostgreSQL is back, so is the app
    own_pg.start()
    status, body = app.request("GET", "/healthz")
    assert (status, json.loads(body)["database"]) == (200, "ok")
