"""Writes of the sandbox shop: return requests, fault rules and contract drifts."""

import logging
import random
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from sandbox.clock import shop_now
from sandbox.faults import fault_cache_clear
from sandbox.models import ContractDrift, FaultRule, Order, ReturnRequest
from sandbox.selectors import order_return_eligibility

logger = logging.getLogger(__name__)

FAULTRULE_SETTABLE_FIELDS = frozenset(
    (
        "enabled",
        *FaultRule.RATE_FIELDS,
        "timeout_seconds",
        "slow_ms",
        "drift",
        "drift_from",
        "drift_to",
        "seed",
    )
)

# Return ids of API-created returns only need to be unique, not reproducible.
_return_id_rng = random.SystemRandom()


class ReturnNotAllowed(Exception):
    """The order cannot be returned (policy), or the request names SKUs not on the order."""

    def __init__(self, detail: str, *, code: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code


def return_request_create(*, order: Order, reason: str, skus: list[str] | None) -> ReturnRequest:
    """Open a return for an eligible delivered order, for all of it or the listed SKUs."""
    with transaction.atomic():
        # Lock the order so two concurrent requests cannot both pass the eligibility check.
        order = Order.objects.select_for_update().get(pk=order.pk)
        eligibility = order_return_eligibility(order=order)
        if not eligibility.eligible:
            raise ReturnNotAllowed(eligibility.reason, code="not_eligible")
        items = list(order.items.select_related("sku"))
        on_order = {item.sku.sku: item for item in items}
        wanted = sorted(set(skus)) if skus else sorted(on_order)
        missing = [code for code in wanted if code not in on_order]
        if missing:
            raise ReturnNotAllowed(
                f"sku {missing[0]!r} is not part of order {order.order_id}",
                code="invalid_parameter",
            )
        refund = sum(
            (on_order[code].unit_price * on_order[code].quantity for code in wanted), Decimal("0")
        )
        for _attempt in range(5):
            return_id = f"R{_return_id_rng.randrange(10**7, 10**8):08d}"
            try:
                with transaction.atomic():
                    created = ReturnRequest.objects.create(
                        return_id=return_id,
                        order=order,
                        status=ReturnRequest.Status.REQUESTED,
                        reason=reason,
                        skus=wanted,
                        created_at=shop_now(),
                        refund_amount=refund,
                    )
                break
            except IntegrityError:
                continue
        else:
            raise RuntimeError("could not allocate a unique return id")
    logger.info(
        "sandbox return requested",
        extra={"return_id": created.return_id, "order_id": order.order_id},
    )
    return created


def faultrule_set(*, endpoint: str, replace: bool = False, **fields: Any) -> FaultRule:
    """Create or update the fault rule of ``endpoint``.

    With ``replace`` the fields not given fall back to their defaults (PUT); otherwise only
    the given fields change (PATCH). Raises ``ValidationError`` for unknown fields, invalid
    values or rates that sum above 1.
    """
    if endpoint not in FaultRule.Endpoint.values:
        raise ValidationError({"endpoint": f"unknown endpoint {endpoint!r}"})
    unknown = sorted(set(fields) - FAULTRULE_SETTABLE_FIELDS)
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    with transaction.atomic():
        existing = FaultRule.objects.select_for_update().filter(endpoint=endpoint).first()
        if existing is None or replace:
            rule = FaultRule(endpoint=endpoint)
            if existing is not None:
                rule.pk = existing.pk
                rule._state.adding = False
        else:
            rule = existing
        for name, value in fields.items():
            setattr(rule, name, value)
        rule.full_clean()
        rule.save()
        # Other threads of this process must not keep serving the old rule until the TTL.
        transaction.on_commit(fault_cache_clear)
    fault_cache_clear()
    logger.info("sandbox fault rule set", extra={"endpoint": endpoint, "fields": sorted(fields)})
    return rule


def faultrule_clear(*, endpoint: str | None = None) -> int:
    """Delete the rule of ``endpoint`` (or every rule); returns how many were deleted."""
    with transaction.atomic():
        rules = FaultRule.objects.all()
        if endpoint is not None:
            rules = rules.filter(endpoint=endpoint)
        deleted, _ = rules.delete()
        transaction.on_commit(fault_cache_clear)
    fault_cache_clear()
    logger.info("sandbox fault rules cleared", extra={"endpoint": endpoint, "deleted": deleted})
    return deleted


DRIFT_SETTABLE_FIELDS = frozenset(
    (
        "endpoint",
        "kind",
        "enabled",
        "param",
        "old",
        "new",
        "values",
        "pattern",
        "layout",
        "retry_after_s",
        "note",
    )
)


def contractdrift_set(*, drift_id: int | None = None, **fields: Any) -> ContractDrift:
    """Create a drift (no ``drift_id``) or change the given fields of one.

    Raises ``ValidationError`` for unknown fields or invalid values, and
    ``ContractDrift.DoesNotExist`` for an unknown id.
    """
    unknown = sorted(set(fields) - DRIFT_SETTABLE_FIELDS)
    if unknown:
        raise ValidationError({name: "unknown field" for name in unknown})
    with transaction.atomic():
        if drift_id is None:
            drift = ContractDrift()
        else:
            drift = ContractDrift.objects.select_for_update().get(pk=drift_id)
        for name, value in fields.items():
            setattr(drift, name, value)
        drift.full_clean()
        drift.save()
        transaction.on_commit(fault_cache_clear)
    fault_cache_clear()
    logger.info(
        "sandbox contract drift set",
        extra={"drift_id": drift.pk, "endpoint": drift.endpoint, "kind": drift.kind},
    )
    return drift


def contractdrift_delete(*, drift_id: int | None = None) -> int:
    """Delete one drift (or every drift); returns how many were deleted."""
    with transaction.atomic():
        drifts = ContractDrift.objects.all()
        if drift_id is not None:
            drifts = drifts.filter(pk=drift_id)
        deleted, _ = drifts.delete()
        transaction.on_commit(fault_cache_clear)
    fault_cache_clear()
    logger.info("sandbox contract drifts deleted", extra={"drift_id": drift_id, "deleted": deleted})
    return deleted
