"""The Experiments pages: list, new (form), the report, and start/stop with confirmation."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from policies.experiments import CONTROL, TREATMENT, experiment_create, experiment_start
from policies.models import Experiment
from reviews.models import AuditLog
from traces.models import Trace
from traces.services import trace_create

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _runs(
    agent: Any, experiment: Experiment, arm: str, status: str, n: int, retries: int = 0
) -> None:
    for _ in range(n):
        trace = trace_create(agent_id=agent.pk, query="Where is my order?", llm_backend="simulated")
        Trace.objects.filter(pk=trace.pk).update(
            experiment_pk=experiment.pk, experiment_arm=arm, status=status, retries=retries
        )


def test_the_list_says_what_to_do_when_empty(ops_user: Any) -> None:
    page = _client(ops_user).get("/policies/experiments/").content.decode()
    assert "No experiments yet" in page
    assert 'href="/policies/experiments/new/"' in page


def test_the_list_shows_the_running_experiment_first(ops_user: Any) -> None:
    older = experiment_create(name="runs now")
    experiment_create(name="a later draft")
    experiment_start(experiment_id=older.pk)

    rows = _client(ops_user).get("/policies/experiments/").context["experiments"]

    assert [e.name for e in rows] == ["runs now", "a later draft"]


def test_creating_an_experiment_saves_a_draft_and_audits_it(ops_user: Any) -> None:
    response = _client(ops_user).post(
        "/policies/experiments/new/",
        {
            "name": "Loop on vs off",
            "hypothesis": "Learned strategies raise the success rate.",
            "traffic_percent": "50",
            "planned_runs_per_arm": "300",
        },
    )

    experiment = Experiment.objects.get()
    assert (
        response.status_code == 302
        and response["Location"] == f"/policies/experiments/{experiment.pk}/"
    )
    assert (experiment.status, experiment.traffic_percent, experiment.created_by) == (
        "draft",
        50,
        ops_user,
    )
    audit = AuditLog.objects.get(action="experiment.create")
    assert (audit.target, audit.actor) == (experiment.label, ops_user)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("traffic_percent", "0"),
        ("traffic_percent", "101"),
        ("planned_runs_per_arm", "5"),
        ("name", ""),
    ],
)
def test_a_bad_form_is_refused_inline_and_saves_nothing(
    ops_user: Any, field: str, value: str
) -> None:
    data = {"name": "E", "traffic_percent": "50", "planned_runs_per_arm": "100", field: value}
    response = _client(ops_user).post("/policies/experiments/new/", data)
    assert response.status_code == 400
    assert f'id="field-{field}"' in response.content.decode()
    assert response.context["form"].errors[field]
    assert not Experiment.objects.exists()


def test_the_report_page_shows_each_arm_and_the_verdict(ops_user: Any, support_agent: Any) -> None:
    experiment = experiment_create(name="report", planned_runs_per_arm=40)
    _runs(support_agent, experiment, CONTROL, "finished", 24, retries=2)
    _runs(support_agent, experiment, CONTROL, "failed", 16, retries=3)
    _runs(support_agent, experiment, TREATMENT, "finished", 36)
    _runs(support_agent, experiment, TREATMENT, "failed", 4, retries=1)

    page = _client(ops_user).get(f"/policies/experiments/{experiment.pk}/").content.decode()

    assert (
        "The learned strategies help: success rate 90.0% with learned strategies against 60.0%"
        in page
    )
    assert "36/40" in page and "24/40" in page
    assert "two-proportion z-test" in page and "Welch t-test" in page
    assert "p &lt; 0.001" in page  # success and retries both
    assert "favours treatment" in page
    assert 'id="start"' in page  # a draft offers Start


def test_the_report_page_holds_its_query_count_as_runs_grow(
    ops_user: Any, support_agent: Any, django_assert_max_num_queries: Any
) -> None:
    experiment = experiment_create(name="queries")
    client = _client(ops_user)
    _runs(support_agent, experiment, CONTROL, "finished", 3)
    client.get(f"/policies/experiments/{experiment.pk}/")  # warm the session and permissions
    with django_assert_max_num_queries(8) as small:
        client.get(f"/policies/experiments/{experiment.pk}/")
    _runs(support_agent, experiment, TREATMENT, "finished", 30)
    with django_assert_max_num_queries(len(small.captured_queries)):
        client.get(f"/policies/experiments/{experiment.pk}/")


def test_start_asks_first_then_starts_and_stop_ends_it(ops_user: Any) -> None:
    experiment = experiment_create(name="Loop on vs off", traffic_percent=20)
    client = _client(ops_user)

    confirm = client.get(f"/policies/experiments/{experiment.pk}/start/").content.decode()
    assert "20% of new sessions" in confirm and "no learned strategies" in confirm
    assert Experiment.objects.get().status == "draft"

    started = client.post(f"/policies/experiments/{experiment.pk}/start/", follow=True)
    assert "started: new sessions are split" in started.content.decode()
    assert Experiment.objects.get().status == "running"
    assert 'id="stop"' in started.content.decode()

    stopped = client.post(f"/policies/experiments/{experiment.pk}/stop/", follow=True)
    assert "stopped: new sessions run as usual" in stopped.content.decode()
    assert Experiment.objects.get().status == "stopped"
    actions = list(
        AuditLog.objects.filter(target=experiment.label)
        .order_by("id")
        .values_list("action", "actor")
    )
    assert actions[1:] == [("experiment.start", ops_user.pk), ("experiment.stop", ops_user.pk)]


def test_a_second_experiment_cannot_start_while_one_runs(ops_user: Any) -> None:
    running = experiment_create(name="first")
    experiment_start(experiment_id=running.pk)
    second = experiment_create(name="second")
    client = _client(ops_user)

    confirm = client.get(f"/policies/experiments/{second.pk}/start/").content.decode()
    assert f"{running.label} · first is running: stop it first" in confirm
    page = client.post(f"/policies/experiments/{second.pk}/start/", follow=True).content.decode()

    assert f"{running.label} is running; stop it first." in page
    assert Experiment.objects.get(pk=second.pk).status == "draft"
    assert not AuditLog.objects.filter(action="experiment.start", target=second.label).exists()


def test_an_unknown_action_is_a_404(ops_user: Any) -> None:
    experiment = experiment_create(name="E")
    assert (
        _client(ops_user).post(f"/policies/experiments/{experiment.pk}/delete/").status_code == 404
    )


def test_support_cannot_open_or_start_experiments(support_user: Any) -> None:
    experiment = experiment_create(name="E")
    client = _client(support_user)
    assert client.get("/policies/experiments/").status_code == 403
    assert client.post(f"/policies/experiments/{experiment.pk}/start/").status_code == 403
    assert Experiment.objects.get().status == "draft"


def test_names_and_hypotheses_are_escaped(ops_user: Any) -> None:
    experiment = experiment_create(
        name="<script>alert(1)</script>", hypothesis="<img src=x onerror=alert(1)>"
    )
    client = _client(ops_user)
    for path in ("/policies/experiments/", f"/policies/experiments/{experiment.pk}/"):
        page = client.get(path).content.decode()
        assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
        assert "&lt;script&gt;" in page


def test_a_trace_page_names_its_experiment_and_arm(ops_user: Any, support_agent: Any) -> None:
    experiment = experiment_create(name="E")
    _runs(support_agent, experiment, CONTROL, "failed", 1, retries=2)
    trace = Trace.objects.get(experiment_pk=experiment.pk)

    page = _client(ops_user).get(f"/traces/{trace.pk}/").content.decode()

    assert (
        f'<a href="/policies/experiments/{experiment.pk}/">{experiment.label}</a>, control arm'
        in page
    )
    assert "(no learned strategies)" in page and "2 retries" in page
