"""``Idempotency-Key`` on the sandbox's side-effecting endpoints, as payment and commerce
APIs do it (the IETF httpapi draft "The Idempotency-Key HTTP Header Field"):

- the first request with a key runs and, when it succeeds (2xx), its response is kept;
- the same request again (same key, method, path and body) gets that response back, with
  ``Idempotent-Replayed: true``, and changes nothing; ``replays`` counts such repeats;
- the key with a different request is refused with 422, and a request with a key whose
  first request is still running with 409 (retry later);
- a request that fails (4xx, 5xx, an injected fault) keeps nothing, so a retry with the
  same key runs again. A claim older than ``STALE_CLAIM_S`` (its process died) is taken over.

A request without the header runs as before: the header is the client's promise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from sandbox.models import IdempotentRequest

HEADER = "Idempotency-Key"
KEY_MAX_LENGTH = 255
STALE_CLAIM_S = 60

View = Callable[..., HttpResponse]


def _refusal(status: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


def _fingerprint(request: HttpRequest) -> str:
    """The request's method, path and body; a JSON body by its content, whatever the order
    of its keys (a client replaying a stored call may serialise it differently)."""
    body = request.body
    with contextlib.suppress(ValueError, RecursionError):  # not JSON: the bytes as they are
        body = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256()
    for part in (request.method or "", request.get_full_path()):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(body)
    return digest.hexdigest()


def _claim(key: str, endpoint: str, fingerprint: str) -> IdempotentRequest | HttpResponse | None:
    """Claim ``key`` for this request (None), or answer without running it."""
    try:
        with transaction.atomic():
            IdempotentRequest.objects.create(key=key, endpoint=endpoint, fingerprint=fingerprint)
        return None
    except IntegrityError:
        pass
    with transaction.atomic():
        held = IdempotentRequest.objects.select_for_update().filter(key=key).first()
        if held is None:  # given back between the two statements: claim it now
            IdempotentRequest.objects.create(key=key, endpoint=endpoint, fingerprint=fingerprint)
            return None
        if held.fingerprint != fingerprint or held.endpoint != endpoint:
            return _refusal(
                422,
                "idempotency_key_reused",
                f"{HEADER} {key!r} was used for a different request",
            )
        if held.status:
            held.replays += 1
            held.save(update_fields=["replays", "updated_at"])
            return held
        if held.updated_at > timezone.now() - timedelta(seconds=STALE_CLAIM_S):
            return _refusal(
                409,
                "idempotency_key_in_use",
                f"a request with {HEADER} {key!r} is still running: retry later",
            )
        held.save(update_fields=["updated_at"])  # its first request died: take it over
        return None


def idempotent(endpoint: str) -> Callable[[View], View]:
    """Honour ``Idempotency-Key`` on a side-effecting view (see the module docstring)."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            key = request.headers.get(HEADER, "").strip()
            if not key:
                return view(request, *args, **kwargs)
            if len(key) > KEY_MAX_LENGTH or not key.isprintable():
                return _refusal(
                    400,
                    "invalid_idempotency_key",
                    f"{HEADER} must be 1-{KEY_MAX_LENGTH} printable characters",
                )
            claimed = _claim(key, endpoint, _fingerprint(request))
            if isinstance(claimed, IdempotentRequest):
                replay = HttpResponse(
                    bytes(claimed.body), status=claimed.status, content_type=claimed.content_type
                )
                replay["Idempotent-Replayed"] = "true"
                return replay
            if claimed is not None:
                return claimed
            try:
                response = view(request, *args, **kwargs)
            except BaseException:
                IdempotentRequest.objects.filter(key=key, status=0).delete()
                raise
            if 200 <= response.status_code < 300:
                IdempotentRequest.objects.filter(key=key).update(
                    status=response.status_code,
                    body=response.content,
                    content_type=response.get("Content-Type", ""),
                    updated_at=timezone.now(),
                )
            else:  # nothing happened: a retry with this key runs again
                IdempotentRequest.objects.filter(key=key, status=0).delete()
            return response

        return wrapper

    return decorator
