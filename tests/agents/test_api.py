"""REST API: start runs, read traces and steps, scoped per user; OpenAPI schema."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from traces.models import Step, Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(support_user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(support_user)
    return client


def test_post_run_stores_queued_trace_and_enqueues_after_commit(
    api: APIClient, support_agent: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.post(
            "/api/runs/",
            {"query": "Where is my order #W1000001?", "customer_id": "U00000001"},
            format="json",
        )
    assert response.status_code == 202, response.content
    trace = Trace.objects.get(pk=response.json()["id"])
    assert trace.status == "queued"
    assert trace.customer_id == "U00000001"
    assert trace.query_hash and len(trace.query_hash) == 32
    assert len(callbacks) == 1  # the enqueue waits for the commit


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"query": "hi", "agent": "nope"}, "agent"),
        ({"query": "hi", "customer_id": "U1; DROP TABLE"}, "customer_id"),
        ({"query": "hi", "locale": "xx-nowhere"}, "locale"),
        ({"query": "hi", "time_zone": "Mars/Olympus"}, "time_zone"),
    ],
)
def test_bad_run_input_gets_a_clear_400_and_stores_nothing(
    api: APIClient, support_agent: Any, payload: dict, field: str
) -> None:
    response = api.post("/api/runs/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Trace.objects.count() == 0


def test_a_run_keeps_the_customers_locale_and_time_zone(api: APIClient, support_agent: Any) -> None:
    response = api.post(
        "/api/runs/",
        {"query": "When does my order arrive?", "locale": "de-DE", "time_zone": "Europe/Berlin"},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert (response.json()["locale"], response.json()["time_zone"]) == ("de-DE", "Europe/Berlin")
    trace = Trace.objects.get()
    assert (trace.locale, trace.time_zone) == ("de-DE", "Europe/Berlin")


def test_anonymous_cannot_start_runs_and_is_told_to_send_a_token(support_agent: Any) -> None:
    response = APIClient().post("/api/runs/", {"query": "hi"})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert Trace.objects.count() == 0


def test_a_token_authenticates_api_calls(ops_user: Any, support_agent: Any) -> None:
    from agents.api.tokens import api_token_get_or_create

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_get_or_create(user=ops_user).key}")
    response = client.post("/api/runs/", {"query": "Where is my order #W1001549?"}, format="json")
    assert response.status_code == 202, response.content
    trace = Trace.objects.get()
    assert trace.created_by == ops_user
    assert response.json()["url"] == f"http://testserver/api/traces/{trace.pk}/"


@pytest.mark.parametrize("header", ["Token nope", "Token ", "Bearer abc", "Token a b"])
def test_a_bad_token_is_401(support_agent: Any, header: str) -> None:
    response = APIClient().get("/api/traces/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/api/traces/{trace}/steps/?after=abc",
        "/api/traces/{trace}/steps/?after=-1",
        "/api/traces/{trace}/steps/?after=99999999999999999999",
        "/api/steps/?trace=not-a-uuid",
        "/api/steps/?trace=",
        "/api/steps/?tool=%00",
        "/api/steps/?error_type=NOPE",
        "/api/traces/?limit=100000000000000000000",
        "/api/traces/?limit=201",
        "/api/traces/?limit=0",
        "/api/traces/?limit=abc",
        "/api/traces/?offset=-1",
        "/api/traces/?offset=100000000000000000000",
        "/api/traces/?status=bogus",
        "/api/traces/?agent=not%20a%20slug",
        # Unknown names: a misspelt or page-only filter used to return the whole list.
        "/api/traces/?statuss=failed",
        "/api/traces/?q=refund",
        "/api/steps/?step_error=TIMEOUT",
        "/api/traces/{trace}/steps/?limit=1",
    ],
)
def test_malformed_query_parameters_are_a_400_naming_the_parameter(
    api: APIClient, ops_user: Any, support_agent: Any, path: str
) -> None:
    trace = trace_create(
        agent_id=support_agent.pk, query="q", llm_backend="simulated", created_by_id=ops_user.pk
    )
    response = api.get(path.format(trace=trace.pk))
    assert response.status_code == 400, response.content
    name = path.split("?")[1].split("=")[0]
    assert name in response.json()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("[" * 100_000, id="100k-nested-arrays"),
        pytest.param('{"query": ' * 100 + '"x"' + "}" * 100, id="100-nested-objects"),
        '{"query": NaN}',
        '{"query": "hi", "customer_id": Infinity}',
        '{"query": 1e999}',
        r'{"query": "\ud800"}',
        '{"query": ',
    ],
)
def test_unstorable_or_hostile_json_is_a_400(api: APIClient, support_agent: Any, body: str) -> None:
    response = api.post("/api/runs/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    assert Trace.objects.count() == 0


def test_a_body_of_another_media_type_is_a_documented_415(api: APIClient) -> None:
    response = api.post("/api/runs/", data="query=hi", content_type="text/plain")
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert response.status_code == 415
    assert "415" in schema["paths"]["/api/runs/"]["post"]["responses"]
    assert Trace.objects.count() == 0


@pytest.mark.parametrize("path", ["/api/traces/not-a-uuid/", "/api/steps/1.5/", "/api/nothing/"])
def test_unknown_api_paths_are_a_json_404(api: APIClient, path: str) -> None:
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "detail" in response.json()


def test_list_pages_are_bounded(api: APIClient, support_user: Any, support_agent: Any) -> None:
    for i in range(3):
        trace_create(
            agent_id=support_agent.pk,
            query=f"q{i}",
            llm_backend="simulated",
            created_by_id=support_user.pk,
        )
    body = api.get("/api/traces/?limit=2&offset=2").json()
    assert body["count"] == 3
    assert len(body["results"]) == 1
    assert api.get("/api/traces/?limit=200").status_code == 200


def test_a_user_without_a_role_cannot_start_runs(
    support_agent: Any, django_user_model: Any
) -> None:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("norole", password="x" * 10))

    response = client.post("/api/runs/", {"query": "hi"}, format="json")

    assert response.status_code == 403
    assert "agents.start_run" in response.json()["detail"]
    assert not Trace.objects.exists()


def test_support_agent_sees_only_own_traces_ops_sees_all(
    support_agent: Any, support_user: Any, support_user2: Any, ops_user: Any
) -> None:
    alice, bob, ops = support_user, support_user2, ops_user
    mine = trace_create(
        agent_id=support_agent.pk, query="a", llm_backend="simulated", created_by_id=alice.pk
    )
    trace_create(
        agent_id=support_agent.pk, query="b", llm_backend="simulated", created_by_id=bob.pk
    )
    client = APIClient()
    client.force_authenticate(alice)
    ids = [t["id"] for t in client.get("/api/traces/").json()["results"]]
    assert ids == [str(mine.pk)]
    client.force_authenticate(ops)
    assert client.get("/api/traces/").json()["count"] == 2
    client.force_authenticate(bob)
    assert client.get(f"/api/traces/{mine.pk}/").status_code == 404


def test_trace_detail_and_steps_after_cursor(
    api: APIClient, support_user: Any, support_agent: Any
) -> None:
    from django.utils import timezone

    trace = trace_create(
        agent_id=support_agent.pk, query="q", llm_backend="simulated", created_by_id=support_user.pk
    )
    Step.objects.bulk_create(
        [
            Step(trace=trace, step_number=n, phase="reasoning", started_at=timezone.now())
            for n in (1, 2, 3)
        ]
    )
    detail = api.get(f"/api/traces/{trace.pk}/").json()
    assert [s["step_number"] for s in detail["steps"]] == [1, 2, 3]
    after = api.get(f"/api/traces/{trace.pk}/steps/?after=1").json()
    assert [s["step_number"] for s in after] == [2, 3]


def test_trace_list_query_count_does_not_grow_with_rows(
    api: APIClient, support_user: Any, support_agent: Any, django_assert_max_num_queries: Any
) -> None:
    for i in range(20):
        trace_create(
            agent_id=support_agent.pk,
            query=f"q{i}",
            llm_backend="simulated",
            created_by_id=support_user.pk,
        )
    with django_assert_max_num_queries(4):
        assert api.get("/api/traces/").status_code == 200


def test_openapi_schema_lists_runs_traces_and_steps(api: APIClient) -> None:
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/runs/" in paths
    assert "/api/traces/{id}/" in paths
    assert "/api/steps/" in paths


def test_trace_explorer_page_shows_stored_failed_steps_in_few_queries(
    client: Any, support_user: Any, support_agent: Any, django_assert_max_num_queries: Any
) -> None:
    from django.utils import timezone

    from traces.services import trace_finish

    for i in range(15):
        trace = trace_create(
            agent_id=support_agent.pk,
            query=f"q{i}",
            llm_backend="simulated",
            created_by_id=support_user.pk,
        )
        Step.objects.create(
            trace=trace,
            step_number=1,
            phase="action",
            ok=False,
            error_type="TIMEOUT",
            started_at=timezone.now(),
        )
        # The count is stored when the run ends; the list reads it, never the Steps.
        trace_finish(trace_id=str(trace.pk), status="failed", final_answer="", error_type="TIMEOUT")
    client.force_login(support_user)
    with django_assert_max_num_queries(8):
        page = client.get("/traces/")
    assert page.status_code == 200
    assert page.content.decode().count('<span class="err">1</span>') == 15


def test_the_query_length_limit_is_the_setting(
    api: APIClient, support_agent: Any, settings: Any
) -> None:
    settings.AGENT_QUERY_MAX_CHARS = 20
    assert api.post("/api/runs/", {"query": "x" * 20}, format="json").status_code == 202
    response = api.post("/api/runs/", {"query": "x" * 21}, format="json")
    assert response.status_code == 400
    assert response.json()["query"] == [
        "The question is 21 characters long; the limit is 20. Shorten it and ask again."
    ]
    assert Trace.objects.count() == 1


def test_openapi_schema_documents_the_query_limit_and_token_auth(api: APIClient) -> None:
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    query = schema["components"]["schemas"]["RunCreate"]["properties"]["query"]
    assert query["maxLength"] == 4000
    assert schema["components"]["securitySchemes"]["tokenAuth"] == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": 'Token-based authentication with required prefix "Token"',
    }


def test_a_form_encoded_run_is_refused_with_415(api: APIClient, support_agent: Any) -> None:
    # form encodings would turn a typed value (an object for "query") into text
    response = api.post("/api/runs/", {"query": '{"": false}'})
    assert response.status_code == 415
    assert not Trace.objects.exists()


def test_a_user_with_too_many_runs_in_flight_gets_a_429_and_others_do_not(
    api: APIClient, support_user: Any, ops_user: Any, support_agent: Any, settings: Any
) -> None:
    """AGENT_RUNS_IN_FLIGHT_PER_USER: a loop in a client cannot queue unbounded model
    calls. Ended runs and other users' runs do not count; 0 lifts the limit."""
    settings.AGENT_RUNS_IN_FLIGHT_PER_USER = 2
    for status in ("queued", "running", "finished"):
        trace = trace_create(
            agent_id=support_agent.pk,
            query="q",
            llm_backend="simulated",
            created_by_id=support_user.pk,
        )
        Trace.objects.filter(pk=trace.pk).update(status=status)

    refused = api.post("/api/runs/", {"query": "one more"}, format="json")

    assert refused.status_code == 429, refused.content
    assert refused["Retry-After"] == "5"
    assert "runs queued or running as one user may (2)" in refused.json()["detail"]
    assert Trace.objects.filter(query="one more").count() == 0
    other = APIClient()
    other.force_authenticate(ops_user)
    assert other.post("/api/runs/", {"query": "mine"}, format="json").status_code == 202
    Trace.objects.filter(created_by=support_user, status="running").update(status="failed")
    assert api.post("/api/runs/", {"query": "now"}, format="json").status_code == 202
    settings.AGENT_RUNS_IN_FLIGHT_PER_USER = 0
    assert api.post("/api/runs/", {"query": "unlimited"}, format="json").status_code == 202


def test_the_trace_list_filters_by_origin(
    api: APIClient, support_user: Any, support_agent: Any
) -> None:
    """The console lists customer traffic; the API list holds the learning loop's replays
    too, and ``origin=customer`` gives what the console shows."""
    for origin in ("customer", "replay"):
        trace = trace_create(
            agent_id=support_agent.pk,
            query=origin,
            llm_backend="simulated",
            created_by_id=support_user.pk,
            origin=origin,
        )
        assert trace.origin == origin
    everything = api.get("/api/traces/").json()["results"]
    customer = api.get("/api/traces/?origin=customer").json()["results"]
    assert sorted(t["query"] for t in everything) == ["customer", "replay"]
    assert [t["query"] for t in customer] == ["customer"]
    refused = api.get("/api/traces/?origin=robots")
    assert refused.status_code == 400 and "origin" in refused.json()


def test_a_field_the_run_api_does_not_take_is_a_400_that_names_it(
    api: APIClient, support_agent: Any
) -> None:
    """{"query": …, "bogus": 1} used to start a run that silently dropped the field."""
    from traces.models import Trace

    response = api.post(
        "/api/runs/", {"query": "Where is my order #W1000001?", "priorty": "high"}, format="json"
    )

    assert response.status_code == 400
    message = response.json()["priorty"][0]
    assert message.startswith("Unknown field; this endpoint takes: query, agent, customer_id")
    assert not Trace.objects.exists()


def test_a_malformed_customer_id_says_what_is_allowed(api: APIClient, support_agent: Any) -> None:
    response = api.post(
        "/api/runs/", {"query": "hi there", "customer_id": "bad id!"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["customer_id"] == ["Letters, digits, - and _ only (max 64)."]
