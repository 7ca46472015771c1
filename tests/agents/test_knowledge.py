"""The Self-RAG knowledge base: PostgreSQL full-text ranking, the word-overlap fallback,
snippets, and the sync from sandbox rows."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import connection

from agents.models import KnowledgeArticle
from agents.retrieval.knowledge import (
    SNIPPET_MAX_CHARS,
    kb_asearch,
    kb_search,
    kb_sync_from_rows,
    snippet_around_matches,
    word_overlap_rank,
)

ARTICLES = [
    {
        "slug": "return-window",
        "title": "How long do I have to return an item?",
        "category": "policy",
        "body": "You can return most items within 30 days of delivery for a full refund. "
        "Final-sale items cannot be returned.",
    },
    {
        "slug": "refund-timing",
        "title": "When will I get my refund?",
        "category": "faq",
        "body": "Refunds are issued within 5 business days after the returned items arrive.",
    },
    {
        "slug": "shipping-times",
        "title": "How long does shipping take?",
        "category": "faq",
        "body": "Standard shipping takes 3-5 business days. Expedited shipping takes 2 days.",
    },
    {
        "slug": "gift-cards",
        "title": "Gift cards",
        "category": "other",
        "body": "Digital gift cards are delivered by email and never expire.",
    },
]


@pytest.fixture
def articles(db: None) -> None:
    KnowledgeArticle.objects.bulk_create(
        [KnowledgeArticle(source=KnowledgeArticle.Source.ADMIN, **row) for row in ARTICLES]
    )


def test_the_test_database_is_postgresql(db: None) -> None:
    assert connection.vendor == "postgresql"


@pytest.mark.parametrize(
    ("query", "top_slug"),
    [
        ("How many days do I have to return an item?", "return-window"),
        ("refund issued", "refund-timing"),
        ("expedited shipping", "shipping-times"),
        ("do gift cards expire", "gift-cards"),
    ],
)
def test_search_ranks_the_most_relevant_article_first(
    articles: None, query: str, top_slug: str
) -> None:
    docs = kb_search(query=query, limit=3)

    assert docs[0].slug == top_slug
    assert [doc.score for doc in docs] == sorted((doc.score for doc in docs), reverse=True)
    assert all(doc.score > 0 for doc in docs)


def test_search_matches_stemmed_words_and_any_of_the_terms(articles: None) -> None:
    # "returning" meets "return"; "warranty" matches nothing and does not empty the result.
    docs = kb_search(query="returning warranty", limit=5)

    assert [doc.slug for doc in docs][:1] == ["return-window"]
    assert "gift-cards" not in [doc.slug for doc in docs]


def test_search_respects_the_limit_and_returns_snippets(articles: None) -> None:
    docs = kb_search(query="days items shipping refund", limit=2)

    assert len(docs) == 2
    assert all(doc.snippet and len(doc.snippet) <= SNIPPET_MAX_CHARS for doc in docs)


@pytest.mark.parametrize("query", ["", "   ", "the and of", "zebra"])
def test_search_without_content_words_or_matches_is_empty(articles: None, query: str) -> None:
    assert kb_search(query=query, limit=3) == []


def test_unpublished_articles_are_never_returned(articles: None) -> None:
    KnowledgeArticle.objects.filter(slug="gift-cards").update(is_published=False)

    docs = kb_search(query="gift cards", limit=3)

    assert "gift-cards" not in [doc.slug for doc in docs]


def test_async_search_gives_the_same_result(articles: None) -> None:
    query = "refund issued"

    assert async_to_sync(kb_asearch)(query, 2) == kb_search(query=query, limit=2)


# --- the fallback scorer, called on plain rows ------------------------------------------


def test_fallback_ranks_title_hits_above_body_hits_and_drops_non_matches() -> None:
    docs = word_overlap_rank(query="How long does shipping take?", rows=ARTICLES, limit=5)

    assert [doc.slug for doc in docs] == ["shipping-times", "return-window"]
    # shipping: title 3 + body 1; take (takes): title 3 + body 1; long: title 3.
    assert [doc.score for doc in docs] == [11.0, 3.0]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("return items", ["return-window", "refund-timing"]),
        ("refunds", ["refund-timing", "return-window"]),
        ("gift", ["gift-cards"]),
        ("the of and", []),
    ],
)
def test_fallback_folds_plurals_and_orders_ties_by_slug(query: str, expected: list[str]) -> None:
    docs = word_overlap_rank(query=query, rows=ARTICLES, limit=3)

    assert [doc.slug for doc in docs] == expected


def test_fallback_respects_the_limit() -> None:
    docs = word_overlap_rank(query="days", rows=ARTICLES, limit=1)

    assert len(docs) == 1


def test_snippet_is_centred_on_the_matches_of_a_long_body() -> None:
    filler = " ".join(f"Sentence {n} talks about nothing in particular." for n in range(40))
    body = f"{filler} Warranty claims are handled within 14 days. {filler}"

    snippet = snippet_around_matches(body, ["warranty", "claim"])

    assert len(snippet) <= SNIPPET_MAX_CHARS
    assert snippet.startswith("Warranty claims are handled within 14 days.")


def test_snippet_of_a_short_body_is_the_whole_body() -> None:
    assert snippet_around_matches("Short  body.\nTwo lines.", ["body"]) == (
        "Short body. Two lines."
    )


# --- sync -----------------------------------------------------------------------------


def test_sync_upserts_sandbox_rows(db: None) -> None:
    # given a first sync
    assert kb_sync_from_rows(ARTICLES[:2]) == 2
    # when the texts change and a new article appears
    changed = [{**ARTICLES[0], "title": "Return window"}, ARTICLES[1], ARTICLES[2]]
    written = kb_sync_from_rows(changed)
    # then rows are updated in place, not duplicated
    assert written == 3
    assert KnowledgeArticle.objects.count() == 3
    article = KnowledgeArticle.objects.get(slug="return-window")
    assert (article.title, article.source) == ("Return window", "sandbox")


def test_sync_keeps_admin_articles_and_unpublished_state(db: None) -> None:
    KnowledgeArticle.objects.create(
        slug="gift-cards", title="Our own text", body="Admin body.", source="admin"
    )
    kb_sync_from_rows([ARTICLES[0]])
    KnowledgeArticle.objects.filter(slug="return-window").update(is_published=False)

    written = kb_sync_from_rows([ARTICLES[0], ARTICLES[3]])

    assert written == 1
    assert KnowledgeArticle.objects.get(slug="gift-cards").title == "Our own text"
    assert KnowledgeArticle.objects.get(slug="return-window").is_published is False


@pytest.mark.parametrize(("category", "stored"), [("faq", "faq"), ("shipping", "other")])
def test_sync_stores_an_unknown_category_as_other(db: None, category: str, stored: str) -> None:
    kb_sync_from_rows([{**ARTICLES[3], "category": category}])

    assert KnowledgeArticle.objects.get(slug="gift-cards").category == stored


def test_kb_sync_command_copies_the_sandbox_articles(db: None) -> None:
    from sandbox.models import Article

    Article.objects.bulk_create(
        [
            Article(
                slug=row["slug"],
                title=row["title"],
                category="faq",
                body=row["body"],
                updated_at=datetime(2025, 1, 1, tzinfo=UTC),
            )
            for row in ARTICLES[:2]
        ]
    )

    out = io.StringIO()
    call_command("kb_sync", stdout=out)

    assert sorted(KnowledgeArticle.objects.values_list("slug", "source")) == [
        ("refund-timing", "sandbox"),
        ("return-window", "sandbox"),
    ]
    assert "2 sandbox articles synced" in out.getvalue()
