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

The report goes to ``bench/results/mutation-<stamp>.{json,md}`` and ``mutation-latest.*``.
It covers every core module whose mutants mutmut has checked so far (its verdicts persist in
``mutants/`` across runs, so modules can be run one at a time): killed / survived / timeout /
no tests / not checked, the kill rate, the time each run took, and the diff of every
survivor with its reason from ``bench/mutation_equivalent.toml`` (a mutant that changes no
behaviour, or one accepted for a stated reason) or marked ``unjustified``.
"""

from __future__ import annotations

import argparse
import fnmatch
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
# The console script: `python -m mutmut` re-executes mutmut's main module and warns.
_SCRIPT = Path(sys.executable).parent / "mutmut"
MUTMUT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "mutmut"]
EQUIVALENT_FILE = ROOT / "bench" / "mutation_equivalent.toml"
# Verdicts that count as the tests noticing the mutant.
CAUGHT = ("killed", "timeout")
# Verdicts that count against the kill rate: the tests ran (or could not reach the
# mutated function at all) and passed.
MISSED = ("survived", "no tests")
# `mutmut results --all true` prints "    <mutant name>: <status>".
RESULT_LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+?)\s*$")


def core_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["mutmut"]["only_mutate"])


def module_prefix(path: str) -> str:
    """``policies/replay.py`` -> ``policies.replay.``, how mutmut names its mutants."""
    return path.removesuffix(".py").replace("/", ".") + "."


def justified_survivors(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """Mutant name -> why its survival is accepted, from ``[survivors]`` in ``path``."""
    if not path.exists():
        return {}
    table = tomllib.loads(path.read_text()).get("survivors", {})
    return {str(name): str(reason) for name, reason in table.items()}


def spread_sample(names: list[str], size: int) -> list[str]:
    """``size`` of ``names`` spread evenly over the module (in source order), the same
    ones on every run, so that a sample estimates the whole module's kill rate."""
    ordered = sorted(names, key=_mutant_order)
    if size >= len(ordered):
        return ordered
    return [ordered[(index * len(ordered)) // size] for index in range(size)]


def mutants_to_run(
    modules: list[str],
    results: dict[str, str],
    *,
    sample: int | None,
    rerun: bool,
    survivors: bool = False,
) -> list[str]:
    """The mutant names (or, before mutmut has generated any, module globs) to run.

    Named mutants are re-run by mutmut even when they have a verdict, so unless ``rerun``
    only the ones still ``not checked`` (or timed out) are passed: a run cut short by its
    budget resumes.
    ``survivors`` adds the ones that survived (or had no tests), to check them again after
    tests were added.
    """
    if not results:
        return [module_prefix(m) + "*" for m in modules]
    chosen: list[str] = []
    for module in modules:
        mine = [name for name in results if name.startswith(module_prefix(module))]
        if sample is not None:
            mine = spread_sample(mine, sample)
        # A timeout is checked again too: a change of the timeout settings resets them.
        wanted = ("not checked", "timeout", *(MISSED if survivors else ()))
        chosen += [name for name in mine if rerun or results[name] in wanted]
    return chosen


def survivor_reason(name: str, justified: dict[str, str]) -> str | None:
    """The reason for ``name``: its own entry, else the first glob entry (``*``) it matches."""
    if name in justified:
        return justified[name]
    for pattern, reason in justified.items():
        if "*" in pattern and fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def decided_counts(modules: list[str]) -> dict[str, int]:
    """How many mutants of each module have a verdict, from mutmut's ``mutants/*.py.meta``."""
    counts = {}
    for module in modules:
        meta = ROOT / "mutants" / f"{module}.meta"
        try:
            codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        except (OSError, ValueError):
            codes = {}
        counts[module] = sum(1 for code in codes.values() if code is not None)
    return counts


class ModuleClock:
    """Splits a run's wall time between the modules by when their verdicts appear.

    mutmut runs the mutants of several modules in one queue and (with its fork server)
    records no per-mutant time, so the time between two polls goes to the modules whose
    verdict count grew in it, in proportion; time before the first verdict (mapping tests
    to functions, the clean run) is ``setup``.
    """

    def __init__(self, modules: list[str]) -> None:
        self.modules = modules
        self.last = decided_counts(modules)
        self.at = time.monotonic()
        self.seconds: dict[str, float] = {"setup": 0.0, **{m: 0.0 for m in modules}}
        self.started = False

    def tick(self) -> None:
        now = time.monotonic()
        counts = decided_counts(self.modules)
        # A reset (a config change invalidates verdicts) lowers a count: not progress.
        grown = {m: counts[m] - self.last[m] for m in self.modules if counts[m] > self.last[m]}
        elapsed = now - self.at
        if grown:
            self.started = True
            total = sum(grown.values())
            for module, more in grown.items():
                self.seconds[module] += elapsed * more / total
        elif not self.started:
            self.seconds["setup"] += elapsed
        else:
            # Nothing decided in this poll: the mutant still running is one of the modules
            # that comes next; keep the time for the next module that reports.
            return
        self.last, self.at = counts, now

    def result(self) -> dict[str, float]:
        return {name: round(value, 1) for name, value in self.seconds.items()}


def mutmut_run(
    names: list[str], modules: list[str], *, budget_seconds: float, log: Path, poll: float = 5.0
) -> dict[str, Any]:
    """Run mutmut on ``names`` until done or out of budget; return how it ended."""
    if not names:
        return {"ended": "nothing to run", "seconds": 0.0, "mutants_run": 0}
    started = time.monotonic()
    clock = ModuleClock(modules)
    with log.open("w") as out:
        # A process group of its own, so the budget stops mutmut and its forked children.
        process = subprocess.Popen(
            [*MUTMUT, "run", "--max-children", "1", *names],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        ended = ""
        while not ended:
            left = budget_seconds - (time.monotonic() - started)
            try:
                code = process.wait(timeout=max(0.0, min(poll, left)))
                ended = "finished" if code == 0 else f"mutmut exited {code}"
            except subprocess.TimeoutExpired:
                if left <= poll:
                    os.killpg(process.pid, signal.SIGTERM)
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait()
                    ended = "stopped: time budget spent"
            clock.tick()
    seconds = round(time.monotonic() - started, 1)
    return {
        "ended": ended,
        "seconds": seconds,
        "mutants_run": len(names),
        "seconds_by_module": clock.result(),
    }


def mutmut_results() -> dict[str, str]:
    """Every generated mutant and its status (none before the first run)."""
    if not (ROOT / "mutants").exists():
        return {}
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


def summarise(
    modules: list[str],
    results: dict[str, str],
    *,
    justified: dict[str, str],
    diff: Any = None,
) -> dict[str, Any]:
    show = diff or mutant_diff
    summary: dict[str, Any] = {}
    for module in modules:
        prefix = module_prefix(module)
        mine = {name: status for name, status in results.items() if name.startswith(prefix)}
        counts = Counter(mine.values())
        caught = sum(counts[status] for status in CAUGHT)
        missed = sum(counts[status] for status in MISSED)
        survivors = []
        for name, status in sorted(mine.items(), key=lambda item: _mutant_order(item[0])):
            if status not in MISSED:
                continue
            reason = survivor_reason(name, justified)
            survivors.append(
                {
                    "mutant": name,
                    "status": status,
                    "reason": reason or "unjustified",
                    "justified": reason is not None,
                    "diff": show(name),
                }
            )
        unjustified = sum(1 for survivor in survivors if not survivor["justified"])
        summary[module] = {
            "mutants": len(mine),
            "counts": dict(sorted(counts.items())),
            # A mutant that made the tests hang was noticed too: it counts as caught. A
            # mutant in a function no selected test calls ("no tests") counts as missed.
            "kill_rate": caught / (caught + missed) if caught + missed else None,
            # The same, with the justified survivors (equivalent mutants) left out.
            "kill_rate_without_justified": (
                caught / (caught + unjustified) if caught + unjustified else None
            ),
            "justified": len(survivors) - unjustified,
            "unjustified": unjustified,
            "survivors": survivors,
        }
    return summary


def _mutant_order(name: str) -> tuple[str, int]:
    function, _, number = name.rpartition("__mutmut_")
    return function, int(number) if number.isdigit() else 0


def _chosen(run: dict[str, Any]) -> str:
    sample = run.get("sample_per_module") or "all"
    return f"{sample}, survivors again" if run.get("survivors_only") else str(sample)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Mutation testing (mutmut)",
        "",
        "One mutant at a time; mutmut keeps its verdicts in `mutants/`, so the table covers",
        "every run since `mutants/` was last cleared. Runs:",
        "",
        "| started (UTC) | modules | sample per module | mutants run "
        "| budget (min) | wall time (s) | of which setup (s) | ended |",
        "|---|---|---|---|---|---|---|---|",
    ]
    spent: Counter[str] = Counter()
    for run in report["runs"]:
        by_module = run.get("seconds_by_module", {})
        spent.update(by_module)
        lines.append(
            f"| {run['started_at']} | {', '.join(run['modules'])} "
            f"| {_chosen(run)} | {run.get('mutants_run', '-')} "
            f"| {run['budget_minutes']:g} "
            f"| {run['seconds'] + run.get('seconds_generating', 0):.0f} "
            f"| {by_module.get('setup', 0) + run.get('seconds_generating', 0):.0f} "
            f"| {run['ended']} |"
        )
    lines += [
        "",
        "| module | mutants | killed | timeout | survived | no tests | not checked | other "
        "| kill rate | justified | unjustified | kill rate w/o justified | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    named = {"killed", "timeout", "survived", "no tests", "not checked"}
    for module, row in report["modules"].items():
        c = row["counts"]
        other = ", ".join(f"{k} {v}" for k, v in c.items() if k not in named) or "0"
        lines.append(
            f"| {module} | {row['mutants']} | {c.get('killed', 0)} | {c.get('timeout', 0)} "
            f"| {c.get('survived', 0)} | {c.get('no tests', 0)} | {c.get('not checked', 0)} "
            f"| {other} | {_rate(row['kill_rate'])} | {row['justified']} "
            f"| {row['unjustified']} | {_rate(row['kill_rate_without_justified'])} "
            f"| {spent.get(module, 0):.0f} |"
        )
    lines += [
        "",
        "Kill rate = (killed + timeout) / (killed + timeout + survived + no tests); "
        "`not checked` mutants (the budget ran out first) are left out. "
        "Time: the module's share of the runs' wall time, by when its verdicts appeared "
        "(setup, the test-to-function mapping and the clean run, is counted apart). "
        "A justified survivor is listed with its reason in `bench/mutation_equivalent.toml`.",
        "",
    ]
    for module, row in report["modules"].items():
        if not row["survivors"]:
            continue
        lines += [f"## Survivors in {module}", ""]
        for survivor in row["survivors"]:
            lines += [
                f"### {survivor['mutant']} ({survivor['status']})",
                "",
                f"Reason: {survivor['reason']}",
                "",
                "```diff",
                survivor["diff"],
                "```",
                "",
            ]
    return "\n".join(lines)


def previous_runs(output: Path) -> list[dict[str, Any]]:
    """The runs recorded in the last report, while ``mutants/`` still holds their verdicts."""
    latest = output / "mutation-latest.json"
    if not latest.exists() or not (ROOT / "mutants").exists():
        return []
    try:
        runs = json.loads(latest.read_text()).get("runs", [])
    except ValueError:
        return []
    return [run for run in runs if isinstance(run, dict)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--module",
        action="append",
        help="a core module to mutate (repeatable); default: every one in pyproject",
    )
    parser.add_argument("--budget-minutes", type=float, default=120.0)
    parser.add_argument(
        "--sample",
        type=int,
        help="check only this many mutants per module, spread evenly over it (an estimate)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="run mutants that already have a verdict again (default: resume)",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="also run the mutants that survived or had no tests (after adding tests)",
    )
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
    results = mutmut_results()
    budget_seconds = args.budget_minutes * 60
    prepared: dict[str, Any] | None = None
    if not results and args.sample is not None:
        # A sample is drawn from the generated mutants' names, and a fresh `mutants/` has
        # none: without this pass every mutant would run, in mutmut's order, until the
        # budget ended. mutmut generates the mutants and maps the tests, then refuses the
        # name that matches nothing, which is all this pass is for.
        print("no mutants generated yet: generating them and mapping the tests first")
        prepared = mutmut_run(
            [module_prefix(modules[0]) + "x__generate_only__mutmut_0"],
            modules,
            budget_seconds=budget_seconds,
            log=log.with_name("generate.log"),
        )
        budget_seconds -= prepared["seconds"]
        results = mutmut_results()
    names = mutants_to_run(
        modules,
        results,
        sample=args.sample,
        rerun=args.rerun,
        survivors=args.survivors,
    )
    run = mutmut_run(names, modules, budget_seconds=max(0.0, budget_seconds), log=log)
    if prepared is not None:
        run["seconds_generating"] = prepared["seconds"]
    results = mutmut_results()
    checked = [m for m in known if any(n.startswith(module_prefix(m)) for n in results)]
    this_run = {
        "command": " ".join(["python -m bench.mutation", *(argv or sys.argv[1:])]),
        "started_at": started_at,
        "modules": modules,
        "budget_minutes": args.budget_minutes,
        "sample_per_module": args.sample,
        "survivors_only": args.survivors,
        **run,
    }
    report: dict[str, Any] = {
        "runs": [*previous_runs(args.output), this_run],
        "modules": summarise(checked, results, justified=justified_survivors()),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"mutation-{stamp}", "mutation-latest"):
        (args.output / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.output / f"{name}.md").write_text(_markdown(report) + "\n")
    for module in modules:
        row = report["modules"].get(module)
        if row is None:
            print(f"{module}: no mutants")
            continue
        print(
            f"{module}: {row['counts']} kill rate {_rate(row['kill_rate'])}, "
            f"{row['unjustified']} unjustified survivors"
        )
    print(f"{run['ended']} after {run['seconds']:.0f} s; report in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
