"""The sandbox shop's frozen "now".

Generated data and every time-dependent answer (active promotions, return windows) are
anchored here rather than on the wall clock, so a seed reproduces the same world and the
same API answers on any day the benchmark is run.
"""

from datetime import UTC, datetime

SHOP_ANCHOR = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

RETURN_WINDOW_DAYS = 30


def shop_now() -> datetime:
    """Return the fixed instant the sandbox shop treats as the present."""
    return SHOP_ANCHOR
