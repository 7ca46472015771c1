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
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
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

from bench.judge import answer_correct as judge_answer_correct
from bench.stats import (
    difference_interval,
    mcnemar_exact,
    mean_interval,
    two_proportion_z_test,
    wilson_interval,
)

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
                by_sku: dict[str, list[float]] = {}
                for sku in skus:
                    detail = _get(client, f"{base}/skus/{quote(sku['sku'], safe='')}")
                    by_sku[sku["sku"]] = sorted(
                        {float(detail["price"]), float(detail["final_price"])}
                    )
                query = rng.choice(PRICE_TEMPLATES).format(name=name)
                expected = {
                    "amounts": sorted({a for values in by_sku.values() for a in values}),
                    "amounts_by_sku": by_sku,
                }
            else:
                stock = {
                    sku["sku"]: _get(client, f"{base}/inventory/{quote(sku['sku'], safe='')}")[
                        "in_stock"
                    ]
                    for sku in skus
                }
                query = rng.choice(STOCK_TEMPLATES).format(name=name)
                # A SKU may be named by its colour and size instead of its code.
                variants = {
                    sku["sku"]: [sku.get("color") or "", sku.get("size") or ""] for sku in skus
                }
                expected = {"stock_by_sku": stock, "variants": variants}
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

    The judge (``bench.judge``) knows the facts (an order's status, a return's eligibility,
    prices per SKU, stock per SKU, which product is cheaper, a policy's number, a date),
    never how any model phrases them.
    """
    return judge_answer_correct(task.expected, status, answer)


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


def strategies_table(*, statuses: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every strategy (or those in ``statuses``) as report rows, oldest first."""
    from policies.models import Strategy

    strategies = Strategy.objects.order_by("pk")
    if statuses:
        strategies = strategies.filter(status__in=statuses)
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
        for s in strategies
    ]


def _sensitivity_lines(report: dict[str, Any]) -> list[str]:
    if not report.get("sensitivity"):
        return []
    main = report["config"]["llm_sim_hint_follow_rate"]
    lines = [
        "## The headline at other hint-follow rates",
        "",
        "The same tasks, both arms again from a forgotten state, with the simulated model "
        "heeding a strategy hint with this probability (everything else unchanged).",
        "",
        "| hint-follow rate | control | treatment | difference | McNemar b / c | p (McNemar) "
        "| mean steps (control / treatment) | tokens mean (control / treatment) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        (main, report["arms"]["control"]["heldout"], report["arms"]["treatment"]["heldout"],
         report["comparison"]),
        *((x["hint_follow_rate"], x["control"], x["treatment"], x["comparison"])
          for x in report["sensitivity"]),
    ]  # fmt: skip
    for rate, c, t, cmp in rows:
        lines.append(
            f"| {rate:g}{' (main)' if rate == main else ''} | {c['success_rate']:.1%} | "
            f"{t['success_rate']:.1%} | {cmp['difference']:+.1%} | "
            f"{cmp['mcnemar_b']} / {cmp['mcnemar_c']} | {cmp['mcnemar_p']:.2e} | "
            f"{c['mean_steps']:.2f} / {t['mean_steps']:.2f} | "
            f"{c['tokens_mean']:.0f} / {t['tokens_mean']:.0f} |"
        )
    lines.append("")
    return lines


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
        "- task mix: "
        + ", ".join(f"{kind} {share:.0%}" for kind, share in report["config"]["mix"].items()),
        *(
            [
                f"- simulated hint-follow rate: {report['config']['llm_sim_hint_follow_rate']:g} "
                "(the probability that the model avoids a mistake a strategy hint in its "
                "prompt warns about; `--hint-follow`, setting `LLM_SIM_HINT_FOLLOW_RATE`)",
                "- simulated mistake rates: "
                + ", ".join(
                    f"{name} {rate:g}"
                    for name, rate in report["config"]["llm_sim_error_rates"].items()
                ),
            ]
            if report["config"]["llm_backend"] == "simulated"
            else []
        ),
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
        f"{test['difference_ci95'][1]:+.1%}) on {test['pairs']} paired held-out tasks. "
        f"Exact McNemar test: b = {test['mcnemar_b']} (control ok, treatment failed), "
        f"c = {test['mcnemar_c']} (control failed, treatment ok), "
        f"**p = {test['mcnemar_p']:.2e}**; unpaired two-proportion z = {test['z']:.2f}, "
        f"p = {test['p_value']:.2e}. Reference (seeds/000 §5.2): 72.1% → 89.7% (+17.6 points).",
        "",
        *_sensitivity_lines(report),
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


def paired_comparison(control: list[RunResult], treatment: list[RunResult]) -> dict[str, Any]:
    """Control and treatment paired on the same held-out task: the discordant pairs and the
    exact McNemar test on them, beside the unpaired two-proportion z-test."""
    by_task = {r.task_id: r for r in treatment}
    pairs = [(c, by_task[c.task_id]) for c in control if c.task_id in by_task]
    if len(pairs) != len(control) or len(pairs) != len(treatment):
        raise ValueError("control and treatment must run the same held-out tasks")
    b = sum(1 for c, t in pairs if c.success and not t.success)
    d = sum(1 for c, t in pairs if not c.success and t.success)
    cs, ts = sum(r.success for r in control), sum(r.success for r in treatment)
    n = len(pairs)
    z, p = two_proportion_z_test(cs, n, ts, n)
    return {
        "pairs": n,
        "difference": (ts - cs) / n if n else 0.0,
        "difference_ci95": list(difference_interval(cs, n, ts, n)) if n else [0.0, 0.0],
        # b: control ok, treatment failed; c: control failed, treatment ok.
        "mcnemar_b": b,
        "mcnemar_c": d,
        "mcnemar_p": mcnemar_exact(b, d),
        "both_ok": sum(1 for c, t in pairs if c.success and t.success),
        "both_failed": sum(1 for c, t in pairs if not c.success and not t.success),
        "z": z,
        "p_value": p,
    }


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
    hint_follow_rate: float | None = None,
    sensitivity_hint_follow_rates: Sequence[float] = (),
) -> dict[str, Any]:
    """Run the experiment and write its report.

    ``hint_follow_rate`` sets the simulated model's probability of heeding a strategy hint
    for this run (default: ``settings.LLM_SIM_HINT_FOLLOW_RATE``). Each rate in
    ``sensitivity_hint_follow_rates`` repeats both arms on the same tasks at that rate; the
    report gives each one's headline. Both apply to the simulated backend only.
    """
    from traces.models import Job
    from traces.services import job_finish, job_running

    for rate in [hint_follow_rate, *sensitivity_hint_follow_rates]:
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ValueError(f"a hint-follow rate is a probability in [0, 1], got {rate!r}")
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
            hint_follow_rate=hint_follow_rate,
            sensitivity_rates=list(sensitivity_hint_follow_rates),
        )
        job_finish(job_id=job.pk, message="wrote " + ", ".join(map(str, report["files"])))
    return report


def _arms_run(
    *,
    train: list[Task],
    heldout: list[Task],
    agent_id: int,
    concurrency: int,
    progress: Callable[[str], None],
    approval: str,
    job_id: int,
    label: str = "",
) -> dict[str, ArmResult]:
    """Control on held-out with the loop off; treatment learns on train, then runs held-out
    with learning frozen. Each arm starts from the same forgotten state and environment."""
    arms: dict[str, ArmResult] = {}
    for name, learns in (("control", False), ("treatment", True)):
        progress(
            f"{label}{name}: " + ("learn on train, then measure held-out" if learns else "loop off")
        )
        learning_state_reset()
        environment_apply()
        arm_started = time.monotonic()
        arm = ArmResult(name)

        def run(split: list[Task], learn: bool, arm_name: str = name) -> list[RunResult]:
            return run_tasks(
                split,
                agent_id=agent_id,
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
    return arms


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
    hint_follow_rate: float | None = None,
    sensitivity_rates: list[float] | None = None,
) -> dict[str, Any]:
    from agents.models import Agent
    from agents.services import DEFAULT_AGENT_SLUG
    from traces.services import job_progress

    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    call_command("demo_seed", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    agent = Agent.objects.get(slug=DEFAULT_AGENT_SLUG)
    simulated = settings.LLM_BACKEND == "simulated"
    rates: list[float] = list(sensitivity_rates or []) if simulated else []
    previous = (
        settings.REFLEXION_ENABLED,
        settings.SANDBOX_BASE_URL,
        settings.POLICY_PUBLISH,
        settings.LLM_SIM_HINT_FOLLOW_RATE,
    )
    # The environment's injected 500s are expected; don't log each one as a server error.
    logging.getLogger("django.request").setLevel(logging.CRITICAL)
    # Learning is driven explicitly below, in order, instead of by background jobs.
    settings.REFLEXION_ENABLED = False
    # This report measures what learning buys, not the canary: approvals publish at once
    # (bench.rollout measures rollouts).
    settings.POLICY_PUBLISH = "at_once"
    if hint_follow_rate is not None:
        # The simulated model is built per run from settings (agents.llm.factory).
        settings.LLM_SIM_HINT_FOLLOW_RATE = hint_follow_rate
    main_rate = float(settings.LLM_SIM_HINT_FOLLOW_RATE)
    sensitivity: list[dict[str, Any]] = []
    try:
        with sandbox_server() as base_url:
            settings.SANDBOX_BASE_URL = base_url
            tasks = tasks_generate(seed=seed, count=tasks_count, train_fraction=train_fraction)
            train = [t for t in tasks if t.split == "train"]
            heldout = [t for t in tasks if t.split == "heldout"]
            progress(f"{len(tasks)} tasks: {len(train)} train, {len(heldout)} held-out")
            # Control runs held-out; treatment runs train then held-out; once per rate.
            per_pass = len(train) + 2 * len(heldout)
            job_progress(job_id=job_id, advance=0, total=per_pass * (1 + len(rates)))

            def both_arms(label: str) -> dict[str, ArmResult]:
                return _arms_run(
                    train=train,
                    heldout=heldout,
                    agent_id=agent.pk,
                    concurrency=concurrency,
                    progress=progress,
                    approval=approval,
                    job_id=job_id,
                    label=label,
                )

            for rate in rates:
                settings.LLM_SIM_HINT_FOLLOW_RATE = rate
                extra = both_arms(f"[hint-follow {rate:g}] ")
                c_extra, t_extra = extra["control"].results, extra["treatment"].results
                sensitivity.append(
                    {
                        "hint_follow_rate": rate,
                        "control": _summary(c_extra),
                        "treatment": _summary(t_extra),
                        "comparison": paired_comparison(c_extra, t_extra),
                        "by_kind": {
                            name: _by(arm.results, lambda r: [r.kind])
                            for name, arm in extra.items()
                        },
                    }
                )
            # The main pass runs last, so the strategies table is its own.
            settings.LLM_SIM_HINT_FOLLOW_RATE = main_rate
            label = f"[hint-follow {main_rate:g}] " if rates else ""
            arms = both_arms(label)
            strategies = strategies_table()
            from sandbox.services import faultrule_clear

            faultrule_clear()
    finally:
        (
            settings.REFLEXION_ENABLED,
            settings.SANDBOX_BASE_URL,
            settings.POLICY_PUBLISH,
            settings.LLM_SIM_HINT_FOLLOW_RATE,
        ) = previous

    c, t = arms["control"].results, arms["treatment"].results
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
            "llm_sim_hint_follow_rate": main_rate if simulated else None,
            "sensitivity_hint_follow_rates": rates,
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
        "comparison": paired_comparison(c, t),
        "sensitivity": sensitivity,
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
