"""Failed sign-ins are limited, per user name and per client address.

Every way in that checks a password (the login page, HTTP Basic on the API, the admin)
goes through ``django.contrib.auth.authenticate``, so the limit lives in an authentication
backend: after ``LOGIN_FAILURES_PER_USER`` failures for one user name from one client
address, ``LOGIN_FAILURES_PER_USER_ALL_ADDRESSES`` for one user name from all of them, or
``LOGIN_FAILURES_PER_ADDRESS`` from one client address, within ``LOGIN_FAILURE_WINDOW_S``,
further attempts are refused without checking the password, until the window has passed
since the last failure. That stops online guessing, and the password hash (about a second
of CPU for 1,000,000 PBKDF2 rounds) is not paid for refused attempts. A successful sign-in
clears its user name's count at that address. The counts live in the default cache (Redis in the
production shape, shared by every process; the process's memory when embedded).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver

logger = logging.getLogger(__name__)


def _key(kind: str, value: str) -> str:
    # Hashed: a user name is customer-typed text, and cache keys have a length limit.
    digest = hashlib.sha256(value.strip().lower().encode()).hexdigest()[:32]
    return f"{settings.LOGIN_FAILURE_CACHE_PREFIX}:{kind}:{digest}"


def _address(request: Any) -> str:
    return str(getattr(request, "META", {}).get("REMOTE_ADDR") or "") if request else ""


def _counts(username: str, address: str) -> list[tuple[str, int]]:
    """The counters a sign-in is checked against and counted in, with their limits.

    A user name's failures count per address: anyone who knows the name ``admin`` could
    otherwise lock its owner out from anywhere, for ever, ten guesses every window. A
    guesser spread over many addresses still meets the name's limit over all addresses
    (``LOGIN_FAILURES_PER_USER_ALL_ADDRESSES``), and each address its own limit."""
    keys = []
    if username:
        keys.append((_key("user", f"{username}\0{address}"), settings.LOGIN_FAILURES_PER_USER))
        keys.append((_key("user-any", username), settings.LOGIN_FAILURES_PER_USER_ALL_ADDRESSES))
    if address:
        keys.append((_key("address", address), settings.LOGIN_FAILURES_PER_ADDRESS))
    return keys


def login_locked(username: str, address: str) -> bool:
    """Whether sign-ins for ``username``, or from ``address``, are refused just now."""
    keys = _counts(username, address)
    found = cache.get_many([key for key, _ in keys])
    return any(int(found.get(key) or 0) >= limit for key, limit in keys)


class LimitedModelBackend(ModelBackend):
    """Django's backend, refusing (``PermissionDenied``: Django stops there and reports a
    failure) while the user name or the address is locked."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        name = username if username is not None else kwargs.get("email", "")
        if settings.LOGIN_FAILURE_WINDOW_S > 0 and login_locked(str(name or ""), _address(request)):
            logger.warning("login.locked", extra={"address": _address(request)})
            raise PermissionDenied("too many failed sign-ins; try again later")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and name:
            cache.delete(_key("user", f"{name}\0{_address(request)}"))
        return user


@receiver(user_login_failed)
def _failure_count(sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any) -> None:
    if settings.LOGIN_FAILURE_WINDOW_S <= 0:
        return
    username = str(credentials.get("username") or credentials.get("email") or "")
    for key, _limit in _counts(username, _address(request)):
        # add() starts the window; incr() counts within it (both atomic on Redis).
        if not cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_S):
            try:
                cache.incr(key)
            except ValueError:  # expired between the two calls
                cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_S)
            cache.touch(key, timeout=settings.LOGIN_FAILURE_WINDOW_S)


class LimitedAuthenticationForm(AuthenticationForm):
    """The login page's form: while locked, it says so instead of "wrong password"."""

    locked_message = ""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        if settings.LOGIN_FAILURE_WINDOW_S > 0 and login_locked(username, _address(self.request)):
            minutes = max(1, settings.LOGIN_FAILURE_WINDOW_S // 60)
            self.locked_message = f"Too many failed sign-ins. Try again in {minutes} minutes."
            raise forms.ValidationError(self.locked_message, code="locked")
        return super().clean()
