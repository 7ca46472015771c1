"""Run-time fault injection for the sandbox endpoints.

Every sandbox view is wrapped by ``inject_faults(<endpoint>)``. The wrapper reads the
endpoint's ``FaultRule`` from a per-process snapshot that is at most ``RULE_CACHE_SECONDS``
old (so a change made in another process takes effect within a second), draws one uniform
number per request and either answers with a fault or calls the view, then applies drift.
"""

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from sandbox.drifts import (
    DriftPlan,
    drift_memory_clear,
    drifts_apply_request,
    drifts_apply_response,
)
from sandbox.models import ContractDrift, FaultRule

logger = logging.getLogger(__name__)

RULE_CACHE_SECONDS = 1.0
RETRY_AFTER_SECONDS = 1
FAULT_HEADER = "X-Sandbox-Fault"
DRIFT_HEADER = "X-Sandbox-Drift"

# Bucket order of the single draw; must match FaultRule.RATE_FIELDS.
FAULT_KINDS = ("404", "500", "401", "429", "timeout", "slow")

View = Callable[..., HttpResponse]


@dataclass(frozen=True)
class FaultPlan:
    """An immutable snapshot of an enabled FaultRule, safe to share between threads."""

    endpoint: str
    rates: tuple[float, ...]
    timeout_seconds: float
    slow_ms: int
    drift: str
    drift_from: str
    drift_to: str
    seed: int | None
    updated_at: datetime

    @classmethod
    def from_rule(cls, rule: FaultRule) -> "FaultPlan":
        return cls(
            endpoint=rule.endpoint,
            rates=rule.rates,
            timeout_seconds=rule.timeout_seconds,
            slow_ms=rule.slow_ms,
            drift=rule.drift,
            drift_from=rule.drift_from,
            drift_to=rule.drift_to,
            seed=rule.seed,
            updated_at=rule.updated_at,
        )

    @property
    def rng_key(self) -> tuple[str, int | None, datetime]:
        # A re-saved rule restarts its seeded sequence, which makes runs reproducible.
        return (self.endpoint, self.seed, self.updated_at)


class _RuleCache:
    """Per-process snapshot of enabled rules plus one random stream per seeded rule."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[str, FaultPlan] = {}
        self._drifts: dict[str, tuple[DriftPlan, ...]] = {}
        self._loaded_at: float | None = None
        self._seeded: dict[tuple[str, int | None, datetime], random.Random] = {}
        self._unseeded = random.Random()

    def clear(self) -> None:
        with self._lock:
            self._loaded_at = None

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._loaded_at is None or now - self._loaded_at >= RULE_CACHE_SECONDS:
            self._plans = {
                rule.endpoint: FaultPlan.from_rule(rule)
                for rule in FaultRule.objects.filter(enabled=True)
            }
            drifts: dict[str, list[DriftPlan]] = {}
            for row in ContractDrift.objects.filter(enabled=True).order_by("id"):
                drifts.setdefault(row.endpoint, []).append(DriftPlan.from_row(row))
            self._drifts = {endpoint: tuple(plans) for endpoint, plans in drifts.items()}
            self._loaded_at = now
            live = {plan.rng_key for plan in self._plans.values()}
            self._seeded = {key: rng for key, rng in self._seeded.items() if key in live}

    def plan_for(self, endpoint: str) -> FaultPlan | None:
        with self._lock:
            self._refresh()
            return self._plans.get(endpoint)

    def drifts_for(self, endpoint: str) -> tuple[DriftPlan, ...]:
        with self._lock:
            self._refresh()
            return self._drifts.get(endpoint, ())

    def draw(self, plan: FaultPlan) -> float:
        with self._lock:
            if plan.seed is None:
                return self._unseeded.random()
            rng = self._seeded.get(plan.rng_key)
            if rng is None:
                rng = self._seeded[plan.rng_key] = random.Random(plan.seed)
            return rng.random()


_cache = _RuleCache()


def fault_cache_clear() -> None:
    """Forget the cached rules and drifts so the next request reads them from the database."""
    _cache.clear()


def drift_state_reset() -> None:
    """Forget cached drifts and every wait a drift asked for (a fresh upstream)."""
    _cache.clear()
    drift_memory_clear()


def _hold(seconds: float) -> None:
    """Hold the request like a hung upstream, without holding a database connection: a
    held request must not keep a connection open (a test database could not be dropped
    under it). The view, if it runs afterwards, connects again."""
    if not connection.in_atomic_block:
        connection.close()
    time.sleep(seconds)


def fault_kind_for_draw(*, rates: tuple[float, ...], draw: float) -> str | None:
    """Map a uniform draw in [0, 1) onto the cumulative rate buckets."""
    upper = 0.0
    for kind, rate in zip(FAULT_KINDS, rates, strict=True):
        upper += rate
        if draw < upper:
            return kind
    return None


def _fault_response(kind: str, plan: FaultPlan) -> HttpResponse:
    if kind == "404":
        response = JsonResponse(
            {"error": "not_found", "detail": "the requested resource was not found"}, status=404
        )
    elif kind == "500":
        response = JsonResponse(
            {"error": "internal_error", "detail": "upstream database unavailable"}, status=500
        )
    elif kind == "401":
        response = JsonResponse(
            {"error": "unauthorized", "detail": "invalid or expired token"}, status=401
        )
    elif kind == "429":
        response = JsonResponse(
            {
                "error": "rate_limited",
                "detail": f"too many requests, retry after {RETRY_AFTER_SECONDS} s",
                "retry_after": RETRY_AFTER_SECONDS,
            },
            status=429,
        )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    else:
        # The injected fault *is* a hung upstream: holding the request is the point.
        _hold(plan.timeout_seconds)
        response = JsonResponse(
            {
                "error": "timeout",
                "detail": f"upstream did not answer within {plan.timeout_seconds:g} s",
            },
            status=504,
        )
    response[FAULT_HEADER] = kind
    return response


def _rename_top_level_field(response: HttpResponse, *, old: str, new: str) -> HttpResponse:
    if not 200 <= response.status_code < 300 or response.get("Content-Type") != "application/json":
        return response
    body = json.loads(response.content)
    if not isinstance(body, dict) or old not in body:
        return response
    renamed = {(new if key == old else key): value for key, value in body.items()}
    drifted = JsonResponse(renamed, status=response.status_code)
    for header, value in response.items():
        if header.lower() not in ("content-type", "content-length"):
            drifted[header] = value
    return drifted


def request_requires_int_id(request: HttpRequest) -> bool:
    """True when the endpoint's rule currently demands bare integer order ids."""
    return getattr(request, "sandbox_drift", FaultRule.Drift.NONE) == FaultRule.Drift.REQUIRE_INT_ID


def inject_faults(endpoint: str) -> Callable[[View], View]:
    """Wrap a view so the FaultRule of ``endpoint`` applies to each of its requests."""
    if endpoint not in FaultRule.Endpoint.values:
        raise ValueError(f"unknown sandbox endpoint {endpoint!r}")

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            plan = _cache.plan_for(endpoint)
            drifts = _cache.drifts_for(endpoint)
            if plan is None and not drifts:
                return view(request, *args, **kwargs)
            if drifts:
                refused = drifts_apply_request(drifts, request, kwargs)
                if refused is not None:
                    logger.info(
                        "sandbox drift refused a request",
                        extra={"endpoint": endpoint, "status": refused.status_code},
                    )
                    return refused
            if plan is None:
                return drifts_apply_response(drifts, view(request, *args, **kwargs))
            kind = fault_kind_for_draw(rates=plan.rates, draw=_cache.draw(plan))
            if kind is not None:
                logger.info("sandbox fault fired", extra={"endpoint": endpoint, "kind": kind})
            if kind is not None and kind != "slow":
                return _fault_response(kind, plan)
            if kind == "slow":
                # An injected slow answer: the delay is the fault being simulated.
                _hold(plan.slow_ms / 1000)
            request.sandbox_drift = plan.drift  # type: ignore[attr-defined]
            response = drifts_apply_response(drifts, view(request, *args, **kwargs))
            if plan.drift == FaultRule.Drift.RENAME_FIELD:
                response = _rename_top_level_field(response, old=plan.drift_from, new=plan.drift_to)
            if plan.drift != FaultRule.Drift.NONE:
                response[DRIFT_HEADER] = plan.drift
            if kind == "slow":
                response[FAULT_HEADER] = "slow"
            return response

        return wrapped

    return decorator
