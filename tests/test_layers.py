"""The layers of DESIGN.md, from the bottom: traces/ (the store), agents/ (the runtime),
policies/ (the learning loop), reviews/ and the pages. Imports point down only, whether at
module level or inside a function. Entry points (management commands) and migrations may
reach any layer. The few edges that still point up are listed below with their reason
(docs/architecture.md); a new one fails, and so does a listed one that is gone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"traces": 0, "agents": 1, "policies": 2, "reviews": 3}

# (importing file, imported module): why it still points up.
KNOWN_UPWARD = {
    # Ingest labels external runs with an Agent row; Trace already has a foreign key to
    # agents.Agent, so the store depends on that one model either way.
    ("traces/otlp.py", "agents.models"),
    # The learning loop opens review items and writes the audit log, both reviews models.
    ("policies/documents.py", "reviews.models"),
    ("policies/reflexion.py", "reviews.models"),
    ("policies/rollouts.py", "reviews.models"),
    ("policies/services.py", "reviews.models"),
}


def _entry_point(path: Path) -> bool:
    parts = path.relative_to(ROOT).parts
    return "migrations" in parts or "management" in parts


def upward_imports() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for app, rank in LAYERS.items():
        for path in (ROOT / app).rglob("*.py"):
            if _entry_point(path):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if LAYERS.get(top, -1) > rank:
                        found.add((str(path.relative_to(ROOT)), module))
    return found


def test_imports_point_down_only() -> None:
    new = upward_imports() - KNOWN_UPWARD
    assert not new, f"imports that point up a layer (DESIGN.md): {sorted(new)}"


def test_the_known_exceptions_are_still_real() -> None:
    gone = KNOWN_UPWARD - upward_imports()
    assert not gone, f"no longer imported, remove from KNOWN_UPWARD and the docs: {sorted(gone)}"


def test_the_runtime_does_not_reach_the_sandbox() -> None:
    # The sandbox is an external API: the runtime calls it over HTTP only.
    for path in (ROOT / "agents").rglob("*.py"):
        if _entry_point(path):
            continue
        source = path.read_text()
        assert "from sandbox" not in source and "import sandbox" not in source, path
