"""Reads of the policy tree, including the compiled policy every run applies."""

from __future__ import annotations

import threading
import time
from datetime import datetime

from django.db.models import QuerySet

from agents.policy_runtime import EMPTY_POLICY, RuntimePolicy
from policies.branches import runtime_policy_compile
from policies.models import PolicyVersion, Strategy

# Strategies a version lists that the runtime still applies (deprecated/rejected stop).
APPLIED_STATUSES = (Strategy.Status.ACTIVE, Strategy.Status.APPROVED, Strategy.Status.IN_REVIEW)

# A new version or a deprecation must reach every worker within a second: the compiled
# policy is cached per process for at most this long.
_CACHE_SECONDS = 1.0
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, RuntimePolicy]] = {}


def policy_version_active() -> PolicyVersion | None:
    return PolicyVersion.objects.filter(is_active=True).first()


def runtime_policy_build(version: PolicyVersion | None) -> RuntimePolicy:
    if version is None:
        return EMPTY_POLICY
    rows = version.strategies.filter(status__in=APPLIED_STATUSES).values_list(
        "id", "kind", "branch", "error_type"
    )
    return runtime_policy_compile(version=version.label, strategies=list(rows))


def runtime_policy_for_run(*, bucket: int | None = None) -> RuntimePolicy:
    """The policy a run applies: the active version (canary buckets arrive with rollouts)."""
    key = "active"
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(key)
        if cached and now - cached[0] < _CACHE_SECONDS:
            return cached[1]
    policy = runtime_policy_build(policy_version_active())
    with _cache_lock:
        _cache[key] = (now, policy)
    return policy


def runtime_policy_cache_clear() -> None:
    with _cache_lock:
        _cache.clear()


def strategies_citable(*, error_type: str, limit: int = 3) -> QuerySet[Strategy]:
    """Past strategies for this error type that Reflexion may cite (confidence >= 0.5)."""
    return (
        Strategy.objects.filter(error_type=error_type, confidence__gte=0.5)
        .exclude(status__in=[Strategy.Status.REJECTED, Strategy.Status.DEPRECATED])
        .prefetch_related("source_traces")
        .order_by("-confidence", "-updated_at")[:limit]
    )


def strategy_approvals_by_error_type(*, error_types: list[str]) -> dict[str, list[datetime]]:
    """When strategies for each error type were approved: the creation of the version each
    one introduced (a reviewer's approval and an auto-merge both publish one)."""
    approvals: dict[str, list[datetime]] = {}
    if not error_types:
        return approvals
    rows = (
        Strategy.objects.filter(error_type__in=error_types, introduced_in__isnull=False)
        .order_by()
        .values_list("error_type", "introduced_in__created_at")
    )
    for error_type, approved_at in rows:
        approvals.setdefault(error_type, []).append(approved_at)
    return approvals
