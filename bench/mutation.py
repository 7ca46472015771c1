"""Mutation testing of the core modules with mutmut, within a time budget.

``make mutation`` (or ``python -m bench.mutation [--module policies/replay.py ...]``) runs
mutmut over the modules listed in ``[tool.mutmut] only_mutate`` of pyproject.toml. mutmut
copies the project into ``mutants/``, makes one-line changes (operators, constants,
comparisons, removed calls), and runs against each one only the tests that call the mutated
function. A mutant the tests fail on is *killed*; one they pass on *survived* and shows a
hole in the tests (or an equivalent change, listed in the report as such).

One mutant runs at a time (the tests share one PostgreSQL test database), so a module takes
minutes to an hour on two cores: this is not part of ``make test`` or CI. When the budget
runs out, mutmut is stopped and the report counts what was not reached as ``not checked``.

The report goes to ``bench/results/mutation-<stamp>.{json,md}`` and ``mutation-latest.*``:
per module killed / survived / timeout / no tests / not checked, the kill rate, and the
diff of every survivor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = [sys.executable, "-m", "mutmut"]
# `mutmut results --all true` prints "    <mutant name>: <status>".
RESULT_LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+?)\s*$")


def core_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["mutmut"]["only_mutate"])


def module_prefix(path: str) -> str:
    """``policies/replay.py`` -> ``policies.replay.``, how mutmut names its mutants."""
    return path.removesuffix(".py").replace("/", ".") + "."


def mutmut_run(modules: list[str], *, budget_seconds: float, log: Path) -> dict[str, Any]:
    """Run mutmut on ``modules`` until done or out of budget; return how it ended."""
    globs = [module_prefix(m) + "*" for m in modules]
    started = time.monotonic()
    with log.open("w") as out:
        # A process group of its own, so the budget stops mutmut and its forked children.
        process = subprocess.Popen(
            [*MUTMUT, "run", "--max-children", "1", *globs],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=budget_seconds)
            ended = "finished" if code == 0 else f"mutmut exited {code}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            ended = "stopped: time budget spent"
    return {"ended": ended, "seconds": round(time.monotonic() - started, 1)}


def mutmut_results() -> dict[str, str]:
    """Every generated mutant and its status."""
    shown = subprocess.run(
        [*MUTMUT, "results", "--all", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    results = {}
    for line in shown.stdout.splitlines():
        found = RESULT_LINE.match(line)
        if found:
            results[found["name"]] = found["status"]
    return results


def mutant_diff(name: str) -> str:
    shown = subprocess.run(
        [*MUTMUT, "show", name], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return "\n".join(shown.stdout.splitlines()[1:]).strip()


def summarise(modules: list[str], results: dict[str, str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for module in modules:
        prefix = module_prefix(module)
        mine = {name: status for name, status in results.items() if name.startswith(prefix)}
        counts = Counter(mine.values())
        killed, survived, timeout = counts["killed"], counts["survived"], counts["timeout"]
        decided = killed + survived + timeout
        summary[module] = {
            "mutants": len(mine),
            "counts": dict(sorted(counts.items())),
            # A mutant that made the tests hang was noticed too: it counts as killed.
            "kill_rate": (killed + timeout) / decided if decided else None,
            "survivors": [
                {"mutant": name, "diff": mutant_diff(name)}
                for name, status in sorted(mine.items())
                if status == "survived"
            ],
        }
    return summary


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Mutation testing (mutmut)",
        "",
        f"- command: `{report['command']}`",
        f"- started {report['started_at']}, {report['run']['seconds']:.0f} s, "
        f"{report['run']['ended']}",
        f"- budget: {report['budget_minutes']} min; one mutant at a time",
        "",
        "| module | mutants | killed | survived | timeout | no tests | not checked | kill rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for module, row in report["modules"].items():
        c = row["counts"]
        rate = "-" if row["kill_rate"] is None else f"{row['kill_rate']:.1%}"
        lines.append(
            f"| {module} | {row['mutants']} | {c.get('killed', 0)} | {c.get('survived', 0)} "
            f"| {c.get('timeout', 0)} | {c.get('no tests', 0)} | {c.get('not checked', 0)} "
            f"| {rate} |"
        )
    lines += ["", "Kill rate = (killed + timeout) / (killed + survived + timeout).", ""]
    for module, row in report["modules"].items():
        if not row["survivors"]:
            continue
        lines += [f"## Survivors in {module}", ""]
        for survivor in row["survivors"]:
            lines += [f"### {survivor['mutant']}", "", "```diff", survivor["diff"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--module",
        action="append",
        help="a core module to mutate (repeatable); default: every one in pyproject",
    )
    parser.add_argument("--budget-minutes", type=float, default=120.0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    known = core_modules()
    modules = args.module or known
    unknown = sorted(set(modules) - set(known))
    if unknown:
        parser.error(f"not in [tool.mutmut] only_mutate: {', '.join(unknown)}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    args.output.mkdir(parents=True, exist_ok=True)
    log = ROOT / "mutants" / "run.log"
    log.parent.mkdir(exist_ok=True)
    print(f"mutmut on {', '.join(modules)} for at most {args.budget_minutes:g} min ({log})")
    run = mutmut_run(modules, budget_seconds=args.budget_minutes * 60, log=log)
    report = {
        "command": " ".join(["python -m bench.mutation", *(argv or sys.argv[1:])]),
        "started_at": started_at,
        "budget_minutes": args.budget_minutes,
        "run": run,
        "modules": summarise(modules, mutmut_results()),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"mutation-{stamp}", "mutation-latest"):
        (args.output / f"{name}.json").write_text(json.dumps(report, indent=2))
        (args.output / f"{name}.md").write_text(_markdown(report))
    for module, row in report["modules"].items():
        rate = "-" if row["kill_rate"] is None else f"{row['kill_rate']:.1%}"
        print(f"{module}: {row['counts']} kill rate {rate}")
    print(f"{run['ended']} after {run['seconds']:.0f} s; report in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
