"""The Self-RAG knowledge base: search over published ``KnowledgeArticle`` rows, and sync.

On PostgreSQL the search is full-text (``to_tsvector`` over title and body, computed at
query time; the table holds help articles, tens to hundreds of rows). On any other
database it falls back to a word-overlap score computed in Python over a bounded set of
the most recently updated articles.

The runtime never imports the sandbox app: ``kb_sync_from_rows`` takes plain dicts, and
only the ``kb_sync`` management command reads the sandbox tables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db import connection, transaction

from agents.models import KnowledgeArticle
from traces.db_threads import db_async

logger = logging.getLogger(__name__)

SNIPPET_MAX_CHARS = 600
# The Python fallback never scores more than this many rows.
FALLBACK_CANDIDATES = 500
# Terms beyond this are dropped: a search query is a handful of words, not a document.
MAX_QUERY_TERMS = 32
SEARCH_CONFIG = "english"
TITLE_WEIGHT = 3

_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words that carry no topic; shared by the fallback scorer and snippet centring.
STOPWORDS = _word_set(
    """a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers him his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours out over
    own same she should so some such than that the their theirs them then there these they
    this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours i'm i'd it's what's don't can't"""
)


@dataclass(frozen=True)
class RetrievedDoc:
    """One search hit as the Self-RAG prompts show it."""

    slug: str
    title: str
    snippet: str
    score: float


def _stem(word: str) -> str:
    """A deliberately crude plural fold, so 'items' meets 'item' and 'policies' 'policy'."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def query_words(text: str) -> list[str]:
    """The distinct content words of ``text``, lower-cased, in order of first appearance."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(text.lower()):
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]


def search_terms(text: str) -> list[str]:
    """The distinct folded content words of ``text``: what the fallback scorer compares."""
    return list(dict.fromkeys(_stem(word) for word in query_words(text)))


def snippet_around_matches(
    body: str, terms: Iterable[str], *, max_chars: int = SNIPPET_MAX_CHARS
) -> str:
    """At most ``max_chars`` of ``body``: the window holding the most query-term hits,
    started at a sentence (or word) boundary."""
    text = " ".join(body.split())
    if len(text) <= max_chars:
        return text
    wanted = set(terms)
    hits = [
        match.start() for match in _WORD_RE.finditer(text.lower()) if _stem(match.group()) in wanted
    ]
    start = 0
    if hits:
        best, best_count = hits[0], 0
        for index, position in enumerate(hits):
            count = sum(1 for other in hits[index:] if other < position + max_chars)
            if count > best_count:
                best, best_count = position, count
        start = best
        sentence_start = max(text.rfind(". ", 0, best), text.rfind("? ", 0, best))
        if sentence_start >= 0 and best - sentence_start < max_chars // 3:
            start = sentence_start + 2
        start = min(start, len(text) - max_chars)
        if start > 0 and text[start - 1] != " ":
            start = text.find(" ", start) + 1
    window = text[start : start + max_chars]
    if start + max_chars < len(text) and " " in window:
        window = window[: window.rfind(" ")]
    return window.strip()


def word_overlap_rank(
    *, query: str, rows: Iterable[Mapping[str, Any]], limit: int
) -> list[RetrievedDoc]:
    """The fallback ranking: each distinct query term found in the title scores
    ``TITLE_WEIGHT``, found in the body scores 1; rows scoring 0 are dropped; ties go to
    the slug order. ``rows`` need ``slug``, ``title`` and ``body``."""
    terms = search_terms(query)
    scored: list[tuple[float, Mapping[str, Any]]] = []
    for row in rows:
        title_terms = set(search_terms(row["title"]))
        body_terms = set(search_terms(row["body"]))
        score = sum(TITLE_WEIGHT * (t in title_terms) + (t in body_terms) for t in terms)
        if score:
            scored.append((float(score), row))
    scored.sort(key=lambda pair: (-pair[0], pair[1]["slug"]))
    return [
        RetrievedDoc(
            slug=row["slug"],
            title=row["title"],
            snippet=snippet_around_matches(row["body"], terms),
            score=score,
        )
        for score, row in scored[:limit]
    ]


def _postgres_search(*, query: str, limit: int) -> list[RetrievedDoc]:
    words = query_words(query)
    if not words:
        return []
    # OR of the words (PostgreSQL stems each): a rewritten query may carry words no single
    # article has, and ts_rank still puts the articles matching most of them first.
    ts_query = SearchQuery(words[0], config=SEARCH_CONFIG)
    for word in words[1:]:
        ts_query = ts_query | SearchQuery(word, config=SEARCH_CONFIG)
    terms = search_terms(query)
    vector = SearchVector("title", weight="A", config=SEARCH_CONFIG) + SearchVector(
        "body", weight="B", config=SEARCH_CONFIG
    )
    rows = (
        KnowledgeArticle.objects.filter(is_published=True)
        .annotate(document=vector, rank=SearchRank(vector, ts_query))
        .filter(document=ts_query)
        .order_by("-rank", "slug")
        .values("slug", "title", "body", "rank")[:limit]
    )
    return [
        RetrievedDoc(
            slug=row["slug"],
            title=row["title"],
            snippet=snippet_around_matches(row["body"], terms),
            score=round(float(row["rank"]), 6),
        )
        for row in rows
    ]


def kb_search(*, query: str, limit: int = 3) -> list[RetrievedDoc]:
    """The ``limit`` published articles most relevant to ``query``, best first."""
    if limit <= 0 or not query.strip():
        return []
    if connection.vendor == "postgresql":
        return _postgres_search(query=query, limit=limit)
    candidates = KnowledgeArticle.objects.filter(is_published=True).order_by("-updated_at")
    rows = candidates.values("slug", "title", "body")[:FALLBACK_CANDIDATES]
    return word_overlap_rank(query=query, rows=rows, limit=limit)


async def kb_asearch(query: str, limit: int = 3) -> list[RetrievedDoc]:
    """``kb_search`` for the Self-RAG loop; positional, as its ``search`` callable takes it."""
    return await db_async(kb_search)(query=query, limit=limit)


@transaction.atomic
def kb_sync_from_rows(rows: Iterable[Mapping[str, Any]]) -> int:
    """Upsert sandbox help articles (``slug``, ``title``, ``category``, ``body``) as
    ``source="sandbox"`` rows; return how many were written.

    Admin-written articles with the same slug are left alone; an unknown category is
    stored as ``other``. Publication state of existing rows is kept, so an article
    unpublished in admin stays unpublished.
    """
    categories = set(KnowledgeArticle.Category.values)
    written = 0
    for row in rows:
        slug = row["slug"]
        existing = KnowledgeArticle.objects.select_for_update().filter(slug=slug).first()
        if existing is not None and existing.source != KnowledgeArticle.Source.SANDBOX:
            logger.info("kb.sync.skipped", extra={"slug": slug, "source": existing.source})
            continue
        category = row.get("category") or KnowledgeArticle.Category.OTHER
        KnowledgeArticle.objects.update_or_create(
            slug=slug,
            defaults={
                "title": row["title"],
                "category": category if category in categories else "other",
                "body": row["body"],
                "source": KnowledgeArticle.Source.SANDBOX,
            },
        )
        written += 1
    logger.info("kb.sync", extra={"written": written})
    return written
