"""Logging filters wired up in ``settings.LOGGING``."""

from __future__ import annotations

import logging


class NoTracebackForRefusals(logging.Filter):
    """Keep django.request's one-line warning for a 4xx but drop its traceback.

    Django attaches the exception to the log record of every PermissionDenied; a refused
    request is expected behaviour (a role opening a page it may not use), not a fault.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
