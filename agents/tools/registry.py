"""Code-side tool registration.

Tools live as rows admins manage (``agents.models.Tool``). Code declares tools too: HTTP
tools as ``ToolDefinition`` data (see ``tool_catalog``) and in-process Python tools with
the ``@register_tool`` decorator. ``tools_sync`` upserts both into rows; the executor
only ever runs what the rows allow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

PythonToolFunc = Callable[..., Awaitable[Any] | Any]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as declared in code."""

    name: str
    description: str
    params_schema: dict[str, Any]
    endpoint: str = ""
    method: str = "GET"
    timeout_seconds: float | None = None
    key_fields: list[str] = field(default_factory=list)
    # Argument name -> query-string name, when the API spells it differently.
    query_map: dict[str, str] = field(default_factory=dict)
    adapters: list[str] = field(default_factory=lambda: ["trim_whitespace", "enum_normalise"])
    func: PythonToolFunc | None = None

    @property
    def kind(self) -> str:
        return "python" if self.func is not None else "http"


_PYTHON_TOOLS: dict[str, ToolDefinition] = {}


def register_tool(
    *, name: str, description: str, params_schema: dict[str, Any], timeout_seconds: float = 3.0
) -> Callable[[PythonToolFunc], PythonToolFunc]:
    """Register an in-process tool; its row is created by ``tools_sync`` (disabled for no agent)."""

    def decorator(func: PythonToolFunc) -> PythonToolFunc:
        _PYTHON_TOOLS[name] = ToolDefinition(
            name=name,
            description=description,
            params_schema=params_schema,
            timeout_seconds=timeout_seconds,
            func=func,
        )
        return func

    return decorator


def unregister_tool(name: str) -> ToolDefinition | None:
    """Forget an in-process tool; returns its definition, None if there was none.

    Tests register tools of their own for one test and take them away again, so that a
    tool of one test never shows up in another test's prompt.
    """
    return _PYTHON_TOOLS.pop(name, None)


def registered_python_tool(name: str) -> ToolDefinition | None:
    return _PYTHON_TOOLS.get(name)


def registered_python_tools() -> list[ToolDefinition]:
    return list(_PYTHON_TOOLS.values())
