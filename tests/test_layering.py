"""The layers of DESIGN.md, from the bottom: traces/ (the store), agents/ (the runtime),
policies/ (the learning loop), reviews/ and the pages. Imports point down only, whether at
module level or inside a function, in every module of the four apps but their migrations
(management commands included: a command that spans layers lives in the highest app it
uses). docs/architecture.md says how the lower layers hear from the upper ones."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"traces": 0, "agents": 1, "policies": 2, "reviews": 3}
# Each layer may import the layers below it (and itself), nothing above.
ALLOWED = {
    "traces": set(),
    "agents": {"traces"},
    "policies": {"traces", "agents"},
    "reviews": {"traces", "agents", "policies"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def app_modules() -> dict[str, Path]:
    """Every module of the four apps, by dotted name, migrations and tests excluded."""
    found: dict[str, Path] = {}
    for app in LAYERS:
        for path in sorted((ROOT / app).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts or "tests" in parts:
                continue
            found[_module_name(path)] = path
    return found


def imports_of(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, module-level or nested in a
    function; ``from a import b`` names the module ``a.b`` when b is a module itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    project = app_modules_cached()
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.append((node.lineno, submodule if submodule in project else module))
    return found


_CACHE: dict[str, Path] = {}


def app_modules_cached() -> dict[str, Path]:
    if not _CACHE:
        _CACHE.update(app_modules())
    return _CACHE


def upward_imports() -> list[tuple[str, int, str]]:
    offending: list[tuple[str, int, str]] = []
    for name, path in app_modules_cached().items():
        app = name.split(".")[0]
        for line, module in imports_of(name, path):
            top = module.split(".")[0]
            if top in LAYERS and top != app and top not in ALLOWED[app]:
                offending.append((str(path.relative_to(ROOT)), line, module))
    return sorted(set(offending))


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (the nearest enclosing project module when
    the import names a class or function)."""
    project = app_modules_cached()
    graph: dict[str, set[str]] = {name: set() for name in project}
    for name, path in project.items():
        for _, module in imports_of(name, path):
            while module and module not in project:
                module = module.rpartition(".")[0]
            if module and module != name:
                graph[name].add(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_imports_point_down_only() -> None:
    offending = upward_imports()
    listing = "\n".join(f"  {file}:{line} imports {module}" for file, line, module in offending)
    assert not offending, f"imports that point up a layer (DESIGN.md):\n{listing}"


def test_the_check_sees_nested_and_relative_imports() -> None:
    # The walk must find an import inside a function, and resolve a relative one.
    names = {module for _, module in imports_of("agents.hooks", ROOT / "agents/hooks.py")}
    assert "agents.policy_runtime" in names
    assert any(
        module == "policies.selectors"
        for _, module in imports_of("policies.apps", ROOT / "policies/apps.py")
    )


def test_no_import_cycle_across_apps() -> None:
    graph = import_graph()
    across = [c for c in cycles(graph) if len({m.split(".")[0] for m in c}) > 1]
    assert not across, f"import cycles across apps: {across}"


# Circles inside one app, through imports nested in functions (each app's services, tasks and
# selectors call one another). They may shrink; a new one, or a bigger one, fails.
KNOWN_CYCLES_WITHIN_AN_APP = [
    {"agents.services", "agents.sink", "agents.tasks"},
    {
        "policies.documents",
        "policies.experiments",
        "policies.reflexion",
        "policies.replay",
        "policies.rollouts",
        "policies.selectors",
        "policies.services",
        "policies.tasks",
    },
]


def test_no_new_import_cycle_within_an_app() -> None:
    new = [
        cycle
        for cycle in cycles(import_graph())
        if not any(set(cycle) <= known for known in KNOWN_CYCLES_WITHIN_AN_APP)
    ]
    assert not new, f"new import cycles: {new}"


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_runtime_does_not_reach_the_sandbox() -> None:
    # The sandbox is an external API: the runtime calls it over HTTP only (the demo's seeding
    # command fills the sandbox's tables, and is not the runtime).
    for name, path in app_modules_cached().items():
        if name.split(".")[0] != "agents" or ".management." in name:
            continue
        for line, module in imports_of(name, path):
            assert module.split(".")[0] != "sandbox", f"{path}:{line} imports {module}"
