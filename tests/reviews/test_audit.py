"""The audit log page: admins only, filters in the URL, keyset pages, bounded queries."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reviews.models import AuditLog

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _entries(count: int, *, start: Any = None, **fields: Any) -> list[AuditLog]:
    """``count`` rows a minute apart, oldest first (created_at is auto_now_add)."""
    start = start or timezone.now() - timedelta(days=1)
    rows = AuditLog.objects.bulk_create(
        [
            AuditLog(
                action=fields.get("action", "strategy.activate"),
                target=fields.get("target", f"S{n}"),
                actor=fields.get("actor"),
                actor_kind=fields.get("actor_kind", "system"),
                details={"n": n},
            )
            for n in range(count)
        ]
    )
    for n, row in enumerate(rows):
        AuditLog.objects.filter(pk=row.pk).update(created_at=start + timedelta(minutes=n))
    return rows


def _targets(page: str) -> list[str]:
    return re.findall(r'<td data-label="Object"><a href="\?target=[^"]*">([^<]+)</a>', page)


def _next(page: str) -> str:
    """The older-entries link's query, or '' on the last page."""
    found = re.search(r'<a href="\?([^"]+)" rel="next">', page)
    return html.unescape(found.group(1)) if found else ""


def test_only_admins_read_the_audit_log(
    admin_role_user: Any, ops_user: Any, support_user: Any
) -> None:
    _entries(1)

    assert _client(admin_role_user).get("/reviews/audit/").status_code == 200
    refused = _client(ops_user).get("/reviews/audit/")
    assert refused.status_code == 403
    assert (
        "<p>Only admins read the audit log. If you need it, ask an admin.</p>"
        in refused.content.decode()
    )
    assert _client(support_user).get("/reviews/audit/").status_code == 403
    assert 'href="/reviews/audit/"' in _client(admin_role_user).get("/traces/").content.decode()
    assert 'href="/reviews/audit/"' not in _client(ops_user).get("/traces/").content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("actor=olga", ["v1"]),
        ("actor=auto_merge", ["S7"]),
        ("action=review.reject", ["review 3"]),
        ("target=S7", ["S7"]),
        ("target=S7&action=review.reject", []),
    ],
)
def test_filters_select_by_actor_action_and_object(
    admin_role_user: Any, ops_user: Any, query: str, expected: list[str]
) -> None:
    ops_user.username = "olga"
    ops_user.save(update_fields=["username"])
    _entries(1, action="policy_version.create", target="v1", actor=ops_user, actor_kind="user")
    _entries(1, action="strategy.activate", target="S7", actor_kind="auto_merge")
    _entries(1, action="review.reject", target="review 3", actor_kind="system")

    page = _client(admin_role_user).get(f"/reviews/audit/?{query}").content.decode()

    assert _targets(page) == expected


def test_the_time_window_is_inclusive_from_and_exclusive_until(admin_role_user: Any) -> None:
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    _entries(5, start=start)
    since = timezone.localtime(start + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    until = timezone.localtime(start + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M")

    page = _client(admin_role_user).get(f"/reviews/audit/?since={since}&until={until}")

    assert _targets(page.content.decode()) == ["S2", "S1"]


def test_keyset_pages_walk_every_entry_once_and_keep_the_filters(admin_role_user: Any) -> None:
    _entries(120)
    _entries(3, action="review.approve", target="other")
    client = _client(admin_role_user)
    seen: list[str] = []
    path = "/reviews/audit/?action=strategy.activate"

    while path:
        page = client.get(path).content.decode()
        seen += _targets(page)
        path = f"/reviews/audit/?{_next(page)}" if _next(page) else ""
        assert len(seen) <= 120

    assert seen == [f"S{n}" for n in range(119, -1, -1)]


def test_entries_with_the_same_instant_are_neither_lost_nor_repeated(
    admin_role_user: Any,
) -> None:
    rows = _entries(60)
    AuditLog.objects.filter(pk__in=[r.pk for r in rows]).update(created_at=timezone.now())
    client = _client(admin_role_user)

    first = client.get("/reviews/audit/").content.decode()
    second = client.get(f"/reviews/audit/?{_next(first)}").content.decode()

    assert sorted(_targets(first) + _targets(second)) == sorted(f"S{n}" for n in range(60))


def test_a_malformed_cursor_or_date_is_ignored(admin_role_user: Any) -> None:
    _entries(2)

    page = _client(admin_role_user).get("/reviews/audit/?after=nonsense~x&since=2026-13-45")

    assert page.status_code == 200
    assert _targets(page.content.decode()) == ["S1", "S0"]


@pytest.mark.parametrize(
    ("pk", "honoured"),
    [
        ("999999999999999999", True),
        ("1000000000000000000", False),
        ("12x", False),
        ("\u00b2", False),  # a digit to str.isdigit(), not to int()
        ("\u0661\u0662", False),  # Arabic-Indic digits: not an id of this log
    ],
)
def test_a_cursor_id_is_honoured_up_to_eighteen_digits(
    admin_role_user: Any, pk: str, honoured: bool
) -> None:
    """A cursor older than every entry leaves nothing after it; one whose id is not a
    number of at most 18 digits (the column is a bigint) is ignored: the first page."""
    _entries(2)
    before_all = (timezone.now() - timedelta(days=2)).isoformat()

    page = _client(admin_role_user).get("/reviews/audit/", {"after": f"{before_all}~{pk}"})

    assert page.status_code == 200
    assert _targets(page.content.decode()) == ([] if honoured else ["S1", "S0"])


def test_an_empty_result_says_how_to_widen_it(admin_role_user: Any) -> None:
    page = _client(admin_role_user).get("/reviews/audit/?action=nothing.like.this").content.decode()

    assert "Nothing matches these filters." in page


@pytest.mark.parametrize("query", ["", "?action=strategy.activate", "?actor=system&target=S3"])
def test_queries_stay_fixed_and_never_count_as_the_log_grows(
    admin_role_user: Any, query: str
) -> None:
    client = _client(admin_role_user)
    _entries(5)
    with CaptureQueriesContext(connection) as small:
        client.get(f"/reviews/audit/{query}")
    _entries(300)
    with CaptureQueriesContext(connection) as large:
        client.get(f"/reviews/audit/{query}")

    audit_sql = [q["sql"] for q in large.captured_queries if "reviews_auditlog" in q["sql"]]
    assert len(large) == len(small)
    assert len(audit_sql) == 1
    assert "COUNT(" not in audit_sql[0].upper()
    assert "LIMIT 51" in audit_sql[0]


def test_strategies_and_versions_in_the_log_link_to_their_pages(admin_role_user: Any) -> None:
    _entries(1, target="S12")
    _entries(1, target="v3", action="policy_version.create")
    _entries(1, target="review 4", action="review.approve")

    page = _client(admin_role_user).get("/reviews/audit/").content.decode()

    assert '<a href="/policies/strategies/12/" title="open S12">' in page
    assert '<a href="/policies/versions/3/" title="open v3">' in page
    assert 'title="open review 4"' not in page
