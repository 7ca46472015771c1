"""Events the learning loop announces to the layers above it.

The review queue and the audit log belong to ``reviews``, which sits above ``policies``
(DESIGN.md: review items and decisions depend on policies, never the reverse). The learning
loop therefore never writes their rows itself: it sends these signals, and ``reviews``
connects its receivers when the app registry is ready (``reviews.apps``). Every signal is
sent inside the transaction of the change it describes, and receivers run in the sender's
thread, so a failing receiver rolls the change back, as a direct write did.
"""

from __future__ import annotations

from django.dispatch import Signal

# An audit row: actor (a user or None), actor_kind ("user", "system", "auto_merge", ...),
# action (e.g. "strategy.approve"), target (a label) and details (a JSON-serialisable dict,
# already redacted by the sender).
audit_event = Signal()

# A person must look at something: strategy (a Strategy or None), error_signature (str, may
# be empty), reason (one of REVIEW_REASONS) and detail (str).
review_requested = Signal()
REVIEW_LOW_CONFIDENCE = "low_confidence"
REVIEW_CONSECUTIVE_FAILURES = "consecutive_failures"
REVIEW_NEGATIVE_FEEDBACK = "negative_feedback"
REVIEW_REASONS = (REVIEW_LOW_CONFIDENCE, REVIEW_CONSECUTIVE_FAILURES, REVIEW_NEGATIVE_FEEDBACK)

# The automation published ``strategy`` without a reviewer (auto-merge): the review items
# still undecided for it are closed, and audited with ``details``.
strategy_auto_merged = Signal()

# New evidence (``trace_id``) arrived for ``strategy``: items a reviewer sent back for more
# evidence go back to the queue.
strategy_evidence_added = Signal()
