"""Runtime benchmarks: orchestration overhead per step, and runs in flight per process.

Both use a scripted zero-latency (or fixed-latency) model — a benchmark instrument, not the
simulated backend — and an in-process tool, so what is measured is the runtime itself:
state machine, parsing, validation, observation pipeline, prompt building and one durable
Step row per step. A plain loop doing one Step INSERT per step runs side by side as the
baseline, in the same process and database.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
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
EPISODE_STEPS = 5  # reasoning, action, reflection, reasoning, final


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


@dataclass
class Measurement:
    name: str
    seconds: list[float]
    steps: int

    @property
    def steps_per_second(self) -> float:
        return self.steps / statistics.median(self.seconds)


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


def _plain_loop(count: int, agent: Any) -> None:
    from traces.models import Step, Trace

    for _ in range(count):
        trace = Trace.objects.create(
            agent_id=agent.pk,
            query="baseline",
            query_hash="bench",
            llm_backend="none",
            source="bench",
        )
        for number in range(1, EPISODE_STEPS + 1):
            Step.objects.create(
                trace=trace, step_number=number, phase="reasoning", started_at=timezone.now()
            )


def bench_runtime(*, runs: int, repeats: int, in_flight: int, latency_s: float) -> dict[str, Any]:
    """Measure both sides ``repeats`` times, then runs in flight; a Job reports each phase."""
    from traces.models import Job
    from traces.services import job_running

    # Phases: per repeat the runtime and the plain loop, then the in-flight measurement.
    with job_running(
        kind=Job.Kind.BENCHMARK,
        name=f"bench_runtime runs={runs} repeats={repeats} in_flight={in_flight}",
        total=2 * repeats + 1,
    ) as job:
        return _bench_runtime(
            runs=runs, repeats=repeats, in_flight=in_flight, latency_s=latency_s, job_id=job.pk
        )


def _bench_runtime(
    *, runs: int, repeats: int, in_flight: int, latency_s: float, job_id: int
) -> dict[str, Any]:
    from traces.models import Trace
    from traces.services import job_progress

    agent, tools = _agent_and_tools()
    Trace.objects.filter(source="bench").delete()
    runtime, baseline = (
        Measurement("runtime", [], runs * EPISODE_STEPS),
        Measurement("plain INSERT loop", [], runs * EPISODE_STEPS),
    )
    cpu_per_step = []
    for _ in range(repeats):
        # Side by side, alternating, so machine noise hits both.
        started, cpu = time.perf_counter(), time.process_time()
        async_to_sync(_run_many)(runs, ScriptedModel(), agent, tools)
        runtime.seconds.append(time.perf_counter() - started)
        cpu_per_step.append((time.process_time() - cpu) / runtime.steps * 1000)
        job_progress(job_id=job_id, message=f"runtime: {runs} runs in {runtime.seconds[-1]:.2f} s")
        started = time.perf_counter()
        _plain_loop(runs, agent)
        baseline.seconds.append(time.perf_counter() - started)
        Trace.objects.filter(source="bench").delete()
        job_progress(
            job_id=job_id, message=f"plain loop: {runs} runs in {baseline.seconds[-1]:.2f} s"
        )
    slow = ScriptedModel(latency_s=latency_s)
    started = time.perf_counter()
    async_to_sync(_run_many)(in_flight, slow, agent, tools)
    in_flight_wall = time.perf_counter() - started
    Trace.objects.filter(source="bench").delete()
    job_progress(job_id=job_id, message=f"{in_flight} runs in flight in {in_flight_wall:.1f} s")
    return {
        "orchestration": {
            "episode_steps": EPISODE_STEPS,
            "runs_per_repeat": runs,
            "repeats": repeats,
            "runtime_steps_per_s_median": runtime.steps_per_second,
            "runtime_seconds": runtime.seconds,
            "runtime_cpu_ms_per_step_median": statistics.median(cpu_per_step),
            "baseline_steps_per_s_median": baseline.steps_per_second,
            "baseline_seconds": baseline.seconds,
            "ratio_runtime_to_baseline": runtime.steps_per_second / baseline.steps_per_second,
        },
        "in_flight": {
            "runs": in_flight,
            "model_latency_s": latency_s,
            "model_calls_per_run": 3,
            "wall_seconds": in_flight_wall,
            "sequential_lower_bound_seconds": in_flight * 3 * latency_s,
            "max_runs_waiting_on_the_model_at_once": slow.max_in_flight,
        },
    }


def report_write(result: dict[str, Any], *, output_dir: Path, command: str) -> list[Path]:
    result = {
        "command": command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        },
        **result,
    }
    o, f = result["orchestration"], result["in_flight"]
    md = "\n".join(
        [
            "# Runtime benchmark",
            "",
            f"- command: `{command}`",
            f"- machine: {result['machine']['platform']}, {result['machine']['cpus']} CPUs, "
            f"Python {result['machine']['python']}, database {result['machine']['database']}",
            "- model: scripted zero-latency benchmark instrument (not an LLM); tool: in-process",
            "",
            f"## Orchestration ({o['episode_steps']}-step episodes, {o['runs_per_repeat']} runs x "
            f"{o['repeats']} repeats, medians)",
            "",
            "| loop | steps/s | seconds per repeat |",
            "|---|---|---|",
            f"| ReAct runtime, durable Step per step | {o['runtime_steps_per_s_median']:.0f} | "
            + ", ".join(f"{s:.2f}" for s in o["runtime_seconds"])
            + " |",
            f"| plain loop, one INSERT per step | {o['baseline_steps_per_s_median']:.0f} | "
            + ", ".join(f"{s:.2f}" for s in o["baseline_seconds"])
            + " |",
            "",
            f"Ratio runtime / plain loop: {o['ratio_runtime_to_baseline']:.2f}. CPU per runtime "
            f"step (whole process): {o['runtime_cpu_ms_per_step_median']:.2f} ms.",
            "",
            "## Runs in flight in one process",
            "",
            f"{f['runs']} runs, model latency {f['model_latency_s']} s, 3 model calls per run: "
            f"wall {f['wall_seconds']:.1f} s (one at a time would take at least "
            f"{f['sequential_lower_bound_seconds']:.0f} s); up to "
            f"{f['max_runs_waiting_on_the_model_at_once']} runs were waiting on the model at once.",
            "",
        ]
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("runtime-latest",):
        (output_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
        (output_dir / f"{name}.md").write_text(md)
        paths += [output_dir / f"{name}.json", output_dir / f"{name}.md"]
    return paths
