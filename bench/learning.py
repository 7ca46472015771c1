"""The learning experiment: does the Reflexion loop make the agent better on tasks it has
not seen?

Control runs the held-out split with the learning loop off. Treatment first runs the train
split with the loop on (Reflexion after every failed run, strategies approved by the
configured stand-in), then runs the same held-out split with learning frozen (no new
strategies; confidence bookkeeping continues as in production). Both arms face the same
sandbox environment: schema drift on the order and return endpoints, upstream 500s and
429s, and the simulated model's own mistakes. Success is judged against ground truth read
from the sandbox with faults switched off — never by the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import random
import re
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.test import Client

from bench.stats import difference_interval, mean_interval, two_proportion_z_test, wilson_interval

POLICY_QUESTIONS: list[tuple[str, list[str]]] = [
    ("How many days do I have to return an item?", ["30 days"]),
    ("How long does standard shipping take?", ["3-5 business days"]),
    ("How long does it take to get a refund after a return?", ["5 business days"]),
    ("How long is the warranty on electronics?", ["1-year"]),
    ("How long do I have to ask for a price match?", ["14 days"]),
    ("How long does international delivery take?", ["5-10 business days"]),
]

ORDER_TEMPLATES = [
    "Where is my order {oid}?",
    "Has my order {oid} shipped yet?",
    "What is the status of order {oid}?",
    "Can you check on order {oid} for me?",
]
RETURN_TEMPLATES = ["Can I return order {oid}?", "Is order {oid} eligible for a return?"]
PRICE_TEMPLATES = ["How much does the {name} cost?", "What is the price of the {name}?"]
STOCK_TEMPLATES = ["Is the {name} in stock?", "Do you have the {name} available?"]
COMPARE_TEMPLATES = [
    "Which is cheaper, the {a} or the {b}?",
    "Compare the price of the {a} and the {b}.",
]

# The environment both arms face (per-endpoint faults; seeded so each arm sees the same draws).
ENVIRONMENT: dict[str, dict[str, Any]] = {
    "orders": {"drift": "require_int_id", "rate_500": 0.08, "seed": 11},
    "returns": {"drift": "require_int_id", "seed": 12},
    "skus": {"rate_429": 0.06, "seed": 13},
    "inventory": {"rate_500": 0.06, "seed": 14},
}

MIX = {
    "order_status": 0.38,
    "returns": 0.12,
    "price": 0.14,
    "compare": 0.08,
    "stock": 0.18,
    "policy": 0.10,
}


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    split: str
    query: str
    expected: dict[str, Any]


@dataclass
class RunResult:
    task_id: str
    kind: str
    trace_id: str
    status: str
    success: bool
    steps: int
    tool_calls: int
    retries: int
    latency_ms: int
    tokens: int
    error_types: list[str]
    strategies: list[int]
    # Strategies that acted on this run: tool-level ones that fired, hints by their target.
    strategy_targets: dict[str, list[int]]
    answer: str


@dataclass
class ArmResult:
    name: str
    results: list[RunResult] = field(default_factory=list)
    train_results: list[RunResult] = field(default_factory=list)
    wall_seconds: float = 0.0


# --- environment ---------------------------------------------------------------------
@contextmanager
def sandbox_server() -> Iterator[str]:
    """Serve the project (the sandbox API included) over real HTTP on a free loopback port."""

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.daemon_threads = True
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, name="bench-sandbox", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sandbox/api"
    finally:
        server.shutdown()
        server.server_close()


def learning_state_reset() -> None:
    """Forget everything learned and every fault: each arm starts from the same state."""
    from agents.models import Tool, ToolAlert, ToolResultCache
    from policies.models import Policy, PolicyVersion, ReflexionProposal, Strategy
    from policies.selectors import runtime_policy_cache_clear
    from reviews.models import AuditLog, ReviewItem
    from sandbox.services import faultrule_clear

    ReviewItem.objects.all().delete()
    ReflexionProposal.objects.all().delete()
    PolicyVersion.objects.update(parent=None, is_active=False)
    PolicyVersion.objects.all().delete()
    Strategy.objects.all().delete()
    Policy.objects.all().delete()
    AuditLog.objects.all().delete()
    ToolResultCache.objects.all().delete()
    ToolAlert.objects.all().delete()
    Tool.objects.update(suspended_until=None)
    faultrule_clear()
    runtime_policy_cache_clear()
    cache.clear()


def environment_apply() -> None:
    from sandbox.services import faultrule_set

    for endpoint, rule in ENVIRONMENT.items():
        faultrule_set(endpoint=endpoint, replace=True, **rule)


# --- tasks and ground truth ------------------------------------------------------------
def _get(client: Client, path: str) -> dict[str, Any]:
    response = client.get(path)
    if response.status_code != 200:
        raise RuntimeError(f"ground truth {path} answered {response.status_code}")
    return response.json()


def tasks_generate(
    *, seed: int, count: int, train_fraction: float, mix: dict[str, float] | None = None
) -> list[Task]:
    """A fixed, seeded suite; expected facts come from the fault-free sandbox API.
    ``mix`` (default ``MIX``) gives each task kind's share; kinds left out get no tasks."""
    from sandbox.models import Order, Product
    from sandbox.services import faultrule_clear

    faultrule_clear()
    rng = random.Random(seed)
    client = Client(HTTP_HOST="127.0.0.1")
    base = "/sandbox/api"
    orders = list(Order.objects.order_by("order_id").values_list("order_id", flat=True))
    products = list(Product.objects.order_by("product_id").values_list("product_id", "name"))
    rng.shuffle(orders)
    rng.shuffle(products)
    shares = MIX if mix is None else mix
    counts = {kind: round(count * shares.get(kind, 0.0)) for kind in MIX}
    counts[next(kind for kind in MIX if shares.get(kind))] += count - sum(counts.values())
    tasks: list[Task] = []
    order_iter = iter(orders)
    for _ in range(counts["order_status"]):
        oid = next(order_iter)
        status = _get(client, f"{base}/orders/{quote(oid, safe='')}")["status"]
        query = rng.choice(ORDER_TEMPLATES).format(oid=oid)
        tasks.append(Task("", "order_status", "", query, {"status": status}))
    for _ in range(counts["returns"]):
        oid = next(order_iter)
        eligible = _get(client, f"{base}/returns/{quote(oid, safe='')}")["eligible"]
        query = rng.choice(RETURN_TEMPLATES).format(oid=oid)
        tasks.append(Task("", "returns", "", query, {"eligible": bool(eligible)}))
    product_cycle = products * (1 + (counts["price"] + counts["stock"]) // max(1, len(products)))
    for kind in ("price", "stock"):
        for _ in range(counts[kind]):
            product_id, name = product_cycle.pop()
            skus = _get(client, f"{base}/products/{product_id}")["skus"]
            expected: dict[str, Any]
            if kind == "price":
                amounts: set[float] = set()
                for sku in skus:
                    detail = _get(client, f"{base}/skus/{quote(sku['sku'], safe='')}")
                    amounts |= {float(detail["price"]), float(detail["final_price"])}
                query = rng.choice(PRICE_TEMPLATES).format(name=name)
                expected = {"amounts": sorted(amounts)}
            else:
                stock = {
                    sku["sku"]: _get(client, f"{base}/inventory/{quote(sku['sku'], safe='')}")[
                        "in_stock"
                    ]
                    for sku in skus
                }
                query = rng.choice(STOCK_TEMPLATES).format(name=name)
                expected = {"stock_by_sku": stock}
            tasks.append(Task("", kind, "", query, expected))
    for _ in range(counts["compare"]):
        (_, name_a), (_, name_b) = rng.sample(products, 2)
        prices = {}
        for name in (name_a, name_b):
            # The price a shopper is quoted: the first SKU of the top search result.
            found = client.get(f"{base}/products", {"q": name}).json()["results"]
            sku = found[0]["skus"][0]["sku"]
            prices[name] = _get(client, f"{base}/skus/{quote(sku, safe='')}")["final_price"]
        if prices[name_a] == prices[name_b]:
            expected = {"same_price": [name_a, name_b]}
        else:
            winner, loser = sorted(prices, key=prices.__getitem__)
            expected = {"cheaper": winner, "dearer": loser}
        query = rng.choice(COMPARE_TEMPLATES).format(a=name_a, b=name_b)
        tasks.append(Task("", "compare", "", query, expected))
    for i in range(counts["policy"]):
        question, facts = POLICY_QUESTIONS[i % len(POLICY_QUESTIONS)]
        tasks.append(Task("", "policy", "", question, {"contains_any": facts}))
    rng.shuffle(tasks)
    train_n = round(len(tasks) * train_fraction)
    return [
        Task(f"T{i:03d}", t.kind, "train" if i < train_n else "heldout", t.query, t.expected)
        for i, t in enumerate(tasks)
    ]


def answer_correct(task: Task, status: str, answer: str) -> bool:
    """Whether ``answer`` states the sandbox's ground truth for ``task``, in any wording.

    The judge knows the facts (an order's status, a return's eligibility, prices, stock,
    which product is cheaper, a policy's number), never how any model phrases them.
    """
    if status != "finished":
        return False
    text = " ".join(answer.split())
    lowered = text.lower()
    expected = task.expected
    if "status" in expected:
        return _says_status(lowered, str(expected["status"]))
    if "eligible" in expected:
        return _says_eligible(lowered) is expected["eligible"]
    if "amounts" in expected:
        return any(
            abs(number - amount) < 0.005
            for number in _numbers(text)
            for amount in expected["amounts"]
        )
    if "stock_by_sku" in expected:
        for sku, in_stock in expected["stock_by_sku"].items():
            if sku.lower() in lowered:
                return _says_in_stock(lowered) is bool(in_stock)
        return False
    if "cheaper" in expected:
        return _says_cheaper(lowered, expected["cheaper"].lower(), expected["dearer"].lower())
    if "same_price" in expected:
        return bool(re.search(r"\b(same|equal|identical)\b", lowered)) and all(
            name.lower() in lowered for name in expected["same_price"]
        )
    if "contains_any" in expected:
        said = _dash_normalise(lowered)
        return any(_dash_normalise(fact.lower()) in said for fact in expected["contains_any"])
    return False


ORDER_STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled", "returned")
_NEGATION = r"(not|n't|never|no longer|cannot|can't|isn't|is not|ineligible|unable)"


def _says_status(lowered: str, status: str) -> bool:
    """The true status is named and not negated, and the answer is no hedge listing several
    (a delivered order that was then returned may mention its delivery date)."""
    words = {s: rf"\b{s}\b" for s in ORDER_STATUSES}
    words["cancelled"] = r"\bcancel+ed\b"
    named = {s for s, pattern in words.items() if re.search(pattern, lowered)}
    if status not in named or len(named) >= 3:
        return False
    negated = rf"\b(not|n't|never|yet to be)\b(\W+\w+){{0,2}}\W+{words[status]}"
    return not re.search(negated, lowered)


def _says_eligible(lowered: str) -> bool | None:
    if re.search(r"\bineligible\b|\bnot (be )?eligible\b|\bcannot be returned\b", lowered):
        return False
    if re.search(rf"\b{_NEGATION}\b[^.]{{0,40}}\b(eligible|return)", lowered):
        return False
    if re.search(r"\beligible\b|\bcan (be )?return|\bcan be returned\b", lowered):
        return True
    return None


def _says_in_stock(lowered: str) -> bool | None:
    if re.search(
        r"out of stock|not in stock|sold out|unavailable|not available|no stock|\b0 in stock",
        lowered,
    ):
        return False
    if re.search(r"\bin stock\b|\bavailable\b", lowered):
        return True
    return None


def _says_cheaper(lowered: str, winner: str, loser: str) -> bool:
    """The cheaper product is named as cheaper (or the dearer one as dearer): the subject of
    a comparison word is the product named last before it."""
    if winner not in lowered or loser not in lowered:
        return False
    cheaper = r"(cheaper|less expensive|costs less|lower price|more affordable)"
    dearer = r"(more expensive|costs more|pricier|higher price|dearer)"
    for words, right in ((cheaper, winner), (dearer, loser)):
        for match in re.finditer(words, lowered):
            before = lowered[: match.start()]
            subject = max((winner, loser), key=before.rfind)
            if before.rfind(subject) >= 0:
                return subject == right
    return False


def _numbers(text: str) -> list[float]:
    numbers = []
    for raw in re.findall(r"\d[\d,]*(?:\.\d+)?", text):
        try:
            numbers.append(float(raw.replace(",", "")))
        except ValueError:
            continue
    return numbers


def _dash_normalise(text: str) -> str:
    return re.sub(r"\s*[\u2010-\u2015-]\s*", "-", text)


# --- running ---------------------------------------------------------------------------
def _result(task: Task, trace_id: str) -> RunResult:
    from traces.models import Trace

    trace = Trace.objects.get(pk=trace_id)
    steps = list(trace.steps.order_by("step_number"))
    calls = [
        s
        for s in steps
        if s.phase == "action" and s.action_type == "tool" and not s.details.get("rejected")
    ]
    signatures = [s.details.get("signature") or f"{s.tool_name}{s.action_input}" for s in calls]
    retries = sum(1 for a, b in pairwise(signatures) if a == b)
    return RunResult(
        task_id=task.id,
        kind=task.kind,
        trace_id=str(trace.pk),
        status=trace.status,
        success=answer_correct(task, trace.status, trace.final_answer),
        steps=trace.total_steps,
        tool_calls=len(calls),
        retries=retries,
        latency_ms=trace.total_latency_ms,
        tokens=trace.total_tokens,
        error_types=sorted({s.error_type for s in steps if s.error_type}),
        strategies=sorted({a["id"] for s in steps for a in s.strategies_applied if "id" in a}),
        strategy_targets=_targets(steps),
        answer=trace.final_answer,
    )


def _targets(steps: list[Any]) -> dict[str, list[int]]:
    """Hints act on the error type they target; other kinds on any failure they touched."""
    targets: dict[str, set[int]] = defaultdict(set)
    for step in steps:
        for applied in step.strategies_applied:
            if "id" not in applied:
                continue
            key = applied.get("error_type") if applied.get("kind") == "prompt_hint" else "*"
            targets[key or "*"].add(applied["id"])
    return {key: sorted(ids) for key, ids in targets.items()}


def review_standin() -> int:
    """A cautious stand-in for a human reviewer: approve a proposal once its replay passed
    and either a deterministic analyzer made it or two failures agreed on it."""
    from reviews.models import ReviewItem
    from reviews.services import review_item_approve

    approved = 0
    for item in ReviewItem.objects.filter(
        status=ReviewItem.Status.OPEN, reason=ReviewItem.Reason.LOW_CONFIDENCE
    ).select_related("strategy"):
        strategy = item.strategy
        if strategy is None or strategy.replay_status != "passed":
            continue
        if strategy.origin.startswith("analyzer:") or strategy.agree_count >= 2:
            review_item_approve(item_id=item.pk, note="bench review stand-in")
            approved += 1
    return approved


def run_tasks(
    tasks: list[Task],
    *,
    agent_id: int,
    arm: str,
    concurrency: int,
    learn: bool,
    progress: Callable[[str], None],
    approval: str = "auto",
    job_id: int | None = None,
) -> list[RunResult]:
    """Run tasks ``concurrency`` at a time on one event loop; learn after each batch.

    With ``job_id``, each batch also counts its runs on that Job (the Jobs page shows it).
    """
    from agents.services import run_execute
    from policies.reflexion import reflexion_run
    from traces.models import Trace
    from traces.services import job_progress, trace_create

    results: list[RunResult] = []
    for start in range(0, len(tasks), concurrency):
        batch = tasks[start : start + concurrency]
        traces = [
            trace_create(
                agent_id=agent_id,
                query=task.query,
                llm_backend=settings.LLM_BACKEND,
                llm_model="simulated-react-1"
                if settings.LLM_BACKEND == "simulated"
                else settings.LLM_MODEL,
                session_id=f"bench:{arm}:{task.split}",
                source="bench",
                origin=Trace.Origin.EXPERIMENT,
            )
            for task in batch
        ]

        async def run_batch(ids: list[str]) -> None:
            await asyncio.gather(*(run_execute(trace_id=trace_id) for trace_id in ids))

        async_to_sync(run_batch)([str(t.pk) for t in traces])
        for task, trace in zip(batch, traces, strict=True):
            result = _result(task, str(trace.pk))
            results.append(result)
            if learn and result.error_types:
                reflexion_run(trace_id=str(trace.pk), auto_approve=approval == "auto")
        if learn and approval == "standin":
            review_standin()
        done = start + len(batch)
        rate = sum(r.success for r in results) / len(results)
        line = f"  {arm}: {done}/{len(tasks)} runs, success so far {rate:.1%}"
        progress(line)
        if job_id is not None:
            job_progress(job_id=job_id, advance=len(batch), message=line.strip())
    return results


# --- report ----------------------------------------------------------------------------
def _summary(results: list[RunResult]) -> dict[str, Any]:
    n = len(results)
    successes = sum(r.success for r in results)
    low, high = wilson_interval(successes, n)
    steps = mean_interval([r.steps for r in results])
    return {
        "n": n,
        "successes": successes,
        "success_rate": successes / n if n else 0.0,
        "success_ci95": [low, high],
        "mean_steps": steps[0],
        "mean_steps_ci95": [steps[1], steps[2]],
        "mean_tool_calls": statistics.fmean(r.tool_calls for r in results) if n else 0.0,
        "retries_total": sum(r.retries for r in results),
        "retries_per_run": sum(r.retries for r in results) / n if n else 0.0,
        "latency_ms_median": statistics.median(r.latency_ms for r in results) if n else 0,
        "latency_ms_mean": statistics.fmean(r.latency_ms for r in results) if n else 0.0,
        "tokens_mean": statistics.fmean(r.tokens for r in results) if n else 0.0,
        "status_counts": dict(Counter(r.status for r in results)),
    }


def _by(results: list[RunResult], key: Callable[[RunResult], list[str]]) -> dict[str, Any]:
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for result in results:
        for value in key(result):
            groups[value].append(result)
    return {
        name: {
            "n": len(group),
            "success_rate": sum(r.success for r in group) / len(group),
            "success_ci95": list(wilson_interval(sum(r.success for r in group), len(group))),
        }
        for name, group in sorted(groups.items())
    }


def _attribution(control: list[RunResult], treatment: list[RunResult]) -> dict[str, Any]:
    """Per control error type: held-out tasks the treatment fixed, and the strategies it
    applied on them."""
    from policies.models import Strategy

    paired = {r.task_id: r for r in treatment}
    table: dict[str, dict[str, Any]] = {}
    for c in control:
        t = paired.get(c.task_id)
        if t is None:
            continue
        for error_type in c.error_types or ["(none)"]:
            row = table.setdefault(
                error_type,
                {
                    "control_runs": 0,
                    "control_success": 0,
                    "treatment_success": 0,
                    "fixed": 0,
                    "broken": 0,
                    "strategies": Counter(),
                },
            )
            row["control_runs"] += 1
            row["control_success"] += c.success
            row["treatment_success"] += t.success
            if t.success and not c.success:
                row["fixed"] += 1
                acting = set(t.strategy_targets.get("*", [])) | set(
                    t.strategy_targets.get(error_type, [])
                )
                row["strategies"].update(acting)
            if c.success and not t.success:
                row["broken"] += 1
    labels = {
        s.pk: f"S{s.pk} {s.kind} {s.tool_name or '*'}: {s.strategy_update}"
        for s in Strategy.objects.all()
    }
    for row in table.values():
        row["strategies"] = [
            {"strategy": labels.get(sid, f"S{sid}"), "fixed_runs": count}
            for sid, count in row["strategies"].most_common()
        ]
    return table


def _strategies_table() -> list[dict[str, Any]]:
    from policies.models import Strategy

    return [
        {
            "id": s.pk,
            "kind": s.kind,
            "tool": s.tool_name,
            "error_type": s.error_type,
            "origin": s.origin,
            "status": s.status,
            "confidence": s.confidence,
            "applications": s.applications,
            "successes": s.successes,
            "agree_count": s.agree_count,
            "root_cause": s.root_cause,
            "strategy_update": s.strategy_update,
            "branch": s.branch,
        }
        for s in Strategy.objects.order_by("pk")
    ]


def _markdown(report: dict[str, Any]) -> str:
    c, t = report["arms"]["control"]["heldout"], report["arms"]["treatment"]["heldout"]
    test = report["comparison"]
    lines = [
        "# Learning experiment (held-out split)",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}, database {report['machine']['database']}",
        f"- LLM backend: **{report['config']['llm_backend']}**"
        + (
            " (simulated test/demo model)" if report["config"]["llm_backend"] == "simulated" else ""
        ),
        f"- tasks: {report['config']['tasks']} (seed {report['config']['seed']}), "
        f"train {report['config']['train']} / held-out {report['config']['heldout']}",
        f"- started {report['started_at']}, took {report['wall_seconds']:.0f} s",
        "",
        "| metric | control (loop off) | treatment (loop on) |",
        "|---|---|---|",
        f"| success rate | {c['success_rate']:.1%} [{c['success_ci95'][0]:.1%}, "
        f"{c['success_ci95'][1]:.1%}] | {t['success_rate']:.1%} [{t['success_ci95'][0]:.1%}, "
        f"{t['success_ci95'][1]:.1%}] |",
        f"| mean steps | {c['mean_steps']:.2f} | {t['mean_steps']:.2f} |",
        f"| mean tool calls | {c['mean_tool_calls']:.2f} | {t['mean_tool_calls']:.2f} |",
        f"| retries per run | {c['retries_per_run']:.2f} | {t['retries_per_run']:.2f} |",
        f"| latency median (ms) | {c['latency_ms_median']:.0f} | {t['latency_ms_median']:.0f} |",
        f"| tokens mean | {c['tokens_mean']:.0f} | {t['tokens_mean']:.0f} |",
        "",
        f"Difference: **{test['difference']:+.1%}** (95% CI {test['difference_ci95'][0]:+.1%} .. "
        f"{test['difference_ci95'][1]:+.1%}), two-proportion z = {test['z']:.2f}, "
        f"p = {test['p_value']:.2e}. Reference (seeds/000 §5.2): 72.1% → 89.7% (+17.6 points).",
        "",
        "## Success by task kind (held-out)",
        "",
        "| kind | control | treatment |",
        "|---|---|---|",
    ]
    kinds_c, kinds_t = report["by_kind"]["control"], report["by_kind"]["treatment"]
    for kind in sorted(set(kinds_c) | set(kinds_t)):
        a, b = kinds_c.get(kind, {}), kinds_t.get(kind, {})
        lines.append(
            f"| {kind} | {a.get('success_rate', 0):.1%} (n={a.get('n', 0)}) | "
            f"{b.get('success_rate', 0):.1%} (n={b.get('n', 0)}) |"
        )
    lines += [
        "",
        "## Where the gain came from (by the error type the control run hit)",
        "",
        "| control error type | runs | control ok | treatment ok | fixed | broken "
        "| strategies acting on fixed runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for error_type, row in sorted(report["attribution"].items()):
        strategies = "; ".join(f"{s['strategy']} x{s['fixed_runs']}" for s in row["strategies"])
        lines.append(
            f"| {error_type} | {row['control_runs']} | {row['control_success']} | "
            f"{row['treatment_success']} | {row['fixed']} | {row['broken']} | {strategies or '-'} |"
        )
    lines += [
        "",
        "## Strategies learned on the train split",
        "",
        "| id | kind | tool | error type | origin | status | confidence | applied | ok "
        "| strategy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["strategies"]:
        lines.append(
            f"| S{s['id']} | {s['kind']} | {s['tool'] or '*'} | {s['error_type']} | {s['origin']} "
            f"| {s['status']} | {s['confidence']:.2f} | {s['applications']} | {s['successes']} "
            f"| {s['strategy_update']} |"
        )
    lines += ["", "Environment: " + json.dumps(report["config"]["environment"]), ""]
    return "\n".join(lines)


def experiment_run(
    *,
    seed: int,
    tasks_count: int,
    train_fraction: float,
    concurrency: int,
    output_dir: Path,
    command: str,
    progress: Callable[[str], None],
    approval: str = "auto",
) -> dict[str, Any]:
    from traces.models import Job
    from traces.services import job_finish, job_running

    with job_running(
        kind=Job.Kind.BENCHMARK, name=f"bench_learning seed={seed} tasks={tasks_count}"
    ) as job:
        report = _experiment_run(
            seed=seed,
            tasks_count=tasks_count,
            train_fraction=train_fraction,
            concurrency=concurrency,
            output_dir=output_dir,
            command=command,
            progress=progress,
            approval=approval,
            job_id=job.pk,
        )
        job_finish(job_id=job.pk, message="wrote " + ", ".join(map(str, report["files"])))
    return report


def _experiment_run(
    *,
    seed: int,
    tasks_count: int,
    train_fraction: float,
    concurrency: int,
    output_dir: Path,
    command: str,
    progress: Callable[[str], None],
    approval: str,
    job_id: int,
) -> dict[str, Any]:
    from agents.models import Agent
    from agents.services import DEFAULT_AGENT_SLUG
    from traces.services import job_progress

    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    call_command("demo_seed", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    agent = Agent.objects.get(slug=DEFAULT_AGENT_SLUG)
    previous = (settings.REFLEXION_ENABLED, settings.SANDBOX_BASE_URL, settings.POLICY_PUBLISH)
    # The environment's injected 500s are expected; don't log each one as a server error.
    logging.getLogger("django.request").setLevel(logging.CRITICAL)
    # Learning is driven explicitly below, in order, instead of by background jobs.
    settings.REFLEXION_ENABLED = False
    # This report measures what learning buys, not the canary: approvals publish at once
    # (bench.rollout measures rollouts).
    settings.POLICY_PUBLISH = "at_once"
    try:
        with sandbox_server() as base_url:
            settings.SANDBOX_BASE_URL = base_url
            tasks = tasks_generate(seed=seed, count=tasks_count, train_fraction=train_fraction)
            train = [t for t in tasks if t.split == "train"]
            heldout = [t for t in tasks if t.split == "heldout"]
            progress(f"{len(tasks)} tasks: {len(train)} train, {len(heldout)} held-out")
            # Control runs held-out; treatment runs train then held-out.
            job_progress(job_id=job_id, advance=0, total=len(train) + 2 * len(heldout))
            arms: dict[str, ArmResult] = {}
            for name, learns in (("control", False), ("treatment", True)):
                progress(
                    f"{name}: "
                    + ("learn on train, then measure held-out" if learns else "loop off")
                )
                learning_state_reset()
                environment_apply()
                arm_started = time.monotonic()
                arm = ArmResult(name)

                def run(split: list[Task], learn: bool, arm_name: str = name) -> list[RunResult]:
                    return run_tasks(
                        split,
                        agent_id=agent.pk,
                        arm=arm_name,
                        concurrency=concurrency,
                        learn=learn,
                        progress=progress,
                        approval=approval,
                        job_id=job_id,
                    )

                if learns:
                    arm.train_results = run(train, True)
                # Held-out is measured with learning frozen in both arms.
                arm.results = run(heldout, False)
                arm.wall_seconds = time.monotonic() - arm_started
                arms[name] = arm
            strategies = _strategies_table()
            from sandbox.services import faultrule_clear

            faultrule_clear()
    finally:
        settings.REFLEXION_ENABLED, settings.SANDBOX_BASE_URL, settings.POLICY_PUBLISH = previous

    c, t = arms["control"].results, arms["treatment"].results
    cs, ts = sum(r.success for r in c), sum(r.success for r in t)
    z, p = two_proportion_z_test(cs, len(c), ts, len(t))
    report: dict[str, Any] = {
        "command": command,
        "started_at": started_at,
        "wall_seconds": time.monotonic() - started,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        },
        "config": {
            "seed": seed,
            "tasks": len(tasks),
            "train": len(train),
            "heldout": len(heldout),
            "concurrency": concurrency,
            "llm_backend": settings.LLM_BACKEND,
            "llm_sim_error_rates": settings.LLM_SIM_ERROR_RATES,
            "llm_sim_hint_follow_rate": settings.LLM_SIM_HINT_FOLLOW_RATE,
            "approval": {
                "auto": "auto-approve after a passed replay",
                "standin": "review stand-in: analyzer-made or twice-agreed, replay passed",
            }[approval],
            "environment": ENVIRONMENT,
            "mix": MIX,
        },
        "arms": {
            name: {
                "heldout": _summary(arm.results),
                "train": _summary(arm.train_results) if arm.train_results else None,
                "wall_seconds": arm.wall_seconds,
            }
            for name, arm in arms.items()
        },
        "comparison": {
            "difference": (ts / len(t)) - (cs / len(c)),
            "difference_ci95": list(difference_interval(cs, len(c), ts, len(t))),
            "z": z,
            "p_value": p,
        },
        "by_kind": {name: _by(arm.results, lambda r: [r.kind]) for name, arm in arms.items()},
        "by_error_type": {
            name: _by(arm.results, lambda r: r.error_types or ["(none)"])
            for name, arm in arms.items()
        },
        "attribution": _attribution(c, t),
        "strategies": strategies,
        "runs": {name: [asdict(r) for r in arm.results] for name, arm in arms.items()},
        "tasks": [asdict(task) for task in tasks],
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"learning-{stamp}", "learning-latest"):
        (output_dir / f"{name}.json").write_text(json.dumps(report, indent=2, default=str))
        (output_dir / f"{name}.md").write_text(_markdown(report))
    report["files"] = [
        str(output_dir / f"learning-{stamp}.json"),
        str(output_dir / f"learning-{stamp}.md"),
    ]
    return report
