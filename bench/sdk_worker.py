"""The OpenAI Agents SDK side of ``bench/peers.py``, in a process of its own.

The SDK's top-level package is named ``agents``, like this project's Django app, so the two
cannot be imported in one process: ``bench.peers`` starts this file as a script (its
directory, not the project's, is first on ``sys.path``, so ``agents`` is the SDK here) and
drives it over stdin/stdout, one JSON line per command. Nothing of the project is imported.

Commands: ``{"run": N, "concurrency": C}`` answers ``{"episodes", "cpu_s", "wall_s",
"model_calls", "tool_calls"}`` with this process's CPU time over the episodes; ``{"quit":
true}`` ends it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
import uuid
from typing import Any

TOOL = "get_sku_price"


async def serve(config: dict[str, Any]) -> None:
    import httpx

    sdk: Any = importlib.import_module("agents")
    interface: Any = importlib.import_module("agents.models.interface")
    items: Any = importlib.import_module("agents.items")
    usage: Any = importlib.import_module("agents.usage")
    responses: Any = importlib.import_module("openai.types.responses")
    sdk.set_tracing_disabled(True)  # no span export to OpenAI's servers

    sku, url, final_answer = config["sku"], config["tool_url"], config["final_answer"]
    counts = {"model_calls": 0, "tool_calls": 0}
    client = httpx.AsyncClient(trust_env=False, timeout=float(config["tool_timeout_s"]))

    class ScriptedSDKModel(interface.Model):
        """Benchmark instrument (not an LLM) behind the SDK's Model interface: the tool
        call first, the final answer once the tool's output is in the input."""

        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> Any:
            counts["model_calls"] += 1
            answered = any(
                isinstance(item, dict) and item.get("type") == "function_call_output"
                for item in (input if isinstance(input, list) else [])
            )
            if not answered:
                output: list[Any] = [
                    responses.ResponseFunctionToolCall(
                        type="function_call",
                        id=f"fc_{uuid.uuid4().hex[:12]}",
                        call_id=f"call_{uuid.uuid4().hex[:12]}",
                        name=TOOL,
                        arguments=json.dumps({"sku": sku}),
                    )
                ]
            else:
                output = [
                    responses.ResponseOutputMessage(
                        id=f"msg_{uuid.uuid4().hex[:12]}",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[
                            responses.ResponseOutputText(
                                type="output_text", text=final_answer, annotations=[]
                            )
                        ],
                    )
                ]
            return items.ModelResponse(output=output, usage=usage.Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            # Required by the SDK's Model interface; Runner.run never streams.
            raise NotImplementedError("the benchmark does not stream")

    async def get_sku_price(sku: str) -> str:
        """Price, promotions and final price of one SKU code."""
        response = await client.get(url)
        response.raise_for_status()
        counts["tool_calls"] += 1  # answered with 200
        return str(response.text)

    agent = sdk.Agent(
        name="shop",
        instructions="Answer the customer's question with the shop's tools.",
        tools=[sdk.function_tool(get_sku_price)],
        model=ScriptedSDKModel(),
    )
    query = config["query"]

    async def one() -> None:
        result = await sdk.Runner.run(agent, query, max_turns=5)
        if result.final_output != final_answer:
            raise RuntimeError("Agents SDK episode did not end with the final answer")

    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            if command.get("quit"):
                return
            count, concurrency = int(command["run"]), int(command["concurrency"])
            before = dict(counts)
            cpu, started = time.process_time(), time.perf_counter()
            done = 0
            while done < count:
                batch = min(concurrency, count - done)
                await asyncio.gather(*(one() for _ in range(batch)))
                done += batch
            reply = {
                "episodes": done,
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - started,
                **{key: counts[key] - before[key] for key in counts},
            }
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1])))
