"""End-to-end runs benchmark: post N runs through the API of the production shape and time
them until every one is terminal.

    make bench-e2e            # = python -m bench.e2e_runs --runs 500 --model-latency 1

It serves the app as the production shape runs (``bin/serve``: daphne, the sandbox shop's
own server, ONE supervised Celery run worker, the learner and beat; PostgreSQL, Redis,
production settings; a database and Redis database of its own, dropped afterwards). The
model is a loopback server speaking the OpenAI wire protocol that answers every run alike
and takes ``--model-latency`` seconds per call: look the order up (``get_order``, an HTTP
call to the sandbox), reflect, answer. One run is therefore 3 model calls, one tool call
over HTTP, the run lifecycle (load and lock, policy resolution, finish, scoring) and 5
durable Steps; the ideal time of a run is 3 x the model latency, and since every run can
wait on the model at once, the ideal time for the whole batch is the same.

The runs are posted by ``--clients`` client threads (the API answers 202 and queues). For
each configuration in ``--configs`` (side by side, in the same run, alternating):

- ``pooled``: the shipped defaults (``WORKER_CONCURRENCY`` 500, ``AGENT_DB_THREADS`` 8);
- ``one-db-thread``: 100 task threads and one database thread per process, as the worker
  ran before (asgiref's single thread for every database call of the loop).

Reported per configuration: seconds from the first POST to the last run terminal and the
ratio to the ideal, seconds from the last POST, runs/s, p50/p95 of a run's
``finished_at - created_at``, the run worker's peak RSS, the server sessions opened
(``pg_stat_database.sessions``) and the peak of sessions open at once.

Report: bench/results/e2e-runs-latest.{md,json}. It stops by itself (``--deadline``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.crash_drill import worker_pids as run_worker_pids

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
MODEL_CALLS_PER_RUN = 3
RUN_WORKER = "agentops-worker1"  # bin/serve names each process's database sessions
CONFIGS: dict[str, dict[str, str]] = {
    "pooled": {},
    "one-db-thread": {"WORKER_CONCURRENCY": "100", "AGENT_DB_THREADS": "1"},
}
LATENCY_S = [1.0]
ORDER = re.compile(r"#W\d{7}")


def responder(request: Any) -> tuple[Any, ...]:
    """Look the order up, reflect, answer: 3 calls per run, each ``LATENCY_S``."""
    time.sleep(LATENCY_S[0])  # the model's latency: what the runs wait on, by design
    fmt = (request or {}).get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name", "")
    messages = (request or {}).get("messages") or []
    text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") != "system")
    if name == "Reflection":
        body = {"expectation_met": True, "likely_cause": "", "next": "continue"}
        return ("ok", json.dumps(body))
    match = ORDER.search(text)
    order = match.group(0) if match else "#W0000000"
    if "Observation [" in text:
        reply = {
            "thought": "The order lookup answered; I tell the customer.",
            "action": "final_answer",
            "action_input": {},
            "expectation": "done",
            "final_answer": f"I found your order {order} in the shop.",
        }
    else:
        reply = {
            "thought": f"I look order {order} up.",
            "action": "get_order",
            "action_input": {"order_id": order},
            "expectation": "the order's status",
        }
    return ("ok", json.dumps(reply))


class Monitor:
    """One session of the bench's own on the app's database, opened before the measured
    window (so it is not counted among the sessions the app opens)."""

    def __init__(self, database: str) -> None:
        import psycopg

        self.database = database
        self.conn = psycopg.connect(
            f"postgresql://postgres@127.0.0.1:5432/{database}", autocommit=True
        )
        self.lock = threading.Lock()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(sql).fetchall())

    def sessions_opened(self) -> int:
        sql = f"SELECT sessions FROM pg_stat_database WHERE datname = '{self.database}'"
        return int(self.rows(sql)[0][0])

    def open_sessions(self) -> list[tuple[str, int, Any]]:
        """(application_name, pid, backend_start) of every session of the app."""
        return [
            (str(name), int(pid), start)
            for name, pid, start in self.rows(
                "SELECT application_name, pid, backend_start FROM pg_stat_activity "
                f"WHERE datname = '{self.database}' AND pid <> pg_backend_pid()"
            )
        ]

    def close(self) -> None:
        self.conn.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/<pid>/stat``), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measure(
    *, config: str, runs: int, clients: int, deadline_s: float, redis_db: int
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.served import app_teardown, production_app

    model = FakeOpenAIServer(responder=responder)
    model.start()
    workdir = Path(tempfile.mkdtemp(prefix="agentops-e2e-"))
    app = production_app(workdir, name_suffix="_bench_e2e", redis_db=redis_db)
    app.env.update(
        {
            "LLM_BACKEND": "openai",
            "LLM_BASE_URL": model.base_url,
            "LLM_API_KEY": "bench-key",
            "LLM_MODEL": "fake-model",
            "LLM_STRUCTURED_OUTPUT": "json_schema",
            "LLM_MAX_RETRIES": "0",
            "REFLEXION_ENABLED": "false",
            "WORKERS": "1",
            "WORKER_CONCURRENCY": "500",
            # The load posts every run as one user: no per-user limit on runs in flight.
            "AGENT_RUNS_IN_FLIGHT_PER_USER": "0",
            **CONFIGS[config],
        }
    )
    result: dict[str, Any] = {"config": config, "runs": runs, "env": CONFIGS[config]}
    try:
        app.start()
        assert app.process is not None
        token = app.api_token("support")
        lookup = Monitor(app.database_name)
        order = lookup.rows("SELECT order_id FROM sandbox_order ORDER BY order_id LIMIT 1")[0][0]
        lookup.close()
        # one run first, so that every process has imported and connected
        status, body = app.request(
            "POST", "/api/runs/", token=token, body={"query": f"Where is my order {order}?"}
        )
        assert status == 202, body
        app.wait_terminal(json.loads(body)["id"], token=token)
        model.requests.clear()
        worker_pids = run_worker_pids(app.process.pid)
        monitor, sampler_db = Monitor(app.database_name), Monitor(app.database_name)
        sessions_before = monitor.sessions_opened()
        peaks: dict[str, Any] = {"rss_mb": 0.0, "open_sessions": 0, "worker_open": 0}
        worker_sessions: set[tuple[int, Any]] = set()
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peaks["rss_mb"] = max([peaks["rss_mb"], *(_rss_mb(p) for p in worker_pids)])
                sessions = sampler_db.open_sessions()
                mine = {(pid, start) for name, pid, start in sessions if name == RUN_WORKER}
                worker_sessions.update(mine)
                peaks["open_sessions"] = max(peaks["open_sessions"], len(sessions))
                peaks["worker_open"] = max(peaks["worker_open"], len(mine))
                sampling.wait(0.25)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        def post(number: int) -> str:
            status, body = app.request(
                "POST",
                "/api/runs/",
                token=token,
                body={"query": f"Where is my order {order}? (bench run {number})"},
            )
            assert status == 202, body
            return str(json.loads(body)["id"])

        cpu_before = sum(_cpu_seconds(pid) for pid in worker_pids)
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            trace_ids = list(pool.map(post, range(runs)))
        posted = time.monotonic()
        ids = ", ".join(f"'{t}'" for t in trace_ids)
        open_runs = runs
        while time.monotonic() - began < deadline_s:
            open_runs = monitor.rows(
                "SELECT count(*) FROM traces_trace "
                f"WHERE id IN ({ids}) AND status IN ('queued', 'running')",
            )[0][0]
            if not open_runs:
                break
            time.sleep(0.2)  # polling interval; the loop ends on the condition or the deadline
        ended = time.monotonic()
        worker_cpu = sum(_cpu_seconds(pid) for pid in worker_pids) - cpu_before
        sampling.set()
        sampler.join()
        seconds = ended - began
        latencies = sorted(
            float(ms)
            for (ms,) in monitor.rows(
                "SELECT extract(epoch FROM finished_at - created_at) * 1000 FROM traces_trace "
                f"WHERE id IN ({ids}) AND finished_at IS NOT NULL",
            )
        )
        sessions_opened = monitor.sessions_opened() - sessions_before
        statuses = dict(
            monitor.rows(
                f"SELECT status, count(*) FROM traces_trace WHERE id IN ({ids}) GROUP BY 1"
            )
        )
        steps = monitor.rows(f"SELECT count(*) FROM traces_step WHERE trace_id IN ({ids})")[0][0]
        # where the time of the slowest run went: each Step's offset from the run's creation
        result["slowest_run_timeline_ms"] = [
            [phase, round(float(offset)), latency]
            for phase, offset, latency in monitor.rows(
                "SELECT s.phase, extract(epoch FROM s.created_at - t.created_at) * 1000, "
                "s.latency_ms FROM traces_step s JOIN traces_trace t ON t.id = s.trace_id "
                "WHERE s.trace_id = (SELECT id FROM traces_trace WHERE id IN "
                f"({ids}) ORDER BY finished_at - created_at DESC NULLS FIRST LIMIT 1) "
                "ORDER BY s.step_number"
            )
        ]
        result["started_after_ms"] = [
            round(float(ms))
            for (ms,) in monitor.rows(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM traces_trace "
                f"WHERE id IN ({ids}) ORDER BY 1"
            )
        ][:: max(1, runs // 10)]
        # what went wrong in one run that did not finish, if any (phase, error, detail)
        result["unfinished_example"] = [
            [str(v)[:160] for v in row]
            for row in monitor.rows(
                "SELECT phase, action_type, tool_name, error_type, error_detail, "
                "response_summary FROM traces_step WHERE trace_id = ("
                f"SELECT id FROM traces_trace WHERE id IN ({ids}) AND status <> 'finished' "
                "LIMIT 1) ORDER BY step_number",
            )
        ]
        ideal = MODEL_CALLS_PER_RUN * LATENCY_S[0]
        result.update(
            {
                "lost_runs": open_runs,
                "statuses": statuses,
                "steps": steps,
                "model_requests": len(model.requests),
                "post_seconds": round(posted - began, 2),
                "seconds": round(seconds, 2),
                "seconds_after_last_post": round(ended - posted, 2),
                "ideal_seconds": ideal,
                "ratio_to_ideal": round(seconds / ideal, 2),
                "runs_per_second": round(runs / seconds, 1),
                "p50_ms": round(statistics.median(latencies)) if latencies else None,
                "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))]) if latencies else None,
                "worker_peak_rss_mb": round(peaks["rss_mb"], 1),
                "worker_cpu_s": round(worker_cpu, 2),
                "worker_cpu_ms_per_run": round(worker_cpu * 1000 / runs, 1),
                "sessions_opened": sessions_opened,
                "sessions_opened_per_second": round(sessions_opened / seconds, 2),
                "peak_open_sessions": peaks["open_sessions"],
                "run_worker_sessions_seen": len(worker_sessions),
                "run_worker_peak_open_sessions": peaks["worker_open"],
            }
        )
        monitor.close()
        sampler_db.close()
    except BaseException:
        print(f"the served app's log, last lines:\n{app.log_tail(60)}", file=sys.stderr)
        raise
    finally:
        app_teardown(app)
        model.stop()
    return result


def report_write(results: list[dict[str, Any]], *, command: str, meta: dict[str, Any]) -> Path:
    lines = [
        "# End-to-end runs: the production shape, one run worker",
        "",
        f"- command: `{command}`",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}; load average at the start {meta['load_average']}; run at "
        f"{meta['started_at']}",
        f"- one run = {MODEL_CALLS_PER_RUN} model calls of {LATENCY_S[0]:g} s (a loopback "
        "server speaking the OpenAI wire protocol, scripted: not an LLM), one `get_order` "
        "call over HTTP to the sandbox process, the run lifecycle and 5 durable Steps; "
        f"posted through `POST /api/runs/` by {meta['clients']} client threads",
        f"- ideal: every run waits on the model at once, so the batch takes "
        f"{MODEL_CALLS_PER_RUN * LATENCY_S[0]:g} s",
        "",
        "| configuration | runs | lost | posting (s) | all terminal (s) | x ideal | after last "
        "POST (s) | runs/s | p50 / p95 run (ms) | worker peak RSS (MB) | sessions opened "
        "(per s) | peak sessions open | run worker: sessions seen / peak open | run worker CPU "
        "per run (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['config']} {r['env'] or '(defaults)'} | {r['runs']} | {r.get('lost_runs')} "
            f"| {r.get('post_seconds')} | {r.get('seconds')} | {r.get('ratio_to_ideal')} | "
            f"{r.get('seconds_after_last_post')} | {r.get('runs_per_second')} | "
            f"{r.get('p50_ms')} / {r.get('p95_ms')} | {r.get('worker_peak_rss_mb')} | "
            f"{r.get('sessions_opened')} ({r.get('sessions_opened_per_second')}) | "
            f"{r.get('peak_open_sessions')} | {r.get('run_worker_sessions_seen')} / "
            f"{r.get('run_worker_peak_open_sessions')} | {r.get('worker_cpu_ms_per_run')} |"
        )
    lines += [
        "",
        "Sessions opened: every process of the installation (web, sandbox, run worker, "
        "learner, beat), counted exactly by PostgreSQL's `pg_stat_database.sessions` during "
        "the measured window (the web and sandbox servers borrow from a pool of their own, "
        "`DB_POOL_MAX_SIZE`). Run worker: its distinct sessions "
        "(`application_name` agentops-worker1), sampled from `pg_stat_activity` every "
        "0.25 s, so a session shorter than that may be missed.",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "e2e-runs-latest.json").write_text(
        json.dumps({"command": command, **meta, "results": results}, indent=2)
    )
    path = RESULTS / "e2e-runs-latest.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--model-latency", type=float, default=1.0, help="seconds per call")
    parser.add_argument("--clients", type=int, default=20, help="threads posting the runs")
    parser.add_argument("--configs", default="pooled,one-db-thread")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds")
    parser.add_argument("--deadline", type=float, default=600, help="seconds per batch")
    parser.add_argument("--redis-db", type=int, default=11, help="its own (flushed)")
    args = parser.parse_args(argv)
    LATENCY_S[0] = args.model_latency
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s) {sorted(unknown)}; choose from {list(CONFIGS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    meta = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "clients": args.clients,
        "model_latency_s": args.model_latency,
    }
    results = []
    for round_number in range(args.rounds):
        for config in configs:
            print(f"round {round_number + 1}: {config} ...", flush=True)
            results.append(
                measure(
                    config=config,
                    runs=args.runs,
                    clients=args.clients,
                    deadline_s=args.deadline,
                    redis_db=args.redis_db,
                )
            )
    command = "python -m bench.e2e_runs " + " ".join(argv or sys.argv[1:])
    path = report_write(results, command=command.strip(), meta=meta)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
