"""Tool credentials, referenced by environment-variable name and resolved at call time.

A Tool row stores how to send a credential and which variable holds it, e.g.
``{"type": "bearer", "env": "SHOP_API_KEY"}`` or
``{"type": "header", "name": "X-Api-Key", "env": "SHOP_API_KEY"}`` or
``{"type": "query", "name": "api_key", "env": "SHOP_API_KEY"}``; the secret itself lives
only in the worker's environment. The executor reads it for each call and registers it
with the redactor, so that it cannot reach a Step row or a log line even when the API
echoes it back.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from traces.redaction import secret_register

AUTH_TYPES = ("bearer", "header", "query")
AUTH_KEYS = frozenset({"type", "name", "env"})
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# The installation's own settings (secret key, database and broker URLs with their
# passwords, the LLM key) and libpq's: whoever may edit a tool must not be able to send
# them to an endpoint, so a tool's credential needs a variable of its own.
RESERVED_ENV_PREFIXES = ("DJANGO_", "DATABASE_", "DB_", "REDIS_", "CELERY_", "LLM_", "PG")
# RFC 9110 token characters: what a header name may contain.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
QUERY_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]]{1,128}$")


class ToolAuthInvalid(ValueError):
    """A tool's ``auth`` setting is malformed or would store a secret in the row."""


class CredentialMissing(Exception):
    """The environment variable a tool's credential comes from is unset or empty."""

    def __init__(self, env: str) -> None:
        super().__init__(f"environment variable {env} is not set on this worker")
        self.env = env


@dataclass(frozen=True)
class ToolAuth:
    """How one tool authenticates: where the credential goes, and its variable's name."""

    type: str
    env: str
    name: str = ""

    def describe(self) -> str:
        """Names only, never the value: safe to show in admin and in logs."""
        target = {"bearer": "Authorization: Bearer", "header": f"header {self.name}"}.get(
            self.type, f"query parameter {self.name}"
        )
        return f"{target} from ${self.env}"


def tool_auth_parse(raw: Any) -> ToolAuth | None:
    """The ``ToolAuth`` a Tool row's ``auth`` JSON describes; None when it has none."""
    if raw in (None, {}, ""):
        return None
    if not isinstance(raw, dict):
        raise ToolAuthInvalid('Must be an object like {"type": "bearer", "env": "SHOP_API_KEY"}.')
    extra = sorted(set(raw) - AUTH_KEYS)
    if extra:
        raise ToolAuthInvalid(
            f"Unknown keys {extra}: only type, name and env are allowed. The secret itself "
            "belongs in the environment variable named by env, never in this row."
        )
    auth_type = raw.get("type")
    if auth_type not in AUTH_TYPES:
        raise ToolAuthInvalid(f"type must be one of {', '.join(AUTH_TYPES)}.")
    env = raw.get("env")
    if not isinstance(env, str) or not ENV_NAME.match(env):
        raise ToolAuthInvalid(
            "env must name an environment variable (upper-case letters, digits and _)."
        )
    if env.startswith(RESERVED_ENV_PREFIXES):
        raise ToolAuthInvalid(
            f"{env} is reserved for this installation's own settings; give the tool's "
            "credential a variable of its own, e.g. SHOP_API_KEY."
        )
    name = raw.get("name") or ""
    if not isinstance(name, str):
        raise ToolAuthInvalid("name must be a string.")
    if auth_type == "bearer":
        if name and name.lower() != "authorization":
            raise ToolAuthInvalid('A bearer credential goes in Authorization; use "header".')
        name = "Authorization"
    elif auth_type == "header" and not HEADER_NAME.match(name):
        raise ToolAuthInvalid("name must be an HTTP header name, e.g. X-Api-Key.")
    elif auth_type == "query" and not QUERY_NAME.match(name):
        raise ToolAuthInvalid("name must be a query parameter name, e.g. api_key.")
    return ToolAuth(type=auth_type, env=env, name=name)


def credential_resolve(auth: ToolAuth) -> str:
    """The credential's value from the environment, registered with the redactor."""
    value = os.environ.get(auth.env, "")
    if not value.strip():
        raise CredentialMissing(auth.env)
    secret_register(value)
    return value


def credential_request_parts(auth: ToolAuth, value: str) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and query parameters that carry ``value`` for ``auth``."""
    if auth.type == "bearer":
        return {"Authorization": f"Bearer {value}"}, {}
    if auth.type == "header":
        return {auth.name: value}, {}
    return {}, {auth.name: value}
