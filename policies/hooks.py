"""What the learning loop reads from the review queue, which sits above it.

The loop stops building strategies for an error signature while a person holds it, and a
strategy that waited for a rollout is published under the name of whoever approved it. Both
facts live in ``reviews`` (its items and its audit log), which ``policies`` may not import
(DESIGN.md layers); ``reviews`` registers a ``ReviewRecords`` when the app registry is ready
(``reviews.apps``). Unregistered (no review app installed), no signature is held and no
approval is on record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class SignatureHold:
    """A person holds the signature (an open negative-feedback item), and when a person
    last decided one for it (the count of failed strategies restarts there)."""

    held: bool
    decided_at: datetime | None


@dataclass(frozen=True)
class Approval:
    actor: Any
    author_kind: str


class ReviewRecords(Protocol):
    def signature_hold(self, signature: str) -> SignatureHold: ...

    def approval_last(self, target: str) -> Approval | None: ...


class _NoReviews:
    def signature_hold(self, signature: str) -> SignatureHold:
        return SignatureHold(held=False, decided_at=None)

    def approval_last(self, target: str) -> Approval | None:
        return None


_records: ReviewRecords = _NoReviews()


def review_records_register(records: ReviewRecords) -> None:
    """Set where the learning loop reads review state from (the last registration wins)."""
    global _records
    _records = records


def review_records() -> ReviewRecords:
    return _records
