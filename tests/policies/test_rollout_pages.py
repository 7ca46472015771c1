"""The rollout pages: list, detail with its numbers and charts, and confirmed controls."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from policies.models import Rollout, Strategy
from policies.rollouts import rollouts_evaluate
from policies.services import strategy_activate
from reviews.models import AuditLog
from tests.policies.test_rollouts import runs

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout(make_strategy: Any, ops_user: Any, settings: Any) -> Rollout:
    settings.POLICY_PUBLISH = "canary"
    settings.ROLLOUT_MIN_SAMPLES = 5
    version = strategy_activate(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW),
        actor=ops_user,
        author_kind="reviewer",
    )
    return Rollout.objects.get(version=version)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_list_and_detail_show_state_numbers_and_history(
    rollout: Rollout, ops_user: Any, support_agent: Any
) -> None:
    runs(support_agent, rollout.version.label, ok=4, failed=2)
    runs(support_agent, "", ok=9, failed=1)
    assert rollouts_evaluate() is not None  # a hold with the window's numbers
    client = _client(ops_user)
    listing = client.get("/policies/rollouts/").content.decode()
    assert f"/policies/rollouts/{rollout.pk}/" in listing and "1%" in listing
    page = client.get(f"/policies/rollouts/{rollout.pk}/").content.decode()
    assert 'id="rollout-percent">1%' in page
    assert "6 / 10" in page  # runs canary / stable in the decision history
    assert "0.333 / 0.100" in page  # error rates
    assert 'data-chart="rollout"' in page and "vendor/chart.umd.js" in page
    assert f"/policies/rollouts/{rollout.pk}/rollback/" in page  # ops may act
    series = client.get(f"/policies/rollouts/{rollout.pk}/series/").json()
    assert series["bucket"] == "minute" and len(series["buckets"]) == 1
    assert series["canary"]["n"] == [6] and series["stable"]["n"] == [10]
    assert series["canary"]["error_rate"] == [0.3333]
    assert [d["action"] for d in series["decisions"]] == ["start", "hold"]
    # The guarded-metric tiles: the canary's difference from stable, its 95% interval over
    # every run so far, and the evaluator's lines (0 for the rates, the latency budget).
    assert page.count('data-chart="guard"') == 3
    guard = series["guard"]
    assert guard["n"] == {"canary": 6, "stable": 10}
    assert guard["error_rate"]["diff"] == [0.2333]  # 2/6 - 1/10
    # 1.96 x sqrt((1/3)(2/3)/6 + 0.1 x 0.9/10) = 0.4205 each side
    low, high = guard["error_rate"]["low"][0], guard["error_rate"]["high"][0]
    assert (low, high) == pytest.approx((-0.1872, 0.6539), abs=1e-4)
    assert guard["success_rate"]["diff"] == [-0.2333]
    assert guard["p95_ms"]["diff"] == [0.0]  # every run took 100 ms
    assert (guard["error_rate"]["threshold"], guard["p95_ms"]["threshold"]) == (0.0, 100.0)
    assert guard["success_rate"]["threshold"] is None  # shown, not judged


def test_a_control_asks_for_confirmation_then_acts_and_is_audited(
    rollout: Rollout, ops_user: Any
) -> None:
    client = _client(ops_user)
    confirm = client.get(f"/policies/rollouts/{rollout.pk}/set_percent/?percent=25")
    assert confirm.status_code == 200 and "to 25%?" in confirm.content.decode()
    rollout.refresh_from_db()
    assert rollout.percent == 1  # nothing moved on GET
    done = client.post(
        f"/policies/rollouts/{rollout.pk}/set_percent/", {"percent": "25", "note": "ramp"}
    )
    assert done.status_code == 302
    rollout.refresh_from_db()
    assert rollout.percent == 25
    row = AuditLog.objects.get(action="rollout.set_percent")
    assert row.actor == ops_user and "ramp" in row.details["reason"]
    refused = client.post(f"/policies/rollouts/{rollout.pk}/set_percent/", {"percent": "0"})
    assert refused.status_code == 302
    rollout.refresh_from_db()
    assert rollout.percent == 25
    assert client.get(f"/policies/rollouts/{rollout.pk}/explode/").status_code == 404


def test_support_cannot_move_and_an_ended_rollout_offers_no_controls(
    rollout: Rollout, ops_user: Any, support_user: Any
) -> None:
    assert (
        _client(support_user).post(f"/policies/rollouts/{rollout.pk}/rollback/").status_code == 403
    )
    client = _client(ops_user)
    client.post(f"/policies/rollouts/{rollout.pk}/rollback/", {"note": "no"})
    rollout.refresh_from_db()
    assert rollout.state == "rolled_back"
    page = client.get(f"/policies/rollouts/{rollout.pk}/").content.decode()
    assert "Rolled Back" in page or "rolled back" in page.lower()
    assert 'id="controls"' not in page


def test_the_rollout_links_the_runs_behind_it_and_its_strategy_lists_it(
    rollout: Rollout, ops_user: Any, support_agent: Any
) -> None:
    import re

    from traces.models import Trace

    runs(support_agent, rollout.version.label, ok=2, failed=1)
    runs(support_agent, "v999", ok=1)  # another version's run
    client = _client(ops_user)
    page = client.get(f"/policies/rollouts/{rollout.pk}/").content.decode()
    canary = re.search(r'id="rollout-runs"><a href="([^"]+)"', page)
    assert canary is not None
    listing = client.get(canary.group(1).replace("&amp;", "&")).content.decode()
    for trace in Trace.objects.all():
        shown = f"/traces/{trace.pk}/" in listing
        assert shown == (trace.policy_version == rollout.version.label), trace.policy_version

    strategy = client.get(f"/policies/strategies/{rollout.strategy_id}/").content.decode()
    rollouts = strategy[strategy.index('id="rollouts"') :]
    assert f'href="/policies/rollouts/{rollout.pk}/"' in rollouts and "Running" in rollouts


def test_the_rollout_list_says_when_older_rollouts_are_left_out(
    make_strategy: Any, ops_user: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from policies import views

    settings.POLICY_PUBLISH = "canary"
    monkeypatch.setattr(views, "ROLLOUTS_SHOWN", 2)
    client = _client(ops_user)
    for n in range(3):
        version = strategy_activate(
            strategy=make_strategy(
                kind="prompt_hint",
                status=Strategy.Status.IN_REVIEW,
                branch={"tool": f"tool_{n}", "text": f"Hint {n}."},
                error_type="HALLUCINATED_ANSWER",
            ),
            actor=ops_user,
            author_kind="reviewer",
        )
        Rollout.objects.filter(version=version).update(is_open=False, state="rolled_back")
        listing = client.get("/policies/rollouts/").content.decode()
        assert ('id="older-rollouts"' in listing) == (n == 2), n
