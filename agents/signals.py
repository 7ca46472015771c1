"""Events the agents app announces to the layers above it.

The audit log belongs to ``reviews``, a layer above this one, so the runtime cannot write
its rows itself without an upward import. Admin changes to the tool whitelist are sent as
``tool_admin_changed`` instead; ``reviews`` connects its receiver when the app registry is
ready (``reviews.apps``). The signal is sent inside the change's transaction, so a failing
audit write rolls the change back: a whitelist change is audited or it does not happen.
"""

from __future__ import annotations

from django.dispatch import Signal

# Sent with keyword arguments: actor (a user), action (e.g. "tool.disable"), target (the
# tool's name) and details (a JSON-serialisable dict).
tool_admin_changed = Signal()

# Same keyword arguments, for customer memory: action "memory.delete", target the customer id.
customer_memory_changed = Signal()

# Sent with ``trace_id`` after a run ends (not for replays): the learning loop scores the
# strategies it applied and queues Reflexion if it failed (``policies.apps``). Receivers run
# in the caller's thread, after the trace is finished. ``trace``, when given, is the finished
# row as ``trace_finish`` saved it (receivers need not read it again), marked as owed to the
# learning loop (``Trace.learning``). It is sent with ``send_robust``: a receiver that fails
# leaves the mark for its own retry and does not fail the run.
run_ended = Signal()
