"""Schemathesis against the app's own /api/schema/: no 5xx, and every response as documented.

The app is called in-process through its WSGI handler, authenticated with an API token, with
schema-valid and schema-violating requests (hypothesis, derandomized so a failure reproduces).
Not checked: `positive_data_acceptance`, because a well-formed agent slug that names no agent
is rightly a 400, which no static schema can foresee.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agents.api.tokens import api_token_get_or_create
from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@pytest.fixture
def api_schema(db: None, ops_user: Any) -> Iterator[Any]:
    # The app runs in this thread, inside the test's transaction. Like Django's test client,
    # keep the end of each request from closing the connection that holds the transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    # The schema is served to signed-in users and token holders only.
    token = api_token_get_or_create(user=ops_user).key
    try:
        yield schemathesis.openapi.from_wsgi(
            "/api/schema/?format=json",
            get_wsgi_application(),
            headers={"Authorization": f"Token {token}"},
        )
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
def auth_header(ops_user: Any) -> dict[str, str]:
    return {"Authorization": f"Token {api_token_get_or_create(user=ops_user).key}"}


@pytest.fixture
def recorded_traces(ops_user: Any, support_agent: Any) -> list[Trace]:
    """A clean run and a failed one, so the lists answer with rows, blank error types included."""
    traces = []
    for status, error_type in (("finished", ""), ("failed", "TIMEOUT")):
        trace = trace_create(
            agent_id=support_agent.pk,
            query="Where is my order #W1000001?",
            llm_backend="simulated",
            created_by_id=ops_user.pk,
        )
        Trace.objects.filter(pk=trace.pk).update(status=status, error_type=error_type)
        Step.objects.create(
            trace=trace,
            step_number=1,
            phase="action",
            tool_name="get_order",
            ok=not error_type,
            error_type=error_type,
            started_at=timezone.now(),
        )
        traces.append(trace)
    return traces


@schema.parametrize()
@settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_conforms_to_the_schema(
    case: Any, auth_header: dict[str, str], recorded_traces: list[Trace]
) -> None:
    case.call_and_validate(headers=auth_header, checks=CHECKS)


@pytest.mark.parametrize("which", [0, 1], ids=["clean-run", "failed-run"])
@pytest.mark.parametrize(
    ("path", "object_id"),
    [
        ("/api/traces/{id}/", lambda trace: trace.pk),
        ("/api/traces/{id}/steps/", lambda trace: trace.pk),
        ("/api/steps/{id}/", lambda trace: trace.steps.get().pk),
    ],
    ids=["trace", "trace-steps", "step"],
)
def test_existing_objects_are_served_as_documented(
    api_schema: Any,
    auth_header: dict[str, str],
    recorded_traces: list[Trace],
    path: str,
    object_id: Callable[[Trace], object],
    which: int,
) -> None:
    case = api_schema[path]["GET"].Case(
        path_parameters={"id": str(object_id(recorded_traces[which]))}
    )

    response = case.call_and_validate(headers=auth_header, checks=CHECKS)

    assert response.status_code == 200
