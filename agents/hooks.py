"""What the layers above hand the runtime (DESIGN.md: the runtime is handed a policy object
and knows nothing of how policies are learned).

The learning loop registers, when the app registry is ready (``policies.apps``):

- the **policy resolver**: the ``RuntimePolicy`` a run executes (the version its bucket
  resolves to, an open rollout's canary, an A/B experiment's arm);
- receivers of ``agents.signals.run_ended``, sent after a run that may be learned from ends;
- **periodic jobs**, which the embedded worker runs on its loop (``agents.inprocess``;
  Celery beat runs them in the production shape).

Unregistered (no learning loop installed), runs execute with the empty policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.policy_runtime import EMPTY_POLICY, RuntimePolicy

if TYPE_CHECKING:
    from traces.models import Trace

PolicyResolver = Callable[["Trace"], RuntimePolicy]


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    run: Callable[[], object]
    interval_seconds: float


_resolver: PolicyResolver | None = None
_periodic: dict[str, PeriodicJob] = {}


def policy_resolver_register(resolver: PolicyResolver) -> None:
    """Set the function that picks each run's policy (the last registration wins)."""
    global _resolver
    _resolver = resolver


def policy_for_run(trace: Trace) -> RuntimePolicy:
    """The policy ``trace``'s run executes: the registered resolver's, else the empty one."""
    return _resolver(trace) if _resolver is not None else EMPTY_POLICY


def periodic_job_register(name: str, run: Callable[[], object], *, interval_seconds: float) -> None:
    """Have the embedded worker call ``run`` every ``interval_seconds`` (one job per name)."""
    _periodic[name] = PeriodicJob(name=name, run=run, interval_seconds=interval_seconds)


def periodic_jobs() -> list[PeriodicJob]:
    return list(_periodic.values())
