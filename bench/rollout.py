"""Canary rollouts over a simulated day of traffic, judged by the production rules.

    .venv/bin/python -m bench.rollout --seed 7

Three strategies are published on the same seeded day of customer sessions: a good one
(fewer errors), a harmful one (more errors of the kinds stable already shows) and a
breaking one (a new error type). Routing is ``rollout_routes_canary`` on the session id;
every simulated minute the window since the step started (capped at ``ROLLOUT_WINDOW``) is
summarised with ``ArmStats`` and judged by ``rollout_judge`` — the functions
``policies.rollouts.rollouts_evaluate`` calls on the database — and a promotion or rollback
moves the percentage along ``ROLLOUT_SCHEDULE`` the same way.

Each run draws one uniform number; it fails under a version when the number is below that
version's error rate, so the canary day and an all-at-once publish of the same strategy
(today's behaviour before rollouts: every customer at once, no automatic rollback) see
the same draws. The report counts customer-visible failures in both and the difference.
Nothing here touches the database; the rates are the scenario, not measurements.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from policies.rollout_stats import (
    ArmStats,
    RolloutRules,
    percentile,
    rollout_judge,
    rollout_routes_canary,
    routing_key,
    rules_from,
    schedule_from,
    schedule_next,
)

DAY_SECONDS = 24 * 3600
TICK_SECONDS = 60  # ROLLOUT_EVALUATE_INTERVAL_SECONDS
STABLE_TYPES = ("INTERNAL_SERVER_ERROR", "TIMEOUT", "RATE_LIMITED")


@dataclass(frozen=True)
class Version:
    name: str
    error_rate: float
    latency_ms: float  # median; runs spread log-normally around it
    error_types: Sequence[str] = STABLE_TYPES


STABLE = Version("stable", 0.12, 900.0)
CANDIDATES = (
    Version("good: adapter fixes a drifted id", 0.06, 920.0),
    Version("harmful: more errors of known kinds", 0.30, 900.0),
    Version("breaking: a new error type", 0.22, 900.0, ("INVALID_PARAMETER",)),
)


@dataclass(frozen=True)
class Run:
    at: float
    session: str
    draw: float  # fails when below the version's error rate
    latency_noise: float
    type_pick: float


@dataclass
class DayResult:
    strategy: str
    outcome: str = "still open at the end of the day"
    final_percent: int = 0
    max_percent: int = 0
    ended_at_hours: float | None = None
    canary_sessions_share: float = 0.0
    failures_canary: int = 0
    failures_at_once: int = 0
    failures_stable_only: int = 0
    runs: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)


def traffic(*, seed: int, sessions: int) -> list[Run]:
    """A day of sessions (1-3 runs each) with a daytime peak."""
    rng = random.Random(seed)
    runs: list[Run] = []
    for i in range(sessions):
        # Two humps, around 11:00 and 20:00 UTC, on a floor of night traffic.
        hump = rng.choice((11, 20, rng.uniform(0, 24)))
        start = (rng.gauss(hump, 2.5) % 24) * 3600
        for k in range(rng.choice((1, 1, 2, 3))):
            runs.append(
                Run(
                    at=min(DAY_SECONDS - 1, start + k * rng.uniform(20, 240)),
                    session=f"s{seed}-{i}",
                    draw=rng.random(),
                    latency_noise=rng.gauss(0, 0.35),
                    type_pick=rng.random(),
                )
            )
    runs.sort(key=lambda r: r.at)
    return runs


def _outcome(run: Run, version: Version) -> tuple[bool, bool, float, str]:
    error = run.draw < version.error_rate
    error_type = ""
    if error:
        types = version.error_types
        error_type = types[min(len(types) - 1, int(run.type_pick * len(types)))]
    latency = version.latency_ms * math.exp(run.latency_noise)
    return (error, not error, latency, error_type)


def simulate_day(
    *, runs: list[Run], candidate: Version, rules: RolloutRules, schedule: list[int], window: int
) -> DayResult:
    """Publish ``candidate`` as a canary at midnight (rollout id 1) and play the day."""
    result = DayResult(strategy=candidate.name, runs=len(runs))
    schedule = sorted(schedule)
    percent, state, step_start = schedule[0], "running", 0.0
    result.max_percent = percent
    # The runs of the current step: (at, on_canary, outcome).
    step_runs: list[tuple[float, bool, tuple[bool, bool, float, str]]] = []
    canary_sessions: set[str] = set()
    all_sessions: set[str] = set()
    next_tick = TICK_SECONDS
    for run in [*runs, None]:
        now = run.at if run is not None else DAY_SECONDS
        while next_tick <= now and state == "running":
            start = max(step_start, next_tick - window)
            in_window = [r for r in step_runs if r[0] >= start]
            canary = ArmStats.from_runs([o for _, on, o in in_window if on])
            stable = ArmStats.from_runs([o for _, on, o in in_window if not on])
            verdict = rollout_judge(canary=canary, stable=stable, rules=rules)
            if verdict.action in ("promote", "rollback"):
                before = percent
                if verdict.action == "rollback":
                    percent, state = 0, "rolled_back"
                else:
                    percent = schedule_next(schedule, percent)
                    if percent >= 100:
                        state = "completed"
                result.max_percent = max(result.max_percent, percent)
                result.decisions.append(
                    {
                        "at_hours": round(next_tick / 3600, 2),
                        "action": verdict.action if state != "completed" else "complete",
                        "from_percent": before,
                        "to_percent": percent,
                        "canary_n": canary.n,
                        "stable_n": stable.n,
                        "canary_error_rate": _round(canary.error_rate),
                        "stable_error_rate": _round(stable.error_rate),
                        "z": _round(verdict.statistic),
                        "p_value": _round(verdict.p_value, 6),
                        "canary_p95_ms": _round(canary.p95_ms, 0),
                        "stable_p95_ms": _round(stable.p95_ms, 0),
                        "reason": verdict.reason,
                    }
                )
                step_start, step_runs = next_tick, []
                if state != "running":
                    result.ended_at_hours = round(next_tick / 3600, 2)
            next_tick += TICK_SECONDS
        if run is None:
            break
        all_sessions.add(run.session)
        if state == "completed":
            on = True
        elif state == "rolled_back":
            on = False
        else:
            on = rollout_routes_canary(
                rollout_id=1, key=routing_key(session_id=run.session), percent=percent
            )
        outcome = _outcome(run, candidate if on else STABLE)
        if on:
            canary_sessions.add(run.session)
        if state == "running":
            step_runs.append((run.at, on, outcome))
        result.failures_canary += outcome[0]
        result.failures_at_once += _outcome(run, candidate)[0]
        result.failures_stable_only += _outcome(run, STABLE)[0]
    result.outcome = {
        "completed": "promoted to 100%",
        "rolled_back": "rolled back",
        "running": result.outcome,
    }[state]
    result.final_percent = 100 if state == "completed" else percent
    result.canary_sessions_share = round(len(canary_sessions) / max(1, len(all_sessions)), 4)
    return result


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def bench_rollout(
    *,
    seed: int,
    sessions: int,
    rules: RolloutRules,
    schedule: list[int],
    window: int,
) -> dict[str, Any]:
    started = time.perf_counter()
    runs = traffic(seed=seed, sessions=sessions)
    days = [
        simulate_day(runs=runs, candidate=c, rules=rules, schedule=schedule, window=window)
        for c in CANDIDATES
    ]
    latencies = [_outcome(r, STABLE)[2] for r in runs]
    return {
        "seed": seed,
        "sessions": sessions,
        "runs": len(runs),
        "stable": {
            "error_rate": STABLE.error_rate,
            "p95_ms": _round(percentile(latencies, 95), 0),
        },
        "candidates": [
            {"name": c.name, "error_rate": c.error_rate, "latency_ms": c.latency_ms}
            for c in CANDIDATES
        ],
        "rules": {
            "schedule": schedule,
            "min_samples": rules.min_samples,
            "window_seconds": window,
            "alpha": rules.alpha,
            "latency_budget_ms": rules.latency_budget_ms,
            "latency_min_samples": rules.latency_min_samples,
            "burst": rules.burst,
            "tick_seconds": TICK_SECONDS,
        },
        "days": [day.__dict__ for day in days],
        "seconds": round(time.perf_counter() - started, 2),
    }


def _markdown(report: dict[str, Any]) -> str:
    rules = report["rules"]
    lines = [
        "# Rollout benchmark: a simulated day per strategy",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}",
        f"- finished: {report['finished_at']} ({report['seconds']} s)",
        f"- traffic: {report['sessions']} sessions, {report['runs']} runs over 24 h "
        f"(seed {report['seed']}); stable error rate {report['stable']['error_rate']:.0%}",
        f"- rules (the settings' defaults): schedule {rules['schedule']}, "
        f"{rules['min_samples']} runs per arm, window {rules['window_seconds']} s, "
        f"alpha {rules['alpha']}, p95 budget {rules['latency_budget_ms']:.0f} ms, "
        f"burst {rules['burst']}, evaluated every {rules['tick_seconds']} s",
        "",
        "Error rates are the scenario's, not measurements; what is measured is what the "
        'production evaluator code does with them. "At once" is the behaviour before '
        "rollouts: the approved version serves every customer for the whole day.",
        "",
        "| strategy | outcome | ended (h) | max % | sessions on canary | failures with canary "
        "| failures at once | saved by the canary |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for day in report["days"]:
        saved = day["failures_at_once"] - day["failures_canary"]
        lines.append(
            f"| {day['strategy']} | {day['outcome']} | {day['ended_at_hours']} | "
            f"{day['max_percent']}% | {day['canary_sessions_share']:.2%} | "
            f"{day['failures_canary']} | {day['failures_at_once']} | {saved:+d} |"
        )
    lines += [
        "",
        'A negative "saved" is the price of caution: a good strategy helps fewer customers '
        "while it is a canary.",
        "",
    ]
    for day in report["days"]:
        lines += [f"## {day['strategy']}", ""]
        lines += [
            "| at (h) | decision | % | n canary / stable | error rate canary / stable | z | p "
            "| p95 canary / stable (ms) | why |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for d in day["decisions"]:
            lines.append(
                f"| {d['at_hours']} | {d['action']} | {d['from_percent']} → {d['to_percent']} | "
                f"{d['canary_n']} / {d['stable_n']} | {d['canary_error_rate']} / "
                f"{d['stable_error_rate']} | {d['z']} | {d['p_value']} | "
                f"{d['canary_p95_ms']} / {d['stable_p95_ms']} | {d['reason']} |"
            )
        lines.append("")
    return "\n".join(lines)


def report_write(report: dict[str, Any], *, output_dir: Path, command: str) -> list[Path]:
    report = {
        **report,
        "command": command,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": __import__("os").cpu_count(),
            "python": platform.python_version(),
        },
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = [output_dir / "rollout-latest.json", output_dir / "rollout-latest.md"]
    paths[0].write_text(json.dumps(report, indent=2))
    paths[1].write_text(_markdown(report))
    return paths


def _settings_defaults() -> tuple[RolloutRules, list[int], int]:
    """The rules the product runs with: the ROLLOUT_* values of config.settings.base (its
    defaults, or this installation's environment), with no database or Django set up."""
    from config.settings import base

    return rules_from(base), schedule_from(base), base.ROLLOUT_WINDOW


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=20_000, help="sessions in the day")
    parser.add_argument("--output-dir", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    rules, schedule, window = _settings_defaults()
    report = bench_rollout(
        seed=args.seed, sessions=args.sessions, rules=rules, schedule=schedule, window=window
    )
    command = "python -m bench.rollout " + " ".join(sys.argv[1:] if argv is None else argv)
    for path in report_write(report, output_dir=args.output_dir, command=command.strip()):
        print(path)
    for day in report["days"]:
        print(
            f"{day['strategy']}: {day['outcome']} (max {day['max_percent']}%, "
            f"{day['canary_sessions_share']:.2%} of sessions on the canary); failures "
            f"{day['failures_canary']} with the canary vs {day['failures_at_once']} at once"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
