"""Client CPU of one model call through the app's OpenAI backend (``OpenAILLM.complete``),
alone: what each of a run's model calls costs the run worker besides the runtime.

    python -m bench.llm_client_cpu            # 5 x 100 calls one at a time, 3 x 200 at once

The model is the scripted loopback server the tests and ``make bench-e2e`` use
(``tests/fakes/openai_server.py``, speaking the OpenAI wire protocol; **not an LLM**), run
in a process of its own so that its CPU is not counted. One measured call: the request
built from a 2,000-character system prompt and a question (the reasoning step's JSON
Schema, the ``json_schema`` dialect), the ``openai`` client, the HTTP exchange on loopback
(no TLS), the completion parsed, usage and cost. Reported: this process's CPU time
(``time.process_time``, every thread) per call, median and each repeat. It prints; it
writes no report file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SERVER = """
import json, sys, time
from tests.fakes.openai_server import FakeOpenAIServer

def responder(request):
    reply = {"thought": "I can answer.", "action": "final_answer", "action_input": {},
             "expectation": "done", "final_answer": "Your order has shipped."}
    return ("ok", json.dumps(reply))

server = FakeOpenAIServer(responder=responder)
server.start()
print(server.base_url, flush=True)
sys.stdin.read()  # until the benchmark closes the pipe
"""


def cpu_per_call(base_url: str, *, calls: int, at_once: int) -> float:
    """Milliseconds of this process's CPU per call, ``calls`` calls by ``at_once`` tasks."""
    from agents.llm.base import ChatMessage
    from agents.llm.openai_backend import OpenAILLM
    from agents.llm.schemas import ReasoningStep

    llm = OpenAILLM(
        base_url=base_url,
        api_key="not-needed",
        model="fake-model",
        timeout=30,
        max_retries=0,
        temperature=0,
        price_input_per_mtok=0,
        price_output_per_mtok=0,
        structured_output="json_schema",
    )
    messages = [
        ChatMessage(role="system", content="You are a careful support agent. " * 60),
        ChatMessage(role="user", content="Where is my order #W1234567?"),
    ]

    async def task(count: int) -> None:
        for _ in range(count):
            await llm.complete(messages=messages, schema=ReasoningStep, purpose="reasoning")

    async def batch() -> None:
        await asyncio.gather(*(task(calls // at_once) for _ in range(at_once)))

    began = time.process_time()
    asyncio.run(batch())
    return (time.process_time() - began) / (calls // at_once * at_once) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="calls one at a time")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--at-once", type=int, default=20, help="tasks of the concurrent pass")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    import django

    django.setup()
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        if not base_url:
            raise SystemExit("the scripted model server did not start")
        cpu_per_call(base_url, calls=min(20, args.calls), at_once=1)  # warm-up: imports
        alone = [cpu_per_call(base_url, calls=args.calls, at_once=1) for _ in range(args.repeats)]
        together = [
            cpu_per_call(base_url, calls=args.calls * 2, at_once=args.at_once)
            for _ in range(max(1, args.repeats - 2))
        ]
    finally:
        server.kill()
        server.wait()
    for label, values in (("one at a time", alone), (f"{args.at_once} at once", together)):
        print(
            f"client CPU per model call, {label}: median {statistics.median(values):.2f} ms "
            f"({', '.join(f'{v:.2f}' for v in values)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
