"""The real local model: llama-cpp-python's server with SmolLM2-135M-Instruct
(``bin/run-local-llm server``), driven through the real ``openai`` client.

Asserts structure, not answer quality: the probe finds a constrained dialect, every step is
valid or classified, tokens are recorded, a reflexion call is accepted, and neither the
model server nor the app crashes.

The model server is installed by ``bin/local-llm-install`` (it compiles llama.cpp once).
Where it is not installed these tests are skipped, saying how to install it, unless
``AGENT_OPS_REAL_MODEL=required`` (``.ci/run`` sets it after installing): then a missing or
broken install fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.llm import structured
from agents.llm.factory import llm_client_build
from agents.llm.openai_backend import OpenAILLM
from agents.runtime import RuntimeConfig
from agents.services import runtime_config
from policies.branches import KINDS
from sandbox.models import Order
from tests.agents.runtime_helpers import run_query
from traces.models import ErrorType, Trace

pytestmark = [pytest.mark.real_model, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]
LOCAL_LLM_HOME = Path(
    os.environ.get("LOCAL_LLM_HOME", Path.home() / ".cache" / "agent-ops" / "local-llm")
)
REQUIRED = os.environ.get("AGENT_OPS_REAL_MODEL") == "required"
ALIAS = "smollm2-test"


def _installed() -> bool:
    return any((LOCAL_LLM_HOME / "venv").glob(".installed-*"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def model_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    if not _installed():
        message = (
            f"the local model server is not installed in {LOCAL_LLM_HOME} "
            "(bin/local-llm-install; about 25 min of compiling once)"
        )
        if REQUIRED:
            pytest.fail(f"AGENT_OPS_REAL_MODEL=required but {message}")
        pytest.skip(message)
    port = _free_port()
    log = (ROOT / "tests" / "artifacts").joinpath("local-llm-server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    # A PORT of the shell must not move the model server (llama_cpp.server reads it).
    env = {**os.environ, "LOCAL_LLM_PORT": str(port), "LOCAL_LLM_ALIAS": ALIAS, "PORT": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(ROOT / "bin" / "run-local-llm"), "server"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{base_url}/models", timeout=2).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the local model server did not start; see {log}")
            time.sleep(0.5)
    yield base_url, process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def real_llm(
    model_server: tuple[str, subprocess.Popen[bytes]], settings: Any, tmp_path: Path
) -> subprocess.Popen[bytes]:
    base_url, process = model_server
    settings.LLM_BACKEND = "openai"
    settings.LLM_BASE_URL = base_url
    settings.LLM_MODEL = ALIAS
    settings.LLM_API_KEY = "local"
    settings.LLM_STRUCTURED_OUTPUT = "auto"
    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(tmp_path / "probe.json")
    settings.LLM_TIMEOUT_SECONDS = 120
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_CALL_BUDGET_SECONDS = 120
    structured._memory.clear()
    return process


def test_the_probe_finds_the_constrained_dialect_of_llama_cpp_python(
    real_llm: subprocess.Popen[bytes],
) -> None:
    client = llm_client_build()
    assert isinstance(client, OpenAILLM)

    dialect = async_to_sync(client.probe)()

    # llama-cpp-python answers json_schema with a 500 and enforces json_object + schema.
    assert dialect == "json_object"
    assert real_llm.poll() is None


def test_a_run_and_a_reflexion_on_the_real_model(
    real_llm: subprocess.Popen[bytes],
    live_sandbox: str,
    small_shop: Any,
    support_agent: Any,
    error_rules: Any,
) -> None:
    from policies.reflexion import FailureFacts, llm_reflexion

    order = Order.objects.first()
    assert order is not None
    config: RuntimeConfig = replace(runtime_config(), max_iterations=3)

    trace, outcome = run_query(support_agent, f"Where is my order {order.order_id}?", config=config)

    assert outcome is not None
    # Any terminal status: a small model may use up its rounds (fallback); it must not hang.
    assert trace.status in Trace.TERMINAL_STATUSES
    tools = set(support_agent.tools.values_list("name", flat=True))
    reasoning = list(trace.steps.filter(phase="reasoning").order_by("step_number"))
    assert reasoning, "the model was never asked"
    for step in reasoning:
        # Every model call is recorded with its real token counts and a zero local cost.
        assert step.prompt_tokens > 0 and step.completion_tokens > 0
        assert float(step.cost_usd) == 0.0
        if step.ok:
            # The grammar allowed only the agent's tools or final_answer.
            assert step.tool_name in tools or step.action_type == "final_answer"
    for step in trace.steps.all():
        assert step.ok or step.error_type in ErrorType.values, step.error_detail
    # No LLM_ERROR: the server accepted every structured-output request.
    assert not trace.steps.filter(error_type="LLM_ERROR").exists(), list(
        trace.steps.filter(error_type="LLM_ERROR").values_list("error_detail", flat=True)
    )
    assert trace.total_tokens > 0

    facts = FailureFacts(
        trace_id=str(trace.pk),
        query=trace.query,
        agent_id=support_agent.pk,
        step_number=2,
        tool="get_order",
        action_input={"order_id": "W1234"},
        endpoint="/sandbox/api/orders/W1234",
        status_code=404,
        error_type="RESOURCE_NOT_FOUND",
        response_summary='{"detail": "order not found"}',
        error_detail="404 order not found",
    )
    proposal, reason = llm_reflexion(facts)
    # The server took the request; what the small model says is the gates' business.
    assert not reason.startswith("LLM reflexion failed"), reason
    if proposal is not None:
        assert proposal.kind in KINDS  # enforced by the grammar
    else:
        assert reason.startswith("unparseable reflexion output")
    assert real_llm.poll() is None, "the model server crashed"
