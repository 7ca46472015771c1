"""Links between a trace and the strategies it produced, and back to their source traces."""

from __future__ import annotations

from typing import Any

import pytest

from policies.selectors import strategies_for_trace
from tests.traces.timeline_helpers import recorded_run

pytestmark = pytest.mark.django_db


def test_a_trace_page_links_the_strategies_it_produced_and_their_other_sources(
    support_agent: Any, ops_user: Any, client: Any, make_strategy: Any
) -> None:
    # given a strategy learned from two traces
    trace = recorded_run(support_agent, rounds=1)
    other = recorded_run(support_agent, rounds=1)
    strategy = make_strategy(status="in_review")
    strategy.source_traces.add(trace, other)
    client.force_login(ops_user)
    # when
    page = client.get(trace.get_absolute_url()).content.decode()
    # then the trace shows the strategy, readable, with links to its evidence and review
    section = page[page.index('id="strategies"') :]
    card = section[section.index(f'id="strategy-{strategy.pk}"') :]
    assert "Before calling get_order: in order_id, keep only its digits, as a number." in card
    assert f'href="/traces/{other.pk}/"' in card
    assert f'href="/traces/{trace.pk}/" title="Where?">this trace</a>' in card
    assert f'href="/reviews/#strategy-{strategy.pk}"' in card
    assert "{'" not in page and "{&#x27;" not in page


def test_from_a_strategy_the_source_trace_leads_back_to_the_strategy(
    support_agent: Any, ops_user: Any, client: Any, make_strategy: Any
) -> None:
    trace = recorded_run(support_agent, rounds=1)
    strategy = make_strategy(status="in_review")
    strategy.source_traces.add(trace)
    from reviews.models import ReviewItem

    ReviewItem.objects.create(strategy=strategy, reason=ReviewItem.Reason.LOW_CONFIDENCE)
    client.force_login(ops_user)
    queue = client.get("/reviews/").content.decode()
    assert f'href="/traces/{trace.pk}/"' in queue
    detail = client.get(f"/traces/{trace.pk}/").content.decode()
    assert f'id="strategy-{strategy.pk}"' in detail


def test_strategies_fired_in_a_run_are_listed_apart_from_those_it_produced(
    support_agent: Any, make_strategy: Any
) -> None:
    fired = make_strategy()
    learned = make_strategy(kind="prompt_hint", branch={"text": "Ask for the order id"})
    trace = recorded_run(support_agent, rounds=2, applied=[{"id": fired.pk, "kind": "adapter"}])
    learned.source_traces.add(trace)
    links = strategies_for_trace(trace_id=trace.pk, applied_ids=[fired.pk, 999_999])
    assert links.produced == [learned]
    assert links.applied == [fired]


def test_support_users_see_their_trace_without_the_strategy_section(
    support_agent: Any, support_user: Any, client: Any, make_strategy: Any
) -> None:
    trace = recorded_run(support_agent, rounds=1)
    trace.created_by = support_user
    trace.save(update_fields=["created_by"])
    make_strategy().source_traces.add(trace)
    client.force_login(support_user)
    page = client.get(trace.get_absolute_url()).content.decode()
    assert 'id="round-1"' in page
    assert 'id="strategies"' not in page
