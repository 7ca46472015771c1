"""List-page benchmark: every list page and API list timed over the dashboard benchmark's
generated traffic (bench/dashboard.py fills it with COPY).

The goal (issue 10) is p50 < 100 ms for every list at 10M steps; the report says at what
size it was measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOAL_MS = 100


def pages_report_write(result: dict[str, Any], *, output_dir: Path, name: str) -> list[Path]:
    """Write ``<name>.json`` and ``<name>.md`` under ``output_dir``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / f"{name}.json"
    md_path = output_dir / f"{name}.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    lines = [
        "# List pages benchmark",
        "",
        f"- command: `{result['command']}`",
        f"- label: {result['label']}",
        f"- machine: {result['machine']}",
        f"- load average when timing began: {result['load_average']} "
        "(the CPUs are shared with other jobs)",
        f"- run at: {result['run_at']}",
        f"- in the database: {result['table_rows']['steps']:,} steps, "
        f"{result['table_rows']['traces']:,} traces "
        f"({result['table_rows']['support_traces']:,} of them started by the support user)",
        f"- each endpoint: {result['samples']} timed requests after 2 warm-ups, through "
        "Django's test client in this process (view, queries, template or JSON; no HTTP)",
        "",
        f"Goal: p50 < {result['goal_ms']} ms for every list at 10M steps; measured here at "
        f"{result['table_rows']['steps']:,} steps — "
        + ("**met at this size**." if result["goal_met"] else "**not met at this size**."),
        "",
        "| endpoint | user | p50 ms | p95 ms | queries | on traces_step |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["endpoints"]:
        lines.append(
            f"| `{row['path']}` | {row['user']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} "
            f"| {row['queries']} | {row['step_queries']} |"
        )
    md_path.write_text("\n".join(lines) + "\n")
    return [md_path, json_path]
