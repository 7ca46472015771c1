"""Crash drill: SIGKILL the Celery worker of the production shape at random points while
runs that open returns (a side effect) are in flight; then count what was lost or repeated.

    make crash-drill          # = python -m bench.crash_drill --runs 40 --kills 20

It serves the app as the production shape runs (``bin/serve``: daphne, supervised Celery
worker and beat, PostgreSQL, Redis, production settings; a database and Redis database
of its own, dropped afterwards), with short time limits so that lost messages come back
within the drill (``AGENT_RUN_HARD_TIME_LIMIT=10``, the sweeper every 5 s). The model is a
loopback server speaking the OpenAI wire protocol that answers every run alike: call the
sandbox's ``createReturn`` (imported from its OpenAPI document and enabled) for the order
in the question, then answer (0.5 s per call). It posts ``--runs`` runs through the API,
each for its own eligible order, and sends SIGKILL to the worker ``--kills`` times, each
0.3-3 s into the worker's life (the supervisor restarts it, after at most 2 s:
``SERVE_RESTART_BACKOFF_MAX``). When every run is terminal, or the deadline passes, it
checks:

- lost runs: not terminal;
- duplicated or missing Steps: a run whose steps are not exactly reasoning, action,
  reflection, reasoning, final;
- repeated side effects: an order with more than one return in the shop. The sandbox's
  ``IdempotentRequest`` rows show how many repeated requests it answered from its record.

Report: bench/results/crash-drill-latest.{md,json}. It stops by itself (``--deadline``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
EXPECTED_PHASES = ["reasoning", "action", "reflection", "reasoning", "final"]
TAG = "DRILL-RETURN"
ORDER = re.compile(TAG + r" (#W\d{7})")


def _text(request: Any) -> str:
    messages = (request or {}).get("messages") or []
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") != "system")


MODEL_LATENCY_S = [0.5]
# --llm-fault-rate: the share of model calls that fail, each fault as likely as the next.
FAULTS: dict[str, Any] = {"rate": 0.0, "rng": random.Random(0), "lock": threading.Lock()}
LLM_FAULTS: list[tuple[Any, ...]] = [
    ("hang", 4.0),  # past LLM_TIMEOUT_SECONDS (2): a timeout
    ("status", 429, {"Retry-After": "1"}),
    ("status", 500),
    ("ok", '{"thought": "half a JSON'),  # malformed
    ("ok", ""),  # empty content
    ("ok", "I'm sorry, but I can't help with that request."),  # a refusal
]


def responder(request: Any) -> tuple[Any, ...]:
    """The model's side: open the return for the order asked about, then answer. It takes
    ``MODEL_LATENCY_S`` per call, so that the kills find runs in flight; with a fault rate,
    that share of calls fails in one of the ``LLM_FAULTS`` ways instead."""
    time.sleep(MODEL_LATENCY_S[0])
    with FAULTS["lock"]:
        faulty = FAULTS["rng"].random() < FAULTS["rate"]
        fault = FAULTS["rng"].choice(LLM_FAULTS)
    if faulty:
        return fault
    fmt = (request or {}).get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name", "")
    text = _text(request)
    if name == "Reflection":
        failed = "error" in text.rsplit("Observation", 1)[-1].lower()
        cause = "the shop refused the return" if failed else ""
        body = {"expectation_met": not failed, "likely_cause": cause, "next": "continue"}
        return ("ok", json.dumps(body))
    match = ORDER.search(text)
    if match is None:
        return ("ok", json.dumps({"thought": "?", "action": "final_answer", "action_input": {}}))
    if "return_id" in text:
        return (
            "ok",
            json.dumps(
                {
                    "thought": "The return is open; I tell the customer.",
                    "action": "final_answer",
                    "action_input": {},
                    "expectation": "done",
                    "final_answer": f"Your return for {match.group(1)} is open.",
                }
            ),
        )
    return (
        "ok",
        json.dumps(
            {
                "thought": f"I open a return for {match.group(1)}.",
                "action": "createReturn",
                "action_input": {"order_id": match.group(1), "reason": "Wrong size"},
                "expectation": "a return id",
            }
        ),
    )


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def worker_pids(root_pid: int, *, queues: str = "agents") -> list[int]:
    """The Celery worker processes under ``root_pid`` that consume ``queues`` (bin/serve's
    run workers by default; the learner consumes ``reflexion,default``)."""
    wanted = f" -Q {queues} ".encode()
    pids = []
    for pid in _descendants(root_pid):
        try:
            # Celery rewrites its title: "[celeryd: worker1@host:MainProcess] ... worker ..."
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"celery" in cmdline and b" worker" in cmdline and wanted in cmdline:
            pids.append(pid)
    return pids


def _db(app: Any, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    url = f"postgresql://postgres@127.0.0.1:5432/{app.database_name}"
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql).fetchall())


SETUP = """
from agents.models import Tool
from agents.services import agent_ensure_default, tool_set_enabled
from sandbox.models import Order
from sandbox.selectors import order_return_eligibility
tool = Tool.objects.get(name="createReturn")
tool_set_enabled(tool_id=tool.pk, enabled=True, actor=None)
tool.allowed_agents.add(agent_ensure_default())
for order in Order.objects.order_by("order_id"):
    if order_return_eligibility(order=order).eligible and not order.returns.exists():
        print("ORDER", order.order_id)
"""


def drill(*, runs: int, kills: int, deadline_s: float, redis_db: int, seed: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.served import app_teardown, production_app

    rng = random.Random(seed)
    model = FakeOpenAIServer(responder=responder)
    model.start()
    workdir = Path(tempfile.mkdtemp(prefix="agentops-drill-"))
    app = production_app(workdir, name_suffix="_drill", redis_db=redis_db)
    app.env.update(
        {
            "LLM_BACKEND": "openai",
            "LLM_BASE_URL": model.base_url,
            "LLM_API_KEY": "drill-key",
            # The load posts every run as one user: no per-user limit on runs in flight.
            "AGENT_RUNS_IN_FLIGHT_PER_USER": "0",
            "LLM_MODEL": "fake-model",
            "LLM_STRUCTURED_OUTPUT": "json_schema",
            "LLM_TIMEOUT_SECONDS": "2",
            "LLM_MAX_RETRIES": "1",
            "LLM_CALL_BUDGET_SECONDS": "5",
            "AGENT_RUN_SOFT_TIME_LIMIT": "8",
            "AGENT_RUN_HARD_TIME_LIMIT": "10",
            "AGENT_SWEEP_INTERVAL_SECONDS": "5",
            "REFLEXION_ENABLED": "false",
            # The supervisor's crash-loop backoff (30 s by default) would make 20 kills last
            # ten minutes; restarts after at most 2 s keep the drill short.
            "SERVE_RESTART_BACKOFF_MAX": "2",
        }
    )
    result: dict[str, Any] = {"runs": runs, "kills_planned": kills, "seed": seed}
    try:
        app.start()
        assert app.process is not None
        document = workdir / "sandbox-openapi.json"
        sandbox = f"http://127.0.0.1:{app.env['SANDBOX_PORT']}/sandbox/api/openapi.json"
        with urllib.request.urlopen(sandbox, timeout=30) as response:
            document.write_bytes(response.read())
        app.manage("tools", "import", str(document))
        orders = [
            line.split()[1]
            for line in app.manage("shell", "-c", SETUP).splitlines()
            if line.startswith("ORDER ")
        ][:runs]
        if len(orders) < runs:
            raise SystemExit(f"the demo shop has only {len(orders)} orders open to a return")
        token = app.api_token("support")
        began = time.monotonic()
        trace_ids = []
        for order in orders:
            status, body = app.request(
                "POST",
                "/api/runs/",
                token=token,
                body={"query": f"{TAG} {order}: please return it, wrong size"},
            )
            assert status == 202, body
            trace_ids.append(json.loads(body)["id"])
        killed = 0
        while killed < kills and time.monotonic() - began < deadline_s:
            pids = worker_pids(app.process.pid)
            if not pids:
                time.sleep(0.1)  # being restarted by the supervisor
                continue
            # A random point of the worker's life: runs started, in flight, finishing.
            time.sleep(rng.uniform(0.3, 3.0))
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(pids), signal.SIGKILL)
                killed += 1
        result["kills"] = killed
        ids = ", ".join(f"'{t}'" for t in trace_ids)
        while time.monotonic() - began < deadline_s:
            open_runs = _db(
                app,
                "SELECT count(*) FROM traces_trace "
                f"WHERE id IN ({ids}) AND status IN ('queued', 'running')",
            )[0][0]
            if not open_runs:
                break
            time.sleep(1)
        result["seconds"] = round(time.monotonic() - began, 1)
        statuses = Counter(
            status for (status,) in _db(app, f"SELECT status FROM traces_trace WHERE id IN ({ids})")
        )
        result["statuses"] = dict(statuses)
        result["lost_runs"] = statuses.get("queued", 0) + statuses.get("running", 0)
        phases: dict[str, list[str]] = {t: [] for t in trace_ids}
        for trace_id, phase in _db(
            app,
            "SELECT trace_id, phase FROM traces_step "
            f"WHERE trace_id IN ({ids}) ORDER BY trace_id, step_number",
        ):
            phases[str(trace_id)].append(phase)
        if FAULTS["rate"]:
            # With model faults a run may retry, fall back or fail: it must end, and every
            # failure must carry a classified error type.
            wrong = {
                str(trace_id): [f"{status}: error type {error_type or 'missing'}"]
                for trace_id, status, error_type in _db(
                    app,
                    "SELECT id, status, error_type FROM traces_trace "
                    f"WHERE id IN ({ids}) AND status <> 'finished' "
                    "AND (error_type = '' OR error_type = 'UNKNOWN')",
                )
            }
            result["unclassified_failed_steps"] = _db(
                app,
                "SELECT count(*) FROM traces_step "
                f"WHERE trace_id IN ({ids}) AND NOT ok "
                "AND (error_type = '' OR error_type = 'UNKNOWN')",
            )[0][0]
            result["error_types"] = dict(
                _db(
                    app,
                    "SELECT error_type, count(*) FROM traces_step "
                    f"WHERE trace_id IN ({ids}) AND NOT ok GROUP BY error_type ORDER BY 2 DESC",
                )
            )
        else:
            wrong = {t: p for t, p in phases.items() if p != EXPECTED_PHASES}
        result["runs_with_unexpected_steps"] = len(wrong)
        result["unexpected_steps_examples"] = dict(list(wrong.items())[:5])
        quoted = ", ".join(f"'{o}'" for o in orders)
        per_order = _db(
            app,
            "SELECT o.order_id, count(r.id) FROM sandbox_order o "
            "LEFT JOIN sandbox_returnrequest r ON r.order_id = o.id "
            f"WHERE o.order_id IN ({quoted}) GROUP BY o.order_id",
        )
        result["returns_opened"] = sum(n for _, n in per_order)
        result["repeated_side_effects"] = sum(n - 1 for _, n in per_order if n > 1)
        result["orders_without_return"] = sum(1 for _, n in per_order if n == 0)
        idempotent = _db(
            app,
            "SELECT count(*), coalesce(sum(replays), 0) FROM sandbox_idempotentrequest "
            "WHERE status BETWEEN 200 AND 299",
        )[0]
        result["idempotent_records"], result["repeats_answered_from_record"] = idempotent
        result["model_requests"] = len(model.requests)
    finally:
        app_teardown(app)
        model.stop()
    return result


def report_write(result: dict[str, Any], *, command: str) -> list[Path]:
    faults = bool(FAULTS["rate"])
    ok = (
        result.get("lost_runs") == 0
        and result.get("runs_with_unexpected_steps") == 0
        and result.get("repeated_side_effects") == 0
        and (result.get("unclassified_failed_steps") == 0 if faults else True)
    )
    title = f"model faults at {FAULTS['rate']:.0%}" if faults else "SIGKILL of the worker"
    lines = [
        f"# Crash drill: {title}",
        "",
        f"- command: `{command}`",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}; run at {result['started_at']}",
        f"- served: the production shape (bin/serve: daphne, supervised Celery worker and "
        f"beat, PostgreSQL, Redis), hard time limit 10 s, sweeper every 5 s; the model a "
        f"loopback OpenAI-wire server taking {MODEL_LATENCY_S[0]:g} s per call; seed "
        f"{result['seed']}",
        f"- {result['runs']} runs, each opening a return (POST returns) for its own order; "
        f"{result.get('kills', 0)} SIGKILLs of the worker, each 0.3-3 s after it (re)started; "
        + (
            f"{FAULTS['rate']:.0%} of model calls failing (a timeout, 429, 500, malformed "
            "JSON, empty content or a refusal, alike); "
            if faults
            else ""
        )
        + f"all terminal after {result.get('seconds', '?')} s",
        "",
        "| check | result | goal |",
        "|---|---|---|",
        f"| lost runs (not terminal) | {result.get('lost_runs')} | 0 |",
    ]
    if faults:
        lines += [
            f"| runs not finished whose error type is missing or UNKNOWN | "
            f"{result.get('runs_with_unexpected_steps')} | 0 |",
            f"| failed steps whose error type is missing or UNKNOWN | "
            f"{result.get('unclassified_failed_steps')} | 0 |",
        ]
    else:
        lines.append(
            f"| runs whose steps are not reasoning, action, reflection, reasoning, final "
            f"(a Step lost or duplicated) | {result.get('runs_with_unexpected_steps')} | 0 |"
        )
    lines += [
        f"| repeated side effects (an order with a second return) | "
        f"{result.get('repeated_side_effects')} | 0 |",
        f"| orders left without their return | {result.get('orders_without_return')} | "
        + ("- (a run may fail first) |" if faults else "0 |"),
        "",
        f"Run statuses: {result.get('statuses')}. Returns opened: "
        f"{result.get('returns_opened')}. Requests the sandbox answered from its "
        f"Idempotency-Key record instead of running them again: "
        f"{result.get('repeats_answered_from_record')}. Model requests: "
        f"{result.get('model_requests')}.",
    ]
    if faults:
        lines += ["", f"Error types of the failed steps: {result.get('error_types')}."]
    lines += ["", f"**{'Passed' if ok else 'FAILED'}.**"]
    if result.get("unexpected_steps_examples"):
        lines += ["", "Runs that failed the check (first 5):", ""]
        for trace_id, phases in result["unexpected_steps_examples"].items():
            lines.append(f"- {trace_id}: {', '.join(phases)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "crash-drill-llm-faults" if faults else "crash-drill"
    paths = [RESULTS / f"{stem}-latest.json", RESULTS / f"{stem}-latest.md"]
    paths[0].write_text(json.dumps({"command": command, "passed": ok, **result}, indent=2))
    paths[1].write_text("\n".join(lines) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=300, help="seconds, then stop")
    parser.add_argument("--redis-db", type=int, default=12, help="its own (flushed)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model-latency", type=float, default=0.5, help="seconds per call")
    parser.add_argument(
        "--llm-fault-rate",
        type=float,
        default=0.0,
        help="share of model calls that fail (timeout, 429, 500, malformed, empty, refusal)",
    )
    args = parser.parse_args(argv)
    MODEL_LATENCY_S[0] = args.model_latency
    FAULTS["rate"], FAULTS["rng"] = args.llm_fault_rate, random.Random(args.seed)
    # Stopped with SIGTERM, still tear the served app down (its processes are in a session
    # of their own): left running, its worker would take the next drill's messages.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = drill(
        runs=args.runs,
        kills=args.kills,
        deadline_s=args.deadline,
        redis_db=args.redis_db,
        seed=args.seed,
    )
    result["started_at"] = started
    command = "python -m bench.crash_drill " + " ".join(argv or sys.argv[1:])
    paths = report_write(result, command=command.strip())
    print(paths[1].read_text())
    return 0 if json.loads(paths[0].read_text())["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
