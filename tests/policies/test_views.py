"""The policy pages: the active tree, versions, side-by-side diff, YAML, strategy history."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from policies.documents import (
    policy_document_parse,
    policy_document_side_by_side,
    policy_version_create,
)
from policies.models import PolicyVersion, Strategy
from policies.services import strategy_outcome_record
from traces.services import trace_create

pytestmark = pytest.mark.django_db

HINT = {
    "text": "Call a tool before answering any order question.",
    "error_type": "HALLUCINATED_ANSWER",
}
HANDLER = {"tool": "get_order", "on": "INTERNAL_SERVER_ERROR", "action": "degrade_cache"}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def two_versions(make_strategy: Any, ops_user: Any) -> tuple[PolicyVersion, PolicyVersion]:
    adapter = make_strategy()
    hint = make_strategy(kind="prompt_hint", branch=HINT, error_type="HALLUCINATED_ANSWER")
    first = policy_version_create(
        strategies=[adapter], author_kind="reviewer", author=ops_user, source_strategies=[adapter]
    )
    second = policy_version_create(
        strategies=[adapter, hint], author_kind="auto_merge", source_strategies=[hint]
    )
    return first, second


def test_the_active_tree_shows_scopes_kind_lists_and_live_state(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    adapter = Strategy.objects.get(kind="adapter")
    Strategy.objects.filter(pk=adapter.pk).update(confidence=0.85)

    page = _client(ops_user).get("/policies/").content.decode()

    assert "Policy v2" in page and "active" in page
    assert "tool <code>get_order</code>" in page and "any tool" in page
    for list_name in ("pre_conditions", "validation_rules", "error_handlers", "adapters"):
        assert list_name in page
    assert f'href="/policies/strategies/{adapter.pk}/"' in page
    assert "confidence 0.85" in page
    assert "transform: digits_to_int" in page
    assert "Call a tool before answering any order question." in page
    assert 'href="/policies/diff/?a=1&amp;b=2"' in page


def test_without_a_version_the_tree_says_how_one_is_made(ops_user: Any) -> None:
    page = _client(ops_user).get("/policies/").content.decode()

    assert "No policy version is active yet" in page
    assert 'href="/reviews/"' in page


def test_an_older_version_shows_its_own_tree(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    page = _client(ops_user).get("/policies/versions/1/").content.decode()

    assert "Policy v1" in page
    assert "Call a tool before answering" not in page
    assert _client(ops_user).get("/policies/versions/99/").status_code == 404


def test_the_version_list_shows_parent_author_and_source_strategies(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    hint = Strategy.objects.get(kind="prompt_hint")

    page = _client(ops_user).get("/policies/versions/").content.decode()

    assert page.index(">v2</a>") < page.index(">v1</a>")
    assert 'href="/policies/versions/1/">v1</a>' in page
    assert f'<td data-label="Author">{ops_user.username} <span class="muted">(Reviewer)' in page
    assert '<td data-label="Author">system <span class="muted">(Auto Merge)' in page
    assert f'href="/policies/strategies/{hint.pk}/">{hint.label}</a>' in page
    assert 'href="/policies/versions/2/yaml/"' in page


def test_the_version_list_pages_by_number_without_counting(
    make_strategy: Any, ops_user: Any
) -> None:
    strategy = make_strategy()
    for _ in range(27):
        policy_version_create(strategies=[strategy], author_kind="reviewer")
    client = _client(ops_user)

    first = client.get("/policies/versions/").content.decode()
    older = client.get("/policies/versions/?before=3").content.decode()

    def listed(page: str) -> list[int]:
        return [
            int(n)
            for n in re.findall(r'data-label="Version"><a href="/policies/versions/(\d+)/"', page)
        ]

    assert listed(first) == list(range(27, 2, -1))
    assert 'href="?before=3"' in first
    assert listed(older) == [2, 1]
    assert "Older versions" not in older


@pytest.mark.parametrize(("a", "b"), [(1, 2), (2, 1)])
def test_the_diff_shows_both_documents_in_aligned_columns(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any, a: int, b: int
) -> None:
    page = _client(ops_user).get(f"/policies/diff/?a={a}&b={b}").content.decode()

    added_side = "new" if b == 2 else "old"
    assert (
        f'<a href="/policies/versions/{a}/">v{a}</a> → <a href="/policies/versions/{b}/">v{b}</a>'
        in page
    )
    mark = "+" if added_side == "new" else "−"
    assert re.search(
        rf'<td class="mark {added_side}">{re.escape(mark)}</td>'
        rf'<td class="{added_side}">\s+text: Call a tool',
        page,
    )
    assert '<option value="1" selected>' in page


def test_a_diff_of_identical_versions_marks_nothing(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    page = _client(ops_user).get("/policies/diff/?a=2&b=2").content.decode()

    assert "the documents are identical" in page
    assert 'class="replace"' not in page and 'class="insert"' not in page


def test_a_diff_names_a_version_that_does_not_exist(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    page = _client(ops_user).get("/policies/diff/?a=1&b=42").content.decode()

    assert "There is no version v42." in page
    assert 'id="diff"' not in page


def test_side_by_side_rows_align_changes_and_fold_unchanged_runs() -> None:
    old = "\n".join(f"line {n}" for n in range(1, 21))
    new = old.replace("line 10", "line ten") + "\nline 21"

    rows = policy_document_side_by_side(old_text=old, new_text=new, context=2)

    changed = [r for r in rows if r.tag not in ("equal", "skip")]
    assert [(r.tag, r.old_number, r.old_line, r.new_number, r.new_line) for r in changed] == [
        ("replace", 10, "line 10", 10, "line ten"),
        ("insert", None, None, 21, "line 21"),
    ]
    assert [r.skipped for r in rows if r.tag == "skip"] == [7, 6]
    shown = [r.old_number for r in rows if r.tag == "equal"]
    assert shown == [8, 9, 11, 12, 19, 20]


def test_side_by_side_rows_of_real_versions_cover_every_line(
    two_versions: tuple[PolicyVersion, PolicyVersion],
) -> None:
    first, second = two_versions

    rows = policy_document_side_by_side(
        old_text=first.document, new_text=second.document, context=10_000
    )

    assert [r.new_line for r in rows if r.new_line is not None] == second.document.splitlines()
    assert [r.old_line for r in rows if r.old_line is not None] == first.document.splitlines()


def test_yaml_download_is_the_stored_document(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    response = _client(ops_user).get("/policies/versions/1/yaml/")

    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == 'attachment; filename="policy-v1.yaml"'
    assert response.content.decode() == two_versions[0].document
    assert policy_document_parse(response.content.decode()).number == 1


def test_the_strategy_page_shows_its_confidence_history_and_source_runs(
    two_versions: tuple[PolicyVersion, PolicyVersion],
    ops_user: Any,
    support_agent: Any,
) -> None:
    strategy = Strategy.objects.get(kind="adapter")
    source = trace_create(agent_id=support_agent.pk, query="Where is #W1?", llm_backend="simulated")
    strategy.source_traces.add(source)
    run = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    for success in (True, False):
        strategy_outcome_record(strategy_id=strategy.pk, success=success, trace_id=str(run.pk))

    page = _client(ops_user).get(f"/policies/strategies/{strategy.pk}/").content.decode()

    assert "0.70 → 0.75" in page and "0.75 → 0.60" in page
    assert page.index("0.75 → 0.60") < page.index("0.70 → 0.75")  # newest first
    assert '<polyline points="0.0,18.0 160.0,15.0 320.0,24.0"/>' in page
    assert f'href="/traces/{run.pk}/"' in page
    assert f'href="/traces/{source.pk}/"' in page and "Where is #W1?" in page
    assert '<span class="badge sim">simulated</span>' in page
    assert (
        'href="/policies/versions/1/">v1</a>' in page
        and 'href="/policies/versions/2/">v2</a>' in page
    )


def test_a_strategy_that_never_ran_explains_how_confidence_moves(
    make_strategy: Any, ops_user: Any
) -> None:
    strategy = make_strategy(status=Strategy.Status.IN_REVIEW)

    page = _client(ops_user).get(f"/policies/strategies/{strategy.pk}/").content.decode()

    assert "Confidence has not moved yet" in page
    assert 'id="confidence-chart"' not in page
    assert "it waits in the" in page


@pytest.mark.parametrize(
    "path",
    ["/policies/", "/policies/versions/", "/policies/diff/?a=1&b=2", "/policies/versions/1/yaml/"],
)
def test_support_agents_may_not_read_policies(
    two_versions: tuple[PolicyVersion, PolicyVersion],
    support_user: Any,
    admin_role_user: Any,
    path: str,
) -> None:
    assert _client(support_user).get(path).status_code == 403
    assert _client(admin_role_user).get(path).status_code == 200


def test_the_nav_links_policies_for_ops_only(ops_user: Any, support_user: Any) -> None:
    assert 'href="/policies/"' in _client(ops_user).get("/traces/").content.decode()
    assert 'href="/policies/"' not in _client(support_user).get("/traces/").content.decode()


def _queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


def test_page_queries_stay_fixed_as_versions_strategies_and_history_grow(
    make_strategy: Any, ops_user: Any, support_agent: Any
) -> None:
    client = _client(ops_user)
    trace = trace_create(agent_id=support_agent.pk, query="q", llm_backend="simulated")
    strategies: list[Strategy] = []

    def grow(count: int) -> None:
        for n in range(count):
            strategy = make_strategy(
                branch={"tool": f"tool_{len(strategies)}", "field": "id", "transform": "strip"}
            )
            strategy.source_traces.add(trace)
            strategies.append(strategy)
            policy_version_create(
                strategies=strategies, author_kind="reviewer", source_strategies=[strategy]
            )
            strategy_outcome_record(
                strategy_id=strategies[0].pk, success=n % 2 == 0, trace_id=str(trace.pk)
            )

    pages = ["/policies/", "/policies/versions/", "/policies/diff/?a=1&b=2"]
    grow(2)
    before = {path: _queries(client, path) for path in pages}
    before["strategy"] = _queries(client, f"/policies/strategies/{strategies[0].pk}/")
    grow(6)
    after = {path: _queries(client, path) for path in pages}
    after["strategy"] = _queries(client, f"/policies/strategies/{strategies[0].pk}/")

    assert after == before


def test_the_diff_offers_the_newest_version_against_its_predecessor(
    two_versions: tuple[PolicyVersion, PolicyVersion], ops_user: Any
) -> None:
    page = _client(ops_user).get("/policies/diff/").content.decode()

    assert '<select name="a"><option value="2">v2</option><option value="1" selected>' in page
    assert '<select name="b"><option value="2" selected>' in page
    assert "Pick two versions above" in page


@pytest.mark.parametrize(
    ("origin", "badges"),
    [
        ("llm:simulated", ["model-proposed", "simulated"]),
        ("llm:openai", ["model-proposed"]),
        ("analyzer:type_mismatch", []),
    ],
)
def test_a_strategy_a_model_wrote_says_so_and_the_simulated_model_is_named(
    make_strategy: Any, ops_user: Any, origin: str, badges: list[str]
) -> None:
    """Its origin is ``llm:<backend>``: before, the page compared it with "llm" and never
    showed the model-proposed badge, nor that the simulated model wrote it."""
    strategy = make_strategy(origin=origin)

    page = _client(ops_user).get(f"/policies/strategies/{strategy.pk}/").content.decode()

    origin_cell = page[page.index("<dt>Origin</dt>") :].split("</dd>", 1)[0]
    shown = re.findall(r'<span class="badge sim"[^>]*>([^<]+)</span>', origin_cell)
    assert shown == badges
