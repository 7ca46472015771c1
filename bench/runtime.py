"""`make bench`: the runtime side by side with its peers, and runs in flight per process.

1. Side by side (``bench.peers``): the same scripted episode through this runtime's full run
   path, LangGraph + PostgresSaver, the OpenAI Agents SDK and a plain psycopg loop, one run
   at a time and 200 at once, rounds interleaved, medians; steps/s, client and database CPU
   per step, and the ratios. Needs PostgreSQL; the peers need the bench-only extra
   (``pip install -e '.[peers]'``), without it only this runtime and the plain loop run.
2. Runs in flight: 500 runs at 1 s model latency in one process (scripted model, an
   in-process tool), against the ideal of 3 model calls' worth.

The models are scripted benchmark instruments (not an LLM, not the simulated backend).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, connections
from pydantic import BaseModel

from agents.llm.base import ChatMessage, LLMResponse, LLMUsage

SCRIPT = [
    json.dumps(
        {
            "thought": "look it up",
            "action": "compare_prices",
            "action_input": {"price_a": 10, "price_b": 12},
            "expectation": "cheaper one",
        }
    ),
    json.dumps({"expectation_met": True, "likely_cause": "", "next": "continue"}),
    json.dumps(
        {
            "thought": "done",
            "action": "final_answer",
            "action_input": {},
            "final_answer": "The first one is cheaper.",
        }
    ),
]
# The production worker's connection age (config/settings/production.py): the run path
# keeps its connection between runs, as a Celery worker thread does.
WORKER_CONN_MAX_AGE = 60


class ScriptedModel:
    """Benchmark instrument: answers each call of an episode from a fixed script."""

    backend = "scripted-bench"
    model = "scripted-bench"

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.calls: dict[int, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(
        self,
        *,
        messages: list[ChatMessage],
        schema: type[BaseModel],
        purpose: str,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse:
        # The episode position follows from the prompt: rounds shown so far.
        prompt = messages[-1].content
        if purpose == "reflection":
            text = SCRIPT[1]
        else:
            text = SCRIPT[2] if "### Round 1" in prompt else SCRIPT[0]
        if self.latency_s:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await asyncio.sleep(self.latency_s)
            self.in_flight -= 1
        return LLMResponse(text=text, backend=self.backend, model=self.model, usage=LLMUsage())


def _agent_and_tools() -> tuple[Any, Any]:
    from agents.services import agent_ensure_default, tool_snapshots, tools_sync

    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    return agent, {
        k: v for k, v in tool_snapshots(agent_id=agent.pk).items() if k == "compare_prices"
    }


async def _run_many(count: int, model: ScriptedModel, agent: Any, tools: Any) -> None:
    import httpx

    from agents.runtime import AgentRun
    from agents.services import runtime_config
    from agents.sink import RunSink
    from agents.tools.executor import ToolExecutor
    from traces.classifier import error_rules_aload
    from traces.models import Trace

    rules = await error_rules_aload()
    config = runtime_config()
    traces = [
        Trace(
            agent_id=agent.pk,
            query="Which is cheaper, 10 or 12?",
            query_hash="bench",
            llm_backend=model.backend,
            source="bench",
        )
        for _ in range(count)
    ]
    await Trace.objects.abulk_create(traces)
    async with httpx.AsyncClient() as client:
        executor = ToolExecutor(
            tools=tools, http_client=client, max_response_bytes=65536, max_redirects=0
        )

        async def one(trace: Trace) -> None:
            run = AgentRun(
                trace_id=str(trace.pk),
                query=trace.query,
                customer_id="",
                llm=model,
                executor=executor,
                sink=RunSink(trace_id=str(trace.pk)),
                rules=rules,
                config=config,
            )
            outcome = await run.run()
            assert outcome.status == "finished", outcome

        await asyncio.gather(*(one(t) for t in traces))


def bench_in_flight(*, in_flight: int, latency_s: float) -> dict[str, Any]:
    """``in_flight`` runs at once in this process, each waiting ``latency_s`` per model call
    (scripted model, in-process tool): how many wait on the model at once, and how long
    they all take against the sequential lower bound."""
    from traces.models import Trace

    agent, tools = _agent_and_tools()
    slow = ScriptedModel(latency_s=latency_s)
    started = time.perf_counter()
    async_to_sync(_run_many)(in_flight, slow, agent, tools)
    wall = time.perf_counter() - started
    Trace.objects.filter(source="bench", llm_backend=slow.backend).delete()
    return {
        "runs": in_flight,
        "model_latency_s": latency_s,
        "model_calls_per_run": 3,
        "wall_seconds": wall,
        "ideal_seconds": 3 * latency_s,
        "sequential_lower_bound_seconds": in_flight * 3 * latency_s,
        "max_runs_waiting_on_the_model_at_once": slow.max_in_flight,
    }


@contextlib.contextmanager
def run_path_connections(name: str) -> Iterator[None]:
    """This process's Django connections carry ``name`` (so the backends serving them can
    be found in ``pg_stat_activity``) and live ``WORKER_CONN_MAX_AGE`` seconds, as in the
    production worker; both are put back afterwards."""
    db = connection.settings_dict
    saved = (dict(db.get("OPTIONS") or {}), db.get("CONN_MAX_AGE"))
    connections.close_all()
    db["OPTIONS"] = {**saved[0], "application_name": name}
    db["CONN_MAX_AGE"] = WORKER_CONN_MAX_AGE
    try:
        yield
    finally:
        connections.close_all()
        db["OPTIONS"], db["CONN_MAX_AGE"] = saved


def conninfo_for_default() -> str:
    """libpq conninfo of Django's default database (the one the benchmark writes to)."""
    from psycopg.conninfo import make_conninfo

    db = connection.settings_dict
    parts = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
    }
    return make_conninfo(**{k: v for k, v in parts.items() if v})


def bench_setup() -> str:
    """The default agent with the code-declared tools, and a sandbox shop (a small one is
    generated when there is none); returns the SKU the episode asks about."""
    from agents.models import Tool
    from agents.services import agent_ensure_default, tools_sync
    from bench.peers import TOOL
    from sandbox.generate import shop_generate
    from sandbox.models import Sku
    from traces.models import Trace

    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    # Start clean: no runs of an earlier benchmark, no suspension its timeouts caused.
    Trace.objects.filter(source="bench").delete()
    Tool.objects.filter(name=TOOL).update(suspended_until=None)
    if not Sku.objects.exists():
        shop_generate(seed=42, users=30, orders=60, products=8)
    return str(Sku.objects.order_by("sku").values_list("sku", flat=True)[0])


def bench_runtime(
    *,
    sequential_runs: int,
    concurrent_runs: int,
    rounds: int,
    in_flight: int,
    latency_s: float,
    sandbox_url: str = "",
    pool_size: int = 10,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Both parts; a benchmark Job reports each measurement. ``sandbox_url`` uses a sandbox
    already served (tests); otherwise one is started on its own daphne process."""
    from agents.models import Tool
    from bench.peers import TOOL, Context, bench_peers, sandbox_served
    from traces.models import Job
    from traces.services import job_progress, job_running

    if connection.vendor != "postgresql":
        raise RuntimeError("the side-by-side benchmark needs PostgreSQL (BENCH_DATABASE_URL)")
    sku = bench_setup()
    with contextlib.ExitStack() as stack:
        sandbox_pids: list[int] = []
        if not sandbox_url:
            database_url = os.environ.get("DATABASE_URL", "")
            if not database_url:
                raise RuntimeError("set DATABASE_URL for the sandbox's own process")
            sandbox_url, process = stack.enter_context(
                sandbox_served(database_url=database_url, probe_sku=sku)
            )
            sandbox_pids.append(process.pid)
        saved_base = settings.SANDBOX_BASE_URL
        settings.SANDBOX_BASE_URL = sandbox_url
        stack.callback(setattr, settings, "SANDBOX_BASE_URL", saved_base)
        ctx = Context(
            sandbox_url=sandbox_url, sku=sku, conninfo=conninfo_for_default(), pool_size=pool_size
        )
        # The run path's tool timeout is the Tool row's: the same as the peers' for the
        # measurement (bench.peers.Context.tool_timeout_s), put back afterwards.
        tool = Tool.objects.get(name=TOOL)
        Tool.objects.filter(pk=tool.pk).update(timeout_seconds=ctx.tool_timeout_s)
        stack.callback(
            lambda: Tool.objects.filter(pk=tool.pk).update(timeout_seconds=tool.timeout_seconds)
        )
        job = stack.enter_context(
            job_running(
                kind=Job.Kind.BENCHMARK,
                name=(
                    f"bench_runtime sequential={sequential_runs} concurrent={concurrent_runs} "
                    f"rounds={rounds} in_flight={in_flight}"
                ),
                total=2,
            )
        )
        with run_path_connections("agentops-bench-ours"):
            peers = bench_peers(
                ctx,
                sequential_runs=sequential_runs,
                concurrent_runs=concurrent_runs,
                rounds=rounds,
                sandbox_pids=sandbox_pids,
                progress=progress,
            )
        job_progress(job_id=job.pk, message="side by side measured")
        flight = bench_in_flight(in_flight=in_flight, latency_s=latency_s)
        job_progress(
            job_id=job.pk,
            message=f"{in_flight} runs in flight in {flight['wall_seconds']:.1f} s",
        )
    return {"side_by_side": peers, "in_flight": flight}


def _load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


GOALS = {
    "langgraph": 5.0,  # durable steps one at a time, ours / LangGraph + PostgresSaver
    "agents_sdk": 2.0,  # ours / Agents SDK (persists nothing)
}
CPU_GOALS_MS = {"sequential": 0.3, "concurrent": 0.2}


def goals_assess(side: dict[str, Any]) -> list[dict[str, Any]]:
    """Each of issue 10's goals for this benchmark: the figure measured and met or not."""
    goals = []
    ratios = side["ratios_steps_per_s"].get("sequential", {})
    for impl, floor in GOALS.items():
        ratio = ratios.get(f"ours/{impl}")
        goals.append(
            {
                "goal": f"durable steps one at a time >= {floor:g}x {impl}",
                "measured": ratio,
                "met": None if ratio is None else ratio >= floor,
            }
        )
    for mode, ceiling in CPU_GOALS_MS.items():
        ours = side["results"].get(mode, {}).get("ours")
        cpu = ours["client_cpu_ms_per_step"] if ours else None
        goals.append(
            {
                "goal": f"client CPU per step ({mode}) <= {ceiling} ms",
                "measured": cpu,
                "met": None if cpu is None else cpu <= ceiling,
            }
        )
    return goals


def report_write(result: dict[str, Any], *, output_dir: Path, command: str) -> list[Path]:
    side, flight = result["side_by_side"], result["in_flight"]
    result = {
        "command": command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1_5_15": _load_average(),
            "python": sys.version.split()[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
            "niceness": os.nice(0),
        },
        **result,
        "goals": goals_assess(side),
    }
    machine = result["machine"]
    s = side["settings"]
    lines = [
        "# Runtime benchmark: side by side with the peers",
        "",
        f"- command: `{command}`",
        f"- machine: {machine['platform']}, {machine['cpus']} CPUs, Python "
        f"{machine['python']}, database {machine['database']}, nice {machine['niceness']}, "
        f"load average (1/5/15 min) at the end: "
        + " / ".join(str(v) for v in machine["load_average_1_5_15"]),
        "- model: a scripted zero-latency benchmark instrument in every implementation (NOT "
        "an LLM), each behind that implementation's own model interface",
        "- tool: `GET /sandbox/api/skus/{sku}` over HTTP to the sandbox shop on its own daphne "
        "process (as `bin/serve` runs it, but admitting 16 requests at once: "
        "`bench/sandbox_asgi.py` says why), same endpoint for every implementation, with a "
        f"{s['tool_timeout_s']:g} s timeout in each (the product's default is 3 s: the one "
        "sandbox process takes several seconds to answer 200 requests at once here); an "
        "episode whose tool call failed fails the benchmark",
        f"- one run at a time: {s['sequential_runs']} episodes per round; concurrent: "
        f"{s['concurrent_runs']} episodes, up to {s['concurrency']} at once (asyncio); "
        f"{s['rounds']} rounds, implementations interleaved within each round, medians; "
        f"{s['warmup_runs']} untimed warm-up episodes each first",
        f"- an episode counts as {side['episode_steps']} steps in every implementation "
        "(steps/s = 5 x episodes/s)",
        "- client CPU: this process's CPU time (all threads) / steps; database CPU: the "
        "PostgreSQL backends of that implementation's connections (`pg_stat_activity` by "
        "`application_name`, `/proc/<pid>/stat` utime+stime before and after) / steps"
        + ("" if side["db_cpu_method"] else " (not readable here: n/a)")
        + "; tool CPU: the sandbox's daphne process / steps (not in client CPU)",
        f"- psycopg connections: LangGraph's pool and the plain loop hold {s['pool_size']}; "
        "this runtime's Django ORM work goes through its one `sync_to_async` thread and "
        "connection (kept between runs, `CONN_MAX_AGE` 60 s as in the production worker)",
    ]
    if not side["peers_installed"]:
        lines.append(
            "- **the peers were not measured**: the bench-only extra is not installed "
            "(`pip install -e '.[peers]'`; `make bench` installs it)"
        )
    for mode, title in (
        ("sequential", "One run at a time"),
        ("concurrent", f"{s['concurrent_runs']} runs at once"),
    ):
        rows = side["results"].get(mode, {})
        if not rows:
            continue
        ratios = side["ratios_steps_per_s"].get(mode, {})
        lines += [
            "",
            f"## {title}",
            "",
            "| implementation | durable | steps/s | ours / it | client CPU ms/step "
            "| database CPU ms/step | tool CPU ms/step | steps/s per round |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for impl, row in rows.items():
            ratio = ratios.get(f"ours/{impl}")
            lines.append(
                f"| {row['label']} | {'yes' if row['durable'] else 'no'} "
                f"| {_fmt(row['steps_per_s'], 0)} | {'-' if ratio is None else _fmt(ratio)} "
                f"| {_fmt(row['client_cpu_ms_per_step'])} | {_fmt(row['db_cpu_ms_per_step'])} "
                f"| {_fmt(row['tool_cpu_ms_per_step'])} | "
                + ", ".join(f"{r['steps_per_s']:.0f}" for r in row["samples"])
                + " |"
            )
    lines += ["", "## What one episode (5 steps) exercises", ""]
    first: dict[str, Any] = next(iter(side["results"].values()), {})
    for row in first.values():
        lines.append(f"- **{row['label']}**: {row['unit']}")
    lines += ["", "## Goals (issue 10)", ""]
    for goal in result["goals"]:
        met = {True: "met", False: "missed", None: "not measured"}[goal["met"]]
        lines.append(f"- {goal['goal']}: {_fmt(goal['measured'])} — **{met}**")
    lines += [
        "",
        "## Runs in flight in one process",
        "",
        f"{flight['runs']} runs, model latency {flight['model_latency_s']} s, 3 model calls "
        f"per run (scripted model, in-process tool, no HTTP): wall "
        f"{flight['wall_seconds']:.1f} s against an ideal of {flight['ideal_seconds']:.1f} s "
        f"(one at a time would take at least {flight['sequential_lower_bound_seconds']:.0f} "
        f"s); up to {flight['max_runs_waiting_on_the_model_at_once']} runs were waiting on "
        "the model at once.",
        "",
    ]
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = [output_dir / "runtime-latest.json", output_dir / "runtime-latest.md"]
    paths[0].write_text(json.dumps(result, indent=2))
    paths[1].write_text("\n".join(lines))
    return paths
