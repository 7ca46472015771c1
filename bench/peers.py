"""Side by side: this runtime's full run path against LangGraph + PostgresSaver, the OpenAI
Agents SDK and a plain psycopg loop, on the same scripted episode (issue 10, item 3).

The episode: the model asks for one SKU's price, the tool is called over real HTTP (the
sandbox shop's ``GET /sandbox/api/skus/{sku}``, served by its own process as ``bin/serve``
serves it), the model reflects on the result, the model gives the final answer. The model
is a scripted, zero-latency benchmark instrument in every implementation (NOT an LLM), each
behind that implementation's own model interface. An episode counts as 5 steps everywhere
(``EPISODE_STEPS``), so steps/s compare episodes/s; what the 5 steps are in each
implementation is in ``UNITS``.

CPU: "client" is this process's CPU time (``time.process_time``: every thread) over the
steps it ran; "database" is the CPU of the PostgreSQL backends serving this process's
connections of that implementation (``pg_stat_activity`` by ``application_name``, then
``/proc/<pid>/stat`` utime + stime, before and after), which needs PostgreSQL on this
machine. The sandbox's own process and its backends (the tool) are counted apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agents.llm.base import ChatMessage, LLMResponse, LLMUsage

EPISODE_STEPS = 5
TOOL = "get_sku_price"
QUERY = "What does {sku} cost?"
FINAL_ANSWER = "I looked the price up in the shop; it is shown on the product page."
REFLECTION = {"expectation_met": True, "likely_cause": "", "next": "continue"}
SANDBOX_APP_NAME = "agentops-bench-sandbox"
PEER_DISTRIBUTIONS = ("langgraph", "langgraph-checkpoint-postgres", "openai-agents", "psycopg-pool")
# What one measured episode (5 steps) exercises in each implementation.
UNITS = {
    "ours": (
        "run_start (trace row, its transaction) + run_execute: load and lock the trace, "
        "policy resolution, 3 calls of the LLM client interface (scripted backend), the tool "
        "call through ToolExecutor (allow-list, SSRF guard, HTTP to the sandbox), "
        "observation pipeline, 5 durable Step rows (reasoning, action, reflection, "
        "reasoning, final; group commit across runs in flight), the tool-result cache "
        "upsert, trace finish and scoring (the run_ended receivers)"
    ),
    "langgraph": (
        "a StateGraph (agent -> ToolNode -> reflect -> agent) on a scripted LangChain chat "
        "model, 3 model calls, the tool over HTTP, AsyncPostgresSaver with "
        "durability='sync': 6 checkpoints (input, start, agent, tools, reflect, agent) "
        "with their writes and blobs, each persisted before the next step starts"
    ),
    "agents_sdk": (
        "Runner.run with a custom Model (scripted): 2 model turns (tool call, then the "
        "final answer; the SDK has no reflection turn without a tool, so it does one model "
        "call less), the function tool over HTTP; persists nothing; runs in a process of "
        "its own (its package is named `agents`, like this project's app)"
    ),
    "plain": (
        "a psycopg loop: the scripted model function 3 times, the tool over HTTP once, "
        "5 autocommit INSERTs (one per step) into a 6-column table"
    ),
    "plain_no_http": "the plain loop without the HTTP tool call: 5 autocommit INSERTs",
}
LABELS = {
    "ours": "this runtime (full run path)",
    "langgraph": "LangGraph + PostgresSaver (durability=sync)",
    "agents_sdk": "OpenAI Agents SDK (in memory, persists nothing)",
    "plain": "plain psycopg loop, one INSERT per step + the HTTP tool call",
    "plain_no_http": "plain psycopg loop, one INSERT per step, no HTTP",
}
DURABLE = {"ours", "langgraph", "plain", "plain_no_http"}


def peers_available() -> bool:
    """Whether the bench-only extra (``pip install -e '.[peers]'``) is installed."""
    return all(peer_version(name) for name in PEER_DISTRIBUTIONS)


# The SDK's package is named ``agents``, like this project's app: it lives in a virtualenv
# of its own (``make bench`` makes it from bench/sdk-requirements.txt), never in the app's,
# where it would shadow the app for any interpreter started outside the project root.
SDK_PYTHON = os.environ.get("BENCH_SDK_PYTHON") or str(
    Path(__file__).resolve().parent.parent / "var" / "bench-sdk-venv" / "bin" / "python"
)


def peer_version(distribution: str) -> str:
    if distribution == "openai-agents":
        return _sdk_version()
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _sdk_version() -> str:
    if not os.access(SDK_PYTHON, os.X_OK):
        return ""
    done = subprocess.run(
        [SDK_PYTHON, "-c", "import importlib.metadata as m; print(m.version('openai-agents'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass
class Context:
    sandbox_url: str  # .../sandbox/api
    sku: str
    conninfo: str  # libpq conninfo of the benchmark database
    pool_size: int = 10
    # The tool's timeout in every implementation (the run path's Tool row is set to it):
    # the one sandbox process answers 200 requests at once in several seconds here, past
    # the product's 3 s default, and a timed-out call would end the episode differently.
    tool_timeout_s: float = 30.0

    def tool_url(self) -> str:
        return f"{self.sandbox_url}/skus/{self.sku}"

    def app_conninfo(self, name: str) -> str:
        return f"{self.conninfo} application_name={name}"


def scripted_turn(kind: str, sku: str) -> dict[str, Any]:
    """The scripted model's answer for one turn of the episode (every implementation)."""
    if kind == "act":
        return {
            "thought": "look the price up",
            "action": TOOL,
            "action_input": {"sku": sku},
            "expectation": "the SKU's price",
        }
    if kind == "reflect":
        return dict(REFLECTION)
    return {
        "thought": "done",
        "action": "final_answer",
        "action_input": {},
        "final_answer": FINAL_ANSWER,
    }


# --- this runtime -------------------------------------------------------------------------


class ScriptedBackend:
    """A zero-latency LLM backend behind the runtime's ``LLMClient`` interface (benchmark
    instrument, not an LLM): the episode position follows from the prompt."""

    backend = "scripted-bench"
    model = "scripted-bench"

    def __init__(self, sku: str) -> None:
        self.sku = sku
        self.calls = 0

    async def complete(
        self,
        *,
        messages: list[ChatMessage],
        schema: type[BaseModel],
        purpose: str,
        json_schema: dict[str, Any] | None = None,
    ) -> LLMResponse:
        self.calls += 1
        if purpose == "reflection":
            kind = "reflect"
        else:
            kind = "final" if "### Round 1" in messages[-1].content else "act"
        text = json.dumps(scripted_turn(kind, self.sku))
        return LLMResponse(text=text, backend=self.backend, model=self.model, usage=LLMUsage())


@contextlib.contextmanager
def runtime_hooks(backend: ScriptedBackend) -> Iterator[None]:
    """Route the run path's LLM client to the scripted backend, and keep ``run_start`` from
    handing runs to a broker or the in-process loop (the benchmark executes each run itself,
    with ``run_execute``, as the Celery task does). agents.services offers no hook for
    either, so its module attributes are swapped for the measurement."""
    import agents.services as services

    saved = (services.llm_client_build, services.run_enqueue)

    def build(**_: Any) -> ScriptedBackend:
        return backend

    def enqueue(*, trace_id: str) -> None:
        return None

    services.llm_client_build = build
    services.run_enqueue = enqueue
    try:
        yield
    finally:
        services.llm_client_build, services.run_enqueue = saved


class Ours:
    name = "ours"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.backend = ScriptedBackend(ctx.sku)
        self.trace_ids: list[str] = []
        self.app_names = ["agentops-bench-ours"]

    async def setup(self) -> None:
        pass

    async def teardown(self) -> None:
        from asgiref.sync import sync_to_async
        from django.db import connections

        # The sync_to_async thread's connection is kept between runs (CONN_MAX_AGE).
        await sync_to_async(connections.close_all)()

    async def run(self, count: int, concurrency: int) -> None:
        from asgiref.sync import sync_to_async

        from agents.models import Agent
        from agents.services import DEFAULT_AGENT_SLUG, run_execute, run_start

        agent = await Agent.objects.aget(slug=DEFAULT_AGENT_SLUG)
        query = QUERY.format(sku=self.ctx.sku)

        async def one() -> None:
            trace = await sync_to_async(run_start)(agent=agent, query=query, source="bench")
            trace_id = str(trace.pk)
            self.trace_ids.append(trace_id)
            outcome = await run_execute(trace_id=trace_id)
            if outcome is None or outcome.status != "finished":
                raise RuntimeError(f"bench run {trace_id} did not finish: {outcome}")

        with runtime_hooks(self.backend):
            await _in_waves(one, count, concurrency)

    records_per_episode = EPISODE_STEPS  # Step rows
    tool_calls_per_episode = 1

    @property
    def tool_calls(self) -> int:
        """Successful calls of the tool, from the runs' action Steps."""
        from traces.models import Step

        return Step.objects.filter(
            trace_id__in=self.trace_ids, phase="action", tool_name=TOOL, ok=True
        ).count()

    def records(self) -> int:
        from traces.models import Step

        return Step.objects.filter(trace_id__in=self.trace_ids).count()

    def clear(self) -> None:
        from traces.models import Trace

        Trace.objects.filter(pk__in=self.trace_ids).delete()
        self.trace_ids = []


async def _in_waves(one: Callable[[], Awaitable[None]], count: int, concurrency: int) -> None:
    """``count`` episodes, ``concurrency`` in flight at once (1: one after the other)."""
    done = 0
    while done < count:
        batch = min(concurrency, count - done)
        await asyncio.gather(*(one() for _ in range(batch)))
        done += batch


# --- plain psycopg loop -------------------------------------------------------------------

PLAIN_TABLE = """
create table if not exists bench_plain_step (
    id bigserial primary key,
    run_id uuid not null,
    step_number int not null,
    phase text not null,
    payload jsonb not null,
    created_at timestamptz not null default now()
)
"""
PHASES = ("reasoning", "action", "reflection", "reasoning", "final")
TURNS = {0: "act", 2: "reflect", 3: "final"}


class Plain:
    name = "plain"

    def __init__(self, ctx: Context, *, http: bool = True) -> None:
        self.ctx = ctx
        self.http = http
        self.name = "plain" if http else "plain_no_http"
        self.app_names = [f"agentops-bench-{self.name}"]
        self.run_ids: list[uuid.UUID] = []
        self.pool: Any = None
        self.client: Any = None
        self.tool_calls = 0  # answered with 200
        self.tool_calls_per_episode = 1 if http else 0

    async def setup(self) -> None:
        import httpx
        import psycopg

        self.pool = _ConnectionQueue(
            [
                await psycopg.AsyncConnection.connect(
                    self.ctx.app_conninfo(self.app_names[0]), autocommit=True
                )
                for _ in range(self.ctx.pool_size)
            ]
        )
        async with self.pool.connection() as conn:
            await conn.execute(PLAIN_TABLE)
        self.client = httpx.AsyncClient(trust_env=False, timeout=self.ctx.tool_timeout_s)

    async def teardown(self) -> None:
        await self.pool.close()
        await self.client.aclose()

    async def run(self, count: int, concurrency: int) -> None:
        from psycopg.types.json import Jsonb

        async def one() -> None:
            run_id = uuid.uuid4()
            self.run_ids.append(run_id)
            observation = ""
            for number, phase in enumerate(PHASES, start=1):
                turn = TURNS.get(number - 1)
                payload: dict[str, Any] = scripted_turn(turn, self.ctx.sku) if turn else {}
                if phase == "action" and self.http:
                    response = await self.client.get(self.ctx.tool_url())
                    response.raise_for_status()
                    self.tool_calls += 1
                    observation = response.text
                    payload = {"observation": observation[:2000]}
                async with self.pool.connection() as conn:
                    await conn.execute(
                        "insert into bench_plain_step (run_id, step_number, phase, payload) "
                        "values (%s, %s, %s, %s)",
                        (run_id, number, phase, Jsonb(payload)),
                    )

        await _in_waves(one, count, concurrency)

    records_per_episode = EPISODE_STEPS  # rows

    def records(self) -> int:
        import psycopg

        with psycopg.connect(self.ctx.conninfo) as conn:
            row = conn.execute(
                "select count(*) from bench_plain_step where run_id = any(%s)", (self.run_ids,)
            ).fetchone()
        return int(row[0]) if row else 0

    def clear(self) -> None:
        import psycopg

        with psycopg.connect(self.ctx.conninfo, autocommit=True) as conn:
            conn.execute("delete from bench_plain_step where run_id = any(%s)", (self.run_ids,))
        self.run_ids = []
        self.tool_calls = 0


class _ConnectionQueue:
    """A fixed set of open connections handed out one at a time (the plain loop's pool:
    nothing but a queue, so it adds no cost of its own)."""

    def __init__(self, connections: list[Any]) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.connections = connections
        for conn in connections:
            self.queue.put_nowait(conn)

    @contextlib.asynccontextmanager
    async def connection(self) -> Any:
        conn = await self.queue.get()
        try:
            yield conn
        finally:
            self.queue.put_nowait(conn)

    async def close(self) -> None:
        for conn in self.connections:
            await conn.close()


# --- LangGraph + PostgresSaver ------------------------------------------------------------


class LangGraph:
    name = "langgraph"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.app_names = ["agentops-bench-langgraph"]
        self.thread_ids: list[str] = []
        self.model_calls = 0
        self.tool_calls = 0  # answered with 200
        self.tool_calls_per_episode = 1

    async def setup(self) -> None:
        import httpx

        graph_mod: Any = importlib.import_module("langgraph.graph")
        prebuilt: Any = importlib.import_module("langgraph.prebuilt")
        saver_mod: Any = importlib.import_module("langgraph.checkpoint.postgres.aio")
        pool_mod: Any = importlib.import_module("psycopg_pool")
        rows: Any = importlib.import_module("psycopg.rows")
        chat: Any = importlib.import_module("langchain_core.language_models.chat_models")
        messages: Any = importlib.import_module("langchain_core.messages")
        outputs: Any = importlib.import_module("langchain_core.outputs")
        tools: Any = importlib.import_module("langchain_core.tools")

        bench = self
        sku = self.ctx.sku
        self.client = httpx.AsyncClient(trust_env=False, timeout=self.ctx.tool_timeout_s)
        client, url = self.client, self.ctx.tool_url()

        class ScriptedChatModel(chat.BaseChatModel):
            """Benchmark instrument (not an LLM): the turn follows from the messages."""

            @property
            def _llm_type(self) -> str:
                return "scripted-bench"

            def _turn(self, history: list[Any]) -> Any:
                bench.model_calls += 1
                if not any(isinstance(m, messages.ToolMessage) for m in history):
                    call_id = f"call-{uuid.uuid4().hex[:12]}"
                    return messages.AIMessage(
                        content="",
                        tool_calls=[{"name": TOOL, "args": {"sku": sku}, "id": call_id}],
                    )
                answers = sum(isinstance(m, messages.AIMessage) for m in history)
                kind = "reflect" if answers == 1 else "final"
                return messages.AIMessage(content=json.dumps(scripted_turn(kind, sku)))

            def _generate(self, history: list[Any], stop: Any = None, **_: Any) -> Any:
                generation = outputs.ChatGeneration(message=self._turn(history))
                return outputs.ChatResult(generations=[generation])

            async def _agenerate(self, history: list[Any], stop: Any = None, **_: Any) -> Any:
                return self._generate(history, stop)

        async def get_sku_price(sku: str) -> str:
            """Price, promotions and final price of one SKU code."""
            response = await client.get(url)
            response.raise_for_status()
            bench.tool_calls += 1
            return str(response.text)

        model = ScriptedChatModel()

        async def agent(state: dict[str, Any]) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        async def reflect(state: dict[str, Any]) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        def route(state: dict[str, Any]) -> str:
            return "tools" if state["messages"][-1].tool_calls else graph_mod.END

        builder = graph_mod.StateGraph(graph_mod.MessagesState)
        builder.add_node("agent", agent)
        builder.add_node(
            "tools",
            prebuilt.ToolNode(
                [tools.StructuredTool.from_function(coroutine=get_sku_price, name=TOOL)]
            ),
        )
        builder.add_node("reflect", reflect)
        builder.add_edge(graph_mod.START, "agent")
        builder.add_conditional_edges("agent", route, ["tools", graph_mod.END])
        builder.add_edge("tools", "reflect")
        builder.add_edge("reflect", "agent")
        self.pool = pool_mod.AsyncConnectionPool(
            self.ctx.app_conninfo(self.app_names[0]),
            min_size=self.ctx.pool_size,
            max_size=self.ctx.pool_size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": rows.dict_row},
            open=False,
        )
        await self.pool.open(wait=True)
        saver = saver_mod.AsyncPostgresSaver(self.pool)
        await saver.setup()
        self.graph = builder.compile(checkpointer=saver)
        self.human = messages.HumanMessage

    async def teardown(self) -> None:
        await self.pool.close()
        await self.client.aclose()

    async def run(self, count: int, concurrency: int) -> None:
        query = QUERY.format(sku=self.ctx.sku)

        async def one() -> None:
            thread_id = str(uuid.uuid4())
            self.thread_ids.append(thread_id)
            state = await self.graph.ainvoke(
                {"messages": [self.human(content=query)]},
                {"configurable": {"thread_id": thread_id}},
                durability="sync",
            )
            if json.loads(state["messages"][-1].content)["final_answer"] != FINAL_ANSWER:
                raise RuntimeError("LangGraph episode did not end with the final answer")

        await _in_waves(one, count, concurrency)

    records_per_episode = 6  # checkpoints

    def records(self) -> int:
        import psycopg

        with psycopg.connect(self.ctx.conninfo) as conn:
            row = conn.execute(
                "select count(*) from checkpoints where thread_id = any(%s)", (self.thread_ids,)
            ).fetchone()
        return int(row[0]) if row else 0

    def clear(self) -> None:
        import psycopg

        with psycopg.connect(self.ctx.conninfo, autocommit=True) as conn:
            for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
                conn.execute(f"delete from {table} where thread_id = any(%s)", (self.thread_ids,))
        self.thread_ids = []
        self.model_calls = self.tool_calls = 0


# --- OpenAI Agents SDK --------------------------------------------------------------------


class AgentsSDK:
    """Drives ``bench/sdk_worker.py``: the SDK's package is named ``agents`` like this
    project's app, so it runs in a process of its own (without Django), and its client CPU
    is that process's CPU time over the episodes."""

    name = "agents_sdk"
    records_per_episode = 1  # nothing is persisted: episodes that gave the final answer

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.app_names: list[str] = []  # it has no database
        self.episodes = 0
        self.model_calls = 0
        self.tool_calls = 0  # answered with 200
        self.tool_calls_per_episode = 1
        self.process: subprocess.Popen[str] | None = None

    async def setup(self) -> None:
        config = {
            "sku": self.ctx.sku,
            "tool_url": self.ctx.tool_url(),
            "final_answer": FINAL_ANSWER,
            "query": QUERY.format(sku=self.ctx.sku),
            "tool_timeout_s": self.ctx.tool_timeout_s,
        }
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdk_worker.py")
        self.process = subprocess.Popen(
            [SDK_PYTHON, worker, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def teardown(self) -> None:
        if self.process is None:
            return
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    async def run(self, count: int, concurrency: int) -> float:
        """Runs the episodes in the worker; returns the worker's CPU seconds."""
        assert self.process is not None and self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps({"run": count, "concurrency": concurrency}) + "\n")
        self.process.stdin.flush()
        line = await asyncio.to_thread(self.process.stdout.readline)
        if not line:
            raise RuntimeError(f"the Agents SDK worker exited with {self.process.wait()}")
        reply = json.loads(line)
        self.episodes += int(reply["episodes"])
        self.model_calls += int(reply["model_calls"])
        self.tool_calls += int(reply["tool_calls"])
        return float(reply["cpu_s"])

    def records(self) -> int:
        return self.episodes

    def clear(self) -> None:
        self.episodes = self.model_calls = self.tool_calls = 0


# --- measurement --------------------------------------------------------------------------


def _proc_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackendCPU:
    """CPU of the PostgreSQL backends serving connections with given application names."""

    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.conn = psycopg.connect(f"{conninfo} application_name=agentops-bench-probe")
        self.conn.autocommit = True

    def snapshot(self, names: list[str]) -> dict[int, float]:
        if not names:
            return {}
        rows = self.conn.execute(
            "select pid from pg_stat_activity where datname = current_database() "
            "and application_name = any(%s)",
            (names,),
        ).fetchall()
        found = {pid: _proc_cpu_seconds(pid) for (pid,) in rows}
        return {pid: cpu for pid, cpu in found.items() if cpu is not None}

    def readable(self) -> bool:
        (pid,) = self.conn.execute("select pg_backend_pid()").fetchone() or (0,)
        return _proc_cpu_seconds(int(pid)) is not None

    def close(self) -> None:
        self.conn.close()


@dataclass
class Sample:
    impl: str
    mode: str  # "sequential" | "concurrent"
    runs: int
    records: int  # rows / checkpoints / episodes counted after the measurement
    steps: int
    wall_s: float
    client_cpu_s: float
    db_cpu_s: float | None
    db_backends: int
    db_backends_gone: int
    tool_cpu_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "steps_per_s": self.steps / self.wall_s,
            "client_cpu_ms_per_step": self.client_cpu_s / self.steps * 1000,
            "db_cpu_ms_per_step": None
            if self.db_cpu_s is None
            else self.db_cpu_s / self.steps * 1000,
            "tool_cpu_ms_per_step": None
            if self.tool_cpu_s is None
            else self.tool_cpu_s / self.steps * 1000,
        }


@dataclass
class Bench:
    ctx: Context
    runner: asyncio.Runner
    impls: list[Any] = field(default_factory=list)
    probe: BackendCPU | None = None
    sandbox_pids: list[int] = field(default_factory=list)

    def measure(self, impl: Any, mode: str, runs: int, concurrency: int) -> Sample:
        names = impl.app_names
        before = self.probe.snapshot(names) if self.probe else {}
        tool_before = self._tool_cpu()
        cpu, started = time.process_time(), time.perf_counter()
        elsewhere = self.runner.run(impl.run(runs, concurrency))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if elsewhere is not None:
            cpu = elsewhere  # the implementation ran in a process of its own
        tool_after = self._tool_cpu()
        after = self.probe.snapshot(names) if self.probe else {}
        records = impl.records()
        expected = runs * impl.records_per_episode
        if records != expected:
            raise RuntimeError(f"{impl.name}: {records} records, {expected} expected")
        steps = runs * EPISODE_STEPS
        tool_calls = getattr(impl, "tool_calls", None)
        if tool_calls is not None and tool_calls != runs * impl.tool_calls_per_episode:
            raise RuntimeError(f"{impl.name}: {tool_calls} tool calls answered, {runs} expected")
        impl.clear()
        db_cpu = None
        if self.probe is not None and names:
            db_cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)
        return Sample(
            impl=impl.name,
            mode=mode,
            runs=runs,
            records=records,
            steps=steps,
            wall_s=wall,
            client_cpu_s=cpu,
            db_cpu_s=db_cpu,
            db_backends=len(after),
            db_backends_gone=len(set(before) - set(after)),
            tool_cpu_s=None
            if tool_before is None or tool_after is None
            else tool_after - tool_before,
        )

    def _tool_cpu(self) -> float | None:
        if not self.sandbox_pids:
            return None
        values = [_proc_cpu_seconds(pid) for pid in self.sandbox_pids]
        if any(v is None for v in values):
            return None
        return sum(v for v in values if v is not None)


def implementations(ctx: Context, *, peers: bool) -> list[Any]:
    impls: list[Any] = [Ours(ctx)]
    if peers:
        impls += [LangGraph(ctx), AgentsSDK(ctx)]
    impls += [Plain(ctx), Plain(ctx, http=False)]
    return impls


def bench_peers(
    ctx: Context,
    *,
    sequential_runs: int,
    concurrent_runs: int,
    rounds: int,
    warmup_runs: int = 2,
    sandbox_pids: list[int] | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Every implementation one run at a time (``sequential_runs`` episodes) and
    ``concurrent_runs`` at once, interleaved round by round; medians per implementation."""
    peers = peers_available()
    with asyncio.Runner() as runner:
        bench = Bench(ctx=ctx, runner=runner, sandbox_pids=list(sandbox_pids or []))
        probe = BackendCPU(ctx.conninfo)
        bench.probe = probe if probe.readable() else None
        impls = implementations(ctx, peers=peers)
        samples: list[Sample] = []
        try:
            for impl in impls:
                runner.run(impl.setup())
                bench.measure(impl, "warmup", warmup_runs, 1)
            modes = [("sequential", sequential_runs, 1), ("concurrent", concurrent_runs, 200)]
            for number in range(1, rounds + 1):
                for mode, runs, concurrency in modes:
                    if runs <= 0:
                        continue
                    for impl in impls:
                        sample = bench.measure(impl, mode, runs, min(concurrency, runs))
                        samples.append(sample)
                        progress(
                            f"round {number} {mode} {impl.name}: "
                            f"{sample.steps / sample.wall_s:.0f} steps/s"
                        )
        finally:
            for impl in impls:
                with contextlib.suppress(Exception):
                    runner.run(impl.teardown())
            probe.close()
    return summarize(
        samples,
        peers=peers,
        db_cpu_method=None if bench.probe is None else "pg_stat_activity + /proc",
        impls=[i.name for i in impls],
        settings_used={
            "sequential_runs": sequential_runs,
            "concurrent_runs": concurrent_runs,
            "concurrency": 200,
            "rounds": rounds,
            "warmup_runs": warmup_runs,
            "pool_size": ctx.pool_size,
            "tool_timeout_s": ctx.tool_timeout_s,
        },
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(
    samples: list[Sample],
    *,
    peers: bool,
    db_cpu_method: str | None,
    impls: list[str],
    settings_used: dict[str, Any],
) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for mode in ("sequential", "concurrent"):
        table[mode] = {}
        for impl in impls:
            rows = [s.as_dict() for s in samples if s.impl == impl and s.mode == mode]
            if not rows:
                continue
            table[mode][impl] = {
                "label": LABELS[impl],
                "durable": impl in DURABLE,
                "unit": UNITS[impl],
                "rounds": len(rows),
                "steps_per_s": _median([r["steps_per_s"] for r in rows]),
                "client_cpu_ms_per_step": _median([r["client_cpu_ms_per_step"] for r in rows]),
                "db_cpu_ms_per_step": _median([r["db_cpu_ms_per_step"] for r in rows]),
                "tool_cpu_ms_per_step": _median([r["tool_cpu_ms_per_step"] for r in rows]),
                "samples": rows,
            }
    ratios: dict[str, dict[str, float]] = {}
    for mode, by_impl in table.items():
        ours = by_impl.get("ours")
        if not ours:
            continue
        ratios[mode] = {
            f"ours/{impl}": ours["steps_per_s"] / row["steps_per_s"]
            for impl, row in by_impl.items()
            if impl != "ours"
        }
    return {
        "episode_steps": EPISODE_STEPS,
        "peers_installed": peers,
        "peer_versions": {name: peer_version(name) for name in PEER_DISTRIBUTIONS},
        "db_cpu_method": db_cpu_method,
        "settings": settings_used,
        "results": table,
        "ratios_steps_per_s": ratios,
    }


# --- the sandbox as its own process -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def sandbox_served(
    *, database_url: str, probe_sku: str, timeout_s: float = 60.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The sandbox shop on its own daphne process, as ``bin/serve`` runs it, but admitting
    at most 16 requests at once (``bench.sandbox_asgi``); yields its base URL and process.
    Its database connections carry ``SANDBOX_APP_NAME``."""
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}/sandbox/api"
    joiner = "&" if "?" in database_url else "?"
    env = {
        **os.environ,
        "DATABASE_URL": f"{database_url}{joiner}application_name={SANDBOX_APP_NAME}",
        "SANDBOX_BASE_URL": base,
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local"),
    }
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)),
            "bench.sandbox_asgi:application",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the sandbox server exited with {process.returncode}")
            try:
                if httpx.get(f"{base}/skus/{probe_sku}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox server did not answer on {base}")
            time.sleep(0.2)  # polling interval until the server answers (deadline above)
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def database_ensure(url: str) -> bool:
    """Create the PostgreSQL database ``url`` names unless it exists; True when created."""
    from urllib.parse import unquote, urlsplit

    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    maintenance = parts._replace(path="/postgres").geturl()
    with psycopg.connect(maintenance, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return False
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return True


if __name__ == "__main__":  # python -m bench.peers ensure-database URL (make bench)
    if len(sys.argv) != 3 or sys.argv[1] != "ensure-database":
        raise SystemExit("usage: python -m bench.peers ensure-database postgres://.../name")
    created = database_ensure(sys.argv[2])
    print(f"database {'created' if created else 'exists'}: {sys.argv[2].rsplit('/', 1)[-1]}")
