"""Run each test file alone, in a pytest process of its own, and report which fail.

A file that passes in the full suite but fails alone leans on state another file left
behind (a registered tool, a cached policy, a row); one that fails only in the suite
leaks state into others. ``make test`` catches the second kind (a shuffled order); this
catches the first. Each file runs in file order (``-p no:randomly``), without coverage,
with the real-model tests deselected as in CI's first pass. The test database is built
once (migrations) and reused by the later files (``--reuse-db``): every test still
starts from an empty database, as pytest-django's transactions and flushes guarantee.

    python -m bench.files_alone [--only tests/policies] [--output bench/results]

Writes ``files-alone-<stamp>.{json,md}`` and ``files-alone-latest.*``; exit status 1
when a file fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--no-cov"]
# pytest's exit status 5: the file collected no test once the real-model ones are deselected.
NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class FileRun:
    path: str
    status: str  # passed, failed, nothing collected
    seconds: float
    summary: str  # pytest's last line


def find_test_files(under: list[str]) -> list[str]:
    found: set[Path] = set()
    for part in under or ["tests"]:
        base = ROOT / part
        found.update([base] if base.is_file() else base.rglob("test_*.py"))
    return sorted(str(path.relative_to(ROOT)) for path in found)


def run_file(path: str, *, create_db: bool) -> FileRun:
    command = [*PYTEST, "--create-db" if create_db else "--reuse-db", "-m", "not real_model", path]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else done.stderr.strip()[-200:]
    if done.returncode == 0:
        status = "passed"
    elif done.returncode == NO_TESTS_COLLECTED:
        status = "nothing collected"
    else:
        status = "failed"
        # A usage error (a path that does not exist, a bad option) goes to stderr.
        failing = [
            line
            for line in [*lines, *done.stderr.splitlines()]
            if line.startswith(("FAILED", "ERROR"))
        ]
        # The assertion lines say why, for a failure that does not come back on a rerun.
        why = [line[2:].strip() for line in lines if line.startswith("E ")]
        summary = "; ".join([summary, *failing[:5], *why[:5]])
    return FileRun(path, status, round(seconds, 1), summary)


def write_report(runs: list[FileRun], command: str, output: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    failed = [run for run in runs if run.status == "failed"]
    head = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": (
            f"{platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()}"
        ),
        "files": len(runs),
        "failed": len(failed),
        "seconds": round(sum(run.seconds for run in runs), 1),
    }
    lines = [
        "# Each test file run alone",
        "",
        f"- When: {head['when']}",
        f"- Command: `{command}`",
        f"- Machine: {head['machine']}",
        f"- Files: {len(runs)}; failed alone: {len(failed)}; "
        f"total time {head['seconds']} s (one pytest process per file)",
        "",
        "| file | status | time (s) | pytest's summary |",
        "|---|---|---|---|",
        *(
            f"| {run.path} | {run.status} | {run.seconds} | {run.summary.replace('|', '/')} |"
            for run in runs
        ),
        "",
    ]
    output.mkdir(parents=True, exist_ok=True)
    data = json.dumps({**head, "runs": [asdict(run) for run in runs]}, indent=2)
    for name in (f"files-alone-{stamp}", "files-alone-latest"):
        (output / f"{name}.md").write_text("\n".join(lines))
        (output / f"{name}.json").write_text(data + "\n")
    return output / f"files-alone-{stamp}.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", action="append", default=[], help="a test folder or file (repeatable)"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    files = find_test_files(args.only)
    runs: list[FileRun] = []
    for index, path in enumerate(files):
        run = run_file(path, create_db=index == 0)
        runs.append(run)
        print(f"[{index + 1}/{len(files)}] {run.status:>17} {run.seconds:7.1f}s {path}", flush=True)
    command = "python -m bench.files_alone" + "".join(f" --only {p}" for p in args.only)
    report = write_report(runs, command, args.output)
    failed = [run.path for run in runs if run.status == "failed"]
    print(f"{len(files) - len(failed)} of {len(files)} files pass alone; report: {report}")
    for path in failed:
        print(f"failed alone: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
