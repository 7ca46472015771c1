"""Crash drill: restart PostgreSQL under load, and see what the web app answers meanwhile
and whether the runs in flight end.

    make drill-pg-restart     # = python -m bench.pg_restart_drill --runs 60 --outage 15

It starts a PostgreSQL cluster of its own (``initdb`` into a temporary directory, a free
loopback port: the shared server on 5432 is never touched) and a redis-server of its own,
migrates and seeds the demo (``manage.py migrate`` + ``demo_seed``), and serves the
production shape with ``bin/serve`` against them (daphne, the sandbox's server, a
supervised Celery worker and beat; production settings, plain HTTP on loopback). The model
is the simulated one at ``--model-latency`` seconds per call, so that runs are in flight
when the database goes. The run time limits are short (soft 12 s, hard 15 s, the
stuck-run sweeper every 5 s) so that a run left behind comes back within the drill.

Load: one thread posts runs through the API (``POST /api/runs/``, ``--rate`` per second,
until ``--runs`` were accepted); three more poll the API list, a page of a logged-in user
and ``/healthz`` and record every status code, body and wait, by the phase each request was
sent in. After ``--before`` seconds of load, PostgreSQL is stopped (fast shutdown: sessions
are ended at once) for ``--outage`` seconds and started again on the same port and
directory. The outage outlasts the web servers' pool timeout (``DB_POOL_TIMEOUT``, 10 s),
which a request waits for a connection before it is answered 503. The DSN carries a
password (the cluster trusts loopback and ignores it) that must appear in no answer and no
log line.

It reports runs posted, runs terminal, runs lost (not terminal when the deadline passed),
the 500s and 503s seen, whether every 503 carried the message, and the time to recover
(the first 200 after PostgreSQL accepts connections again); written to
bench/results/pg-restart-latest.{json,md}. It stops by itself (``--deadline``) and, on exit
or SIGTERM, stops every process it started and removes the cluster's directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
MESSAGE = "The database is unavailable"
DSN_PASSWORD = "drill-dsn-password-must-not-leak"
TERMINAL = ("finished", "fallback", "failed")


class Recorder:
    """Every answer the pollers saw, by phase (before, outage, after) and status."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: dict[str, Counter[str]] = {}
        # The longest wait for each kind of answer, by the phase the request was sent in.
        self.slowest: dict[str, dict[str, float]] = {}
        self.examples: dict[str, str] = {}
        self.leaks: list[str] = []
        self.bad_503: list[str] = []
        self.first_ok_after: float | None = None

    def record(
        self, *, phase: str, what: str, status: int, body: bytes, headers: Any, seconds: float
    ) -> None:
        text = body.decode(errors="replace")
        with self.lock:
            self.statuses.setdefault(phase, Counter())[f"{what} {status}"] += 1
            key = f"{what} {status}"
            slowest = self.slowest.setdefault(phase, {})
            slowest[key] = round(max(slowest.get(key, 0.0), seconds), 2)
            if key not in self.examples:
                self.examples[key] = text[:300]
            if DSN_PASSWORD in text:
                self.leaks.append(f"{what} {status}")
            if status == 503 and (
                MESSAGE not in text or not (headers and headers.get("Retry-After"))
            ):
                self.bad_503.append(f"{what}: {text[:200]}")

    def count(self, status: int) -> int:
        with self.lock:
            return sum(
                n
                for counter in self.statuses.values()
                for key, n in counter.items()
                if key.endswith(f" {status}")
            )


def _call(
    url: str, *, method: str = "GET", token: str = "", body: Any = None, opener: Any = None
) -> tuple[int, bytes, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Token {token}")
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=15) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers
    except OSError as exc:  # the web process itself not answering
        return 0, str(exc).encode(), None


def drill(
    *,
    runs: int,
    rate: float,
    before_s: float,
    outage_s: float,
    deadline_s: float,
    model_latency_s: float,
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import psycopg

    from tests.pg_cluster import PgCluster
    from tests.redis_server import RedisServer, free_port
    from tests.served import ServedApp, production_env

    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="agentops-pgdrill-"))
    cluster = PgCluster()
    redis_server = RedisServer(free_port(), workdir / "redis.log")
    app: ServedApp | None = None
    result: dict[str, Any] = {
        "runs_planned": runs,
        "rate_per_s": rate,
        "outage_s": outage_s,
        "model_latency_s": model_latency_s,
    }
    recorder = Recorder()
    phase = ["before"]
    stop = threading.Event()
    posted: list[str] = []
    post_statuses: Counter[str] = Counter()
    try:
        cluster.init()
        cluster.start()
        cluster.create_database("agentops")
        redis_server.start()
        database_url = f"postgres://postgres:{DSN_PASSWORD}@127.0.0.1:{cluster.port}/agentops"
        env = production_env(workdir, database_url=database_url, redis_url=redis_server.url)
        env.update(
            {
                "LLM_BACKEND": "simulated",
                # Runs queue while the database is away, all one user's: no limit on them.
                "AGENT_RUNS_IN_FLIGHT_PER_USER": "0",
                "LLM_SIM_LATENCY_MS": str(int(model_latency_s * 1000)),
                "LLM_SIM_ERROR_RATES": "{}",
                "LLM_TIMEOUT_SECONDS": "2",
                "LLM_CALL_BUDGET_SECONDS": "5",
                "AGENT_RUN_SOFT_TIME_LIMIT": "12",
                "AGENT_RUN_HARD_TIME_LIMIT": "15",
                "AGENT_SWEEP_INTERVAL_SECONDS": "5",
                "REFLEXION_ENABLED": "false",
                "SERVE_RESTART_BACKOFF_MAX": "2",
                "WORKER_CONCURRENCY": "32",
            }
        )
        app = ServedApp(shape="pg-restart-drill", env=env, workdir=workdir)
        app.start()
        token = app.api_token("support")
        browser = app.login("ops", "ops-demo")
        orders = [
            line.split()[0]
            for line in app.manage(
                "shell",
                "-c",
                "from sandbox.models import Order\n"
                "for o in Order.objects.order_by('order_id')[:200]: print(o.order_id)",
            ).splitlines()
            if line.startswith("#W")
        ]
        assert orders, "the demo seed made no orders"

        def poster() -> None:
            number = 0
            while not stop.is_set() and len(posted) < runs:
                order = orders[number % len(orders)]
                number += 1
                asked_in, asked_at = phase[0], time.monotonic()
                status, body, headers = _call(
                    app.url + "/api/runs/",
                    method="POST",
                    token=token,
                    body={"query": f"Where is my order {order}?"},
                )
                post_statuses[f"{asked_in} {status}"] += 1
                recorder.record(
                    phase=asked_in,
                    what="POST /api/runs/",
                    status=status,
                    body=body,
                    headers=headers,
                    seconds=time.monotonic() - asked_at,
                )
                if status == 202:
                    posted.append(json.loads(body)["id"])
                stop.wait(1 / rate)

        def poller(what: str, path: str, tok: str, opener: Any) -> None:
            # One thread per target: a request left waiting does not hold up the others.
            while not stop.is_set():
                asked_in, asked_at = phase[0], time.monotonic()
                status, body, headers = _call(app.url + path, token=tok, opener=opener)
                recorder.record(
                    phase=asked_in,
                    what=what,
                    status=status,
                    body=body,
                    headers=headers,
                    seconds=time.monotonic() - asked_at,
                )
                if (
                    asked_in == "after"
                    and status == 200
                    and what == "GET /api/traces/"
                    and recorder.first_ok_after is None
                ):
                    recorder.first_ok_after = time.monotonic()
                stop.wait(0.2)

        targets = [
            ("GET /api/traces/", "/api/traces/?limit=5", token, None),
            ("GET /traces/ (logged in)", "/traces/", "", browser),
            ("GET /healthz", "/healthz", "", None),
        ]
        threads = [threading.Thread(target=poster)] + [
            threading.Thread(target=poller, args=target) for target in targets
        ]
        load_began = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(before_s)  # load runs this long before the stop: a drill parameter
        result["runs_posted_before_outage"] = len(posted)
        url = database_url.replace("postgres://", "postgresql://")
        before_ids = list(posted)
        with psycopg.connect(url) as conn:
            in_flight = conn.execute(
                "SELECT count(*) FROM traces_trace WHERE id = ANY(%s::uuid[]) "
                "AND status IN ('queued', 'running')",
                [before_ids],
            ).fetchone()
        result["runs_in_flight_at_the_stop"] = in_flight[0] if in_flight else None
        phase[0] = "outage"
        stopped_at = time.monotonic()
        cluster.stop("fast")
        result["stop_seconds"] = round(time.monotonic() - stopped_at, 2)
        time.sleep(outage_s)  # the outage's length: a drill parameter
        phase[0] = "restarting"
        restart_began = time.monotonic()
        cluster.start()
        back_at = time.monotonic()
        back_wall = datetime.now(UTC)
        phase[0] = "after"
        result["outage_seconds"] = round(back_at - stopped_at, 1)
        result["restart_seconds"] = round(back_at - restart_began, 2)
        while len(posted) < runs and time.monotonic() - began < deadline_s:
            time.sleep(0.2)
        ids: list[str] = list(posted)
        statuses: Counter[str] = Counter()
        while time.monotonic() - began < deadline_s:
            with psycopg.connect(url) as conn:
                statuses = Counter(
                    dict(
                        conn.execute(
                            "SELECT status, count(*) FROM traces_trace WHERE id = ANY(%s::uuid[]) "
                            "GROUP BY status",
                            [ids],
                        ).fetchall()
                    )
                )
            if sum(n for s, n in statuses.items() if s in TERMINAL) == len(ids):
                break
            time.sleep(0.5)
        all_terminal_at = time.monotonic()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        with psycopg.connect(url) as conn:
            result["error_types"] = dict(
                conn.execute(
                    "SELECT status || ' ' || coalesce(nullif(error_type, ''), '-'), count(*) "
                    "FROM traces_trace WHERE id = ANY(%s::uuid[]) GROUP BY 1 ORDER BY 2 DESC",
                    [ids],
                ).fetchall()
            )
            # The runs of before the outage: how long after PostgreSQL was back they ended.
            last_end = conn.execute(
                "SELECT max(finished_at) FROM traces_trace WHERE id = ANY(%s::uuid[])",
                [before_ids],
            ).fetchone()
        if last_end and last_end[0]:
            result["seconds_restart_to_earlier_runs_terminal"] = round(
                (last_end[0] - back_wall).total_seconds(), 1
            )
        result["runs_posted"] = len(ids)
        result["post_answers"] = dict(post_statuses)
        result["statuses"] = dict(statuses)
        result["runs_terminal"] = sum(n for s, n in statuses.items() if s in TERMINAL)
        result["runs_finished"] = statuses.get("finished", 0)
        result["runs_lost"] = len(ids) - result["runs_terminal"]
        result["seconds_load_to_all_terminal"] = round(all_terminal_at - load_began, 1)
        result["seconds_restart_to_all_terminal"] = round(all_terminal_at - back_at, 1)
        result["recover_seconds"] = (
            round(recorder.first_ok_after - back_at, 2) if recorder.first_ok_after else None
        )
        result["answers"] = {k: dict(v) for k, v in recorder.statuses.items()}
        result["slowest_answer_seconds"] = recorder.slowest
        result["examples"] = recorder.examples
        result["responses_500"] = recorder.count(500)
        result["responses_503"] = recorder.count(503)
        result["responses_503_without_message_or_retry_after"] = recorder.bad_503[:5]
        result["responses_leaking_the_dsn_password"] = recorder.leaks[:5]
        log = app.log_path.read_text(errors="replace")
        result["log_lines_with_the_dsn_password"] = sum(
            1 for line in log.splitlines() if DSN_PASSWORD in line
        )
        result["log_tracebacks"] = log.count("Traceback (most recent call last)")
        result["log_db_unavailable_warnings"] = log.count("db.unavailable ")
        # What brought the runs back: the task's own retry, or the stuck-run sweeper.
        result["log_web_errors"] = log.count("ERROR django.request")
        result["log_runs_crashed"] = log.count("ERROR agents.services run.crashed")
        result["log_task_failures"] = log.count("ERROR celery.app.trace Task")
        result["log_task_retries_db_unavailable"] = log.count("run.database_unavailable")
        result["log_sweeps_requeueing"] = log.count(" runs.sweep")
        result["log_excerpt_errors"] = [
            line[:240] for line in log.splitlines() if " ERROR " in line or "Traceback" in line
        ][:12]
    finally:
        stop.set()
        if app is not None:
            app.stop()
            result["serve_log"] = str(app.log_path.relative_to(ROOT))
        if redis_server.process is not None:
            redis_server.stop(signal.SIGTERM)
        cluster.destroy()
        shutil.rmtree(workdir, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - began, 1)
    return result


def passed(result: dict[str, Any]) -> bool:
    return bool(
        result.get("runs_posted")
        and result.get("runs_lost") == 0
        and result.get("responses_500") == 0
        and result.get("responses_503", 0) > 0
        and not result.get("responses_503_without_message_or_retry_after")
        and not result.get("responses_leaking_the_dsn_password")
        and result.get("log_lines_with_the_dsn_password") == 0
    )


def report_write(result: dict[str, Any], *, command: str) -> list[Path]:
    ok = passed(result)
    lines = [
        "# Crash drill: PostgreSQL restart under load",
        "",
        f"- command: `{command}`",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}; run at {result.get('started_at')}",
        "- served: the production shape (bin/serve: daphne, the sandbox's server, the "
        "supervised Celery run worker (threads, 32), the learning-loop worker and beat) on "
        "a PostgreSQL cluster and a redis-server of the drill's own; the simulated model at "
        f"{result['model_latency_s']:g} s per call; run limits soft 12 s / hard 15 s, the "
        "sweeper every 5 s",
        f"- load: runs posted through the API at {result['rate_per_s']:g}/s until "
        f"{result['runs_planned']} were accepted; the API list, a logged-in page and "
        "/healthz polled every 0.2 s",
        f"- outage: PostgreSQL stopped (fast shutdown) after "
        f"{result.get('runs_posted_before_outage', '?')} runs were accepted, and started "
        f"again {result.get('outage_seconds', '?')} s later",
        "",
        "| check | result | goal |",
        "|---|---|---|",
        f"| runs posted (202) | {result.get('runs_posted')} | {result['runs_planned']} |",
        f"| runs terminal | {result.get('runs_terminal')} | all |",
        f"| runs lost (not terminal at the deadline) | {result.get('runs_lost')} | 0 |",
        f"| runs finished | {result.get('runs_finished')} | - |",
        f"| 500s seen | {result.get('responses_500')} | 0 |",
        f"| 503s seen | {result.get('responses_503')} | > 0, each with the message and "
        "Retry-After |",
        f"| 503s without the message or Retry-After | "
        f"{len(result.get('responses_503_without_message_or_retry_after') or [])} | 0 |",
        f"| answers or log lines with the DSN's password | "
        f"{len(result.get('responses_leaking_the_dsn_password') or [])} + "
        f"{result.get('log_lines_with_the_dsn_password')} | 0 |",
        f"| time to recover (PostgreSQL up to the first 200 of the API) | "
        f"{result.get('recover_seconds')} s | - |",
        f"| PostgreSQL up to the last run posted before the stop terminal "
        f"({result.get('runs_in_flight_at_the_stop')} were in flight at the stop) | "
        f"{result.get('seconds_restart_to_earlier_runs_terminal')} s | - |",
        f"| PostgreSQL up to every run terminal (posting goes on meanwhile) | "
        f"{result.get('seconds_restart_to_all_terminal')} s | - |",
        "",
        f"Run statuses and error types: {result.get('error_types')}. Answers to the run "
        f"posts: {result.get('post_answers')}. Tracebacks in the served log: "
        f"{result.get('log_tracebacks')} (web requests logged as errors: "
        f"{result.get('log_web_errors')}); `db.unavailable` warnings: "
        f"{result.get('log_db_unavailable_warnings')}. Worker: runs crashed on the "
        f"database {result.get('log_runs_crashed')}, tasks failed "
        f"{result.get('log_task_failures')}, tasks retried because the database was away "
        f"{result.get('log_task_retries_db_unavailable')}, sweeps that re-enqueued runs "
        f"{result.get('log_sweeps_requeueing')}.",
        "",
        "Answers seen, by the phase the request was sent in:",
        "",
    ]
    for phase_name, counter in (result.get("answers") or {}).items():
        lines.append(f"- {phase_name}: {dict(sorted(counter.items()))}")
    lines += ["", "The longest wait for each answer, by the phase the request was sent in:", ""]
    for phase_name, slowest in (result.get("slowest_answer_seconds") or {}).items():
        lines.append(f"- {phase_name}: {dict(sorted(slowest.items()))}")
    lines += ["", "A body of each kind of answer (first 300 characters):", ""]
    for key, body in sorted((result.get("examples") or {}).items()):
        if not key.endswith(" 200"):
            lines.append(f"- {key}: `{' '.join(body.split())[:300]}`")
    lines += ["", f"**{'Passed' if ok else 'FAILED'}.**"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS / "pg-restart-latest.json", RESULTS / "pg-restart-latest.md"]
    paths[0].write_text(
        json.dumps(
            {
                "command": command,
                "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
                "passed": ok,
                **result,
            },
            indent=2,
        )
    )
    paths[1].write_text("\n".join(lines) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60, help="runs to post")
    parser.add_argument("--rate", type=float, default=4.0, help="run posts per second")
    parser.add_argument("--before", type=float, default=4.0, help="seconds of load first")
    parser.add_argument("--outage", type=float, default=15.0, help="seconds PostgreSQL is down")
    parser.add_argument("--deadline", type=float, default=300, help="seconds, then stop")
    parser.add_argument("--model-latency", type=float, default=1.0, help="seconds per call")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM, still tear everything down (the finally of drill()).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = drill(
        runs=args.runs,
        rate=args.rate,
        before_s=args.before,
        outage_s=args.outage,
        deadline_s=args.deadline,
        model_latency_s=args.model_latency,
    )
    result["started_at"] = started
    command = "python -m bench.pg_restart_drill " + " ".join(argv or sys.argv[1:])
    paths = report_write(result, command=command.strip())
    print(paths[1].read_text())
    return 0 if passed(result) else 1


if __name__ == "__main__":
    sys.exit(main())
