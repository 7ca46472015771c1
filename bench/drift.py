"""The drift gauntlet: does the learning loop repair contract changes it was never written
for, with no code change between them?

Each drift of ``GAUNTLET`` is a set of ``ContractDrift`` rows (``sandbox/drifts.py``),
applied on its own to a fresh policy tree. For each drift, tasks whose answers need the
drifted endpoint are generated from the drift-free sandbox (as in ``bench.learning``) and
split into train and held-out. Control runs the held-out tasks with the loop off;
treatment runs train with the loop on (Reflexion after every failed run, approval after a
passed replay), then the same held-out tasks with learning frozen. The two arms are paired
task by task and compared with an exact McNemar test.

The drifts are rows, not code: nothing in the proposers names them. Per drift the report
gives whether it was repaired (held-out gain with p < 0.01 and an approved strategy on the
drifted tool), the strategy learned, the failed runs until the first approved fix (the
seed's discovery cycle, 000 §5.1), the gain and its p-value.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command

from bench.learning import (
    RunResult,
    Task,
    learning_state_reset,
    run_tasks,
    sandbox_server,
    strategies_table,
    tasks_generate,
)
from bench.stats import mcnemar_exact
from sandbox.models import ContractDrift

SIGNIFICANCE = 0.01

# The task kinds whose answers go through each tool.
KINDS_BY_TOOL = {
    "get_order": ("order_status",),
    "get_return_status": ("returns",),
    "search_products": ("price", "stock", "compare"),
    "get_sku_price": ("price", "compare"),
    "check_inventory": ("stock",),
    "search_articles": ("policy",),
}


@dataclass(frozen=True)
class Drift:
    name: str
    description: str
    tool: str
    rows: tuple[dict[str, Any], ...]


def _drift(name: str, description: str, tool: str, **row: Any) -> Drift:
    return Drift(name, description, tool, (row,))


# Contract changes a careful engineer could fix from the error message, the tool's schema
# and its past successful calls. Layouts vary on purpose: the proposers read them all.
GAUNTLET: tuple[Drift, ...] = (
    _drift(
        "orders-integer-id",
        "orders want the order id as a bare integer",
        "get_order",
        endpoint="orders",
        kind="integer",
        param="order_id",
        old="#W",
        layout="flat",
    ),
    _drift(
        "orders-prefix-dropped",
        "orders want the id without its '#W' prefix",
        "get_order",
        endpoint="orders",
        kind="prefix_dropped",
        param="order_id",
        old="#W",
        layout="detail",
    ),
    _drift(
        "returns-prefix-changed",
        "returns want ids prefixed 'W-' instead of '#W'",
        "get_return_status",
        endpoint="returns",
        kind="prefix_changed",
        param="order_id",
        old="#W",
        new="W-",
        pattern=r"^W-\d{7}$",
        layout="problem",
    ),
    _drift(
        "returns-lowercase",
        "returns want the order id in lower case",
        "get_return_status",
        endpoint="returns",
        kind="case",
        param="order_id",
        old="upper",
        new="lower",
        layout="errors",
    ),
    _drift(
        "skus-lowercase",
        "prices want the SKU code in lower case",
        "get_sku_price",
        endpoint="skus",
        kind="case",
        param="sku",
        old="upper",
        new="lower",
        layout="pydantic",
    ),
    _drift(
        "skus-separator",
        "prices want SKU codes with '_' separators",
        "get_sku_price",
        endpoint="skus",
        kind="separator",
        param="sku",
        old="-",
        new="_",
        pattern=r"^[A-Z]{2,4}_\d{4}_[A-Z0-9]{2,4}$",
        layout="text",
    ),
    _drift(
        "inventory-separator",
        "stock wants SKU codes with '.' separators",
        "check_inventory",
        endpoint="inventory",
        kind="separator",
        param="sku",
        old="-",
        new=".",
        pattern=r"^[A-Z]{2,4}\.\d{4}\.[A-Z0-9]{2,4}$",
        layout="errors",
    ),
    _drift(
        "inventory-prefix-added",
        "stock wants SKU codes prefixed 'SKU:'",
        "check_inventory",
        endpoint="inventory",
        kind="prefix_added",
        param="sku",
        new="SKU:",
        layout="detail",
    ),
    _drift(
        "products-param-renamed",
        "product search renamed its query parameter q to search",
        "search_products",
        endpoint="products",
        kind="param_renamed",
        old="q",
        new="search",
        layout="text",
    ),
    _drift(
        "products-new-required-param",
        "product search requires api_version=2024-10-01",
        "search_products",
        endpoint="products",
        kind="param_required",
        new="api_version",
        values=["2024-10-01"],
        layout="problem",
    ),
    _drift(
        "skus-new-required-param",
        "prices require currency=USD",
        "get_sku_price",
        endpoint="skus",
        kind="param_required",
        new="currency",
        values=["USD"],
        layout="errors",
    ),
    _drift(
        "orders-new-required-param",
        "orders require api_version=2",
        "get_order",
        endpoint="orders",
        kind="param_required",
        new="api_version",
        values=["2"],
        layout="pydantic",
    ),
    _drift(
        "skus-unavailable",
        "prices answer 503 with Retry-After: 1 to the first try of each call",
        "get_sku_price",
        endpoint="skus",
        kind="unavailable",
        retry_after_s=1.0,
        layout="detail",
    ),
    _drift(
        "inventory-rate-limited",
        "stock answers 429 with Retry-After: 1 to the first try of each call",
        "check_inventory",
        endpoint="inventory",
        kind="rate_limited",
        retry_after_s=1.0,
        layout="flat",
    ),
)


# The tool that calls each sandbox endpoint (for drifts written on the command line).
TOOL_BY_ENDPOINT = {
    "orders": "get_order",
    "returns": "get_return_status",
    "products": "search_products",
    "skus": "get_sku_price",
    "inventory": "check_inventory",
    "articles": "search_articles",
}


def custom_drift(row: dict[str, Any], index: int) -> Drift:
    """A drift given as one ContractDrift row (``--custom``); ValueError when unusable."""
    from django.core.exceptions import ValidationError

    if not isinstance(row, dict):
        raise ValueError("a custom drift is a JSON object of ContractDrift fields")
    tool = TOOL_BY_ENDPOINT.get(str(row.get("endpoint", "")))
    if tool is None:
        known = ", ".join(TOOL_BY_ENDPOINT)
        raise ValueError(f"a custom drift's endpoint must be one of {known}")
    try:
        ContractDrift(**row).full_clean()
    except (TypeError, ValidationError) as error:
        raise ValueError(f"invalid custom drift {json.dumps(row)}: {error}") from None
    return Drift(f"custom-{index}", f"custom drift on {row['endpoint']}", tool, (row,))


@dataclass
class DriftResult:
    name: str
    description: str
    tool: str
    rows: list[dict[str, Any]]
    kinds: list[str]
    train: int
    heldout: int
    control_successes: int
    treatment_successes: int
    control_only: int  # b: control right, treatment wrong
    treatment_only: int  # c: control wrong, treatment right
    p_value: float
    repaired: bool
    worse: bool
    strategies: list[dict[str, Any]]
    failed_runs_until_fix: int | None
    wall_seconds: float
    control_errors: dict[str, int] = field(default_factory=dict)
    treatment_errors: dict[str, int] = field(default_factory=dict)

    @property
    def gain(self) -> float:
        return (self.treatment_successes - self.control_successes) / max(1, self.heldout)


def _mix_for(tool: str) -> dict[str, float]:
    kinds = KINDS_BY_TOOL[tool]
    return {kind: 1 / len(kinds) for kind in kinds}


def _drift_apply(drift: Drift) -> None:
    from sandbox.faults import drift_state_reset
    from sandbox.services import contractdrift_delete, contractdrift_set

    contractdrift_delete()
    for row in drift.rows:
        contractdrift_set(**row)
    drift_state_reset()


def _drift_clear() -> None:
    from sandbox.faults import drift_state_reset
    from sandbox.services import contractdrift_delete

    contractdrift_delete()
    drift_state_reset()


def _approved_for(tool: str) -> list[dict[str, Any]]:
    """The approved or active strategies that act on ``tool`` (or on every tool)."""
    live = ("approved", "active")
    return [s for s in strategies_table(statuses=live) if s["tool"] in ("", tool)]


def _error_counts(results: list[RunResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        for error in result.error_types:
            counts[error] = counts.get(error, 0) + 1
    return dict(sorted(counts.items()))


def drift_run(
    drift: Drift,
    *,
    seed: int,
    tasks_count: int,
    train_fraction: float,
    concurrency: int,
    agent_id: int,
    progress: Callable[[str], None],
) -> DriftResult:
    started = time.monotonic()
    _drift_clear()
    tasks = tasks_generate(
        seed=seed, count=tasks_count, train_fraction=train_fraction, mix=_mix_for(drift.tool)
    )
    train = [t for t in tasks if t.split == "train"]
    heldout = [t for t in tasks if t.split == "heldout"]

    def run(split: list[Task], learn: bool, arm: str) -> list[RunResult]:
        return run_tasks(
            split,
            agent_id=agent_id,
            arm=f"{drift.name}:{arm}",
            concurrency=concurrency,
            learn=learn,
            progress=progress,
        )

    learning_state_reset()
    _drift_apply(drift)
    control = run(heldout, False, "control")

    learning_state_reset()
    _drift_apply(drift)
    failed_before_fix: int | None = None
    failed = 0
    for start in range(0, len(train), concurrency):
        batch = run(train[start : start + concurrency], True, "train")
        failed += sum(not r.success for r in batch)
        if failed_before_fix is None and any(
            s["tool"] == drift.tool for s in _approved_for(drift.tool)
        ):
            failed_before_fix = failed
    treatment = run(heldout, False, "treatment")
    strategies = _approved_for(drift.tool)
    _drift_clear()

    by_task = {r.task_id: r.success for r in treatment}
    b = sum(1 for r in control if r.success and not by_task[r.task_id])
    c = sum(1 for r in control if not r.success and by_task[r.task_id])
    p = mcnemar_exact(b, c)
    return DriftResult(
        name=drift.name,
        description=drift.description,
        tool=drift.tool,
        rows=[dict(row) for row in drift.rows],
        kinds=list(KINDS_BY_TOOL[drift.tool]),
        train=len(train),
        heldout=len(heldout),
        control_successes=sum(r.success for r in control),
        treatment_successes=sum(r.success for r in treatment),
        control_only=b,
        treatment_only=c,
        p_value=p,
        repaired=c > b and p < SIGNIFICANCE and any(s["tool"] == drift.tool for s in strategies),
        worse=b > c,
        strategies=strategies,
        failed_runs_until_fix=failed_before_fix,
        wall_seconds=time.monotonic() - started,
        control_errors=_error_counts(control),
        treatment_errors=_error_counts(treatment),
    )


def gauntlet_run(
    *,
    seed: int,
    tasks_per_drift: int,
    train_fraction: float,
    concurrency: int,
    only: list[str] | None,
    output_dir: Path,
    command: str,
    progress: Callable[[str], None],
    custom: list[Drift] | None = None,
) -> dict[str, Any]:
    from agents.models import Agent
    from agents.services import DEFAULT_AGENT_SLUG
    from traces.models import Job
    from traces.services import job_finish, job_progress, job_running

    drifts = [d for d in GAUNTLET if (not only and not custom) or d.name in (only or ())]
    drifts += custom or []
    unknown = sorted(set(only or ()) - {d.name for d in GAUNTLET})
    if unknown:
        raise ValueError(f"unknown drift(s) {', '.join(unknown)}")
    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    call_command("demo_seed", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    agent = Agent.objects.get(slug=DEFAULT_AGENT_SLUG)
    previous = (settings.REFLEXION_ENABLED, settings.SANDBOX_BASE_URL, settings.POLICY_PUBLISH)
    logging.getLogger("django.request").setLevel(logging.CRITICAL)
    settings.REFLEXION_ENABLED = False  # learning is driven explicitly, in order
    settings.POLICY_PUBLISH = "at_once"
    results: list[DriftResult] = []
    with job_running(
        kind=Job.Kind.BENCHMARK, name=f"bench_drift seed={seed}", total=len(drifts)
    ) as job:
        try:
            with sandbox_server() as base_url:
                settings.SANDBOX_BASE_URL = base_url
                for drift in drifts:
                    progress(f"{drift.name}: {drift.description}")
                    result = drift_run(
                        drift,
                        seed=seed,
                        tasks_count=tasks_per_drift,
                        train_fraction=train_fraction,
                        concurrency=concurrency,
                        agent_id=agent.pk,
                        progress=lambda _line: None,
                    )
                    results.append(result)
                    line = (
                        f"  {'repaired' if result.repaired else 'NOT repaired'}: control "
                        f"{result.control_successes}/{result.heldout}, treatment "
                        f"{result.treatment_successes}/{result.heldout}, "
                        f"b={result.control_only} c={result.treatment_only} "
                        f"p={result.p_value:.2g}"
                    )
                    progress(line)
                    job_progress(job_id=job.pk, message=f"{drift.name}:{line}")
        finally:
            settings.REFLEXION_ENABLED, settings.SANDBOX_BASE_URL, settings.POLICY_PUBLISH = (
                previous
            )
            _drift_clear()
            learning_state_reset()
        report = _report(
            results,
            command=command,
            started_at=started_at,
            seed=seed,
            tasks_per_drift=tasks_per_drift,
            train_fraction=train_fraction,
            concurrency=concurrency,
            wall=time.monotonic() - started,
        )
        report["files"] = _write(report, output_dir)
        job_finish(job_id=job.pk, message=report["headline"])
    return report


def _report(results: list[DriftResult], **meta: Any) -> dict[str, Any]:
    repaired = sum(r.repaired for r in results)
    worse = sum(r.worse for r in results)
    headline = (
        f"{repaired} of {len(results)} drifts repaired with no code change; {worse} made worse"
    )
    return {
        "command": meta["command"],
        "started_at": meta["started_at"],
        "wall_seconds": meta["wall"],
        "headline": headline,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        },
        "config": {
            "seed": meta["seed"],
            "tasks_per_drift": meta["tasks_per_drift"],
            "train_fraction": meta["train_fraction"],
            "concurrency": meta["concurrency"],
            "llm_backend": settings.LLM_BACKEND,
            "llm_sim_error_rates": settings.LLM_SIM_ERROR_RATES,
            "llm_sim_hint_follow_rate": settings.LLM_SIM_HINT_FOLLOW_RATE,
            "significance": SIGNIFICANCE,
            "approval": "auto-approve after a passed replay",
        },
        "drifts": [{**asdict(r), "gain": r.gain} for r in results],
    }


def _markdown(report: dict[str, Any]) -> str:
    config = report["config"]
    backend = config["llm_backend"]
    lines = [
        "# Drift gauntlet",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}, database {report['machine']['database']}",
        f"- LLM backend: **{backend}**"
        + (
            " (simulated test/demo model: it reads only its prompt)"
            if backend == "simulated"
            else ""
        ),
        f"- per drift: {config['tasks_per_drift']} tasks of the kinds that use the drifted "
        f"tool (seed {config['seed']}), {config['train_fraction']:.0%} train; concurrency "
        f"{config['concurrency']}; approval: {config['approval']}",
        f"- simulated hint-follow rate {config['llm_sim_hint_follow_rate']}, simulated error "
        f"rates {config['llm_sim_error_rates']}",
        f"- started {report['started_at']}, took {report['wall_seconds']:.0f} s",
        "",
        f"**{report['headline']}** (repaired: held-out gain with exact McNemar p < "
        f"{config['significance']} and an approved strategy on the drifted tool; worse: more "
        "tasks lost than won).",
        "",
        "| drift | layout | held-out | control | treatment | b / c | p | repaired | failed runs "
        "until fix | strategy learned |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in report["drifts"]:
        learned = (
            "; ".join(
                f"{s['kind']} {s['tool'] or '*'}: {s['strategy_update']}"
                for s in d["strategies"]
                if s["tool"] == d["tool"]
            )
            or "-"
        )
        n = d["heldout"]
        lines.append(
            f"| {d['name']} | {d['rows'][0].get('layout', 'flat')} | {n} | "
            f"{d['control_successes'] / max(1, n):.0%} | {d['treatment_successes'] / max(1, n):.0%}"
            f" | {d['control_only']} / {d['treatment_only']} | {d['p_value']:.2g} | "
            f"{'yes' if d['repaired'] else '**no**'} | "
            f"{d['failed_runs_until_fix'] if d['failed_runs_until_fix'] is not None else '-'} | "
            f"{learned.replace('|', '/')} |"
        )
    lines += ["", "## The drifts (sandbox ContractDrift rows)", ""]
    for d in report["drifts"]:
        lines.append(f"- **{d['name']}**: {d['description']} — `{json.dumps(d['rows'][0])}`")
    lines += [
        "",
        "Control runs the held-out tasks with the loop off; treatment learns on the train tasks "
        "(Reflexion after each failed run) and then runs the same held-out tasks with learning "
        "frozen. b = tasks only control answered correctly, c = tasks only treatment did.",
    ]
    return "\n".join(lines) + "\n"


def _write(report: dict[str, Any], output_dir: Path) -> list[str]:
    output_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    files = []
    for name in (f"drift-{stamp}", "drift-latest"):
        (output_dir / f"{name}.json").write_text(json.dumps(report, indent=2, default=str))
        (output_dir / f"{name}.md").write_text(_markdown(report))
        files += [str(output_dir / f"{name}.json"), str(output_dir / f"{name}.md")]
    return files[:2]
