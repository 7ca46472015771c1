"""Audit rows for changes announced by the lower layers (which may not import ``reviews``)."""

from __future__ import annotations

from typing import Any

from reviews.models import AuditLog


def tool_admin_changed_audit(
    sender: Any, *, actor: Any, action: str, target: str, details: dict[str, Any], **_: Any
) -> None:
    """Write the audit row of an admin's change to the tool whitelist."""
    AuditLog.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_kind="user" if getattr(actor, "pk", None) else "system",
        action=action,
        target=target,
        details=details,
    )
