"""Copy the sandbox help-centre articles into the Self-RAG knowledge base."""

from typing import Any

from django.core.management.base import BaseCommand

from agents.retrieval.knowledge import kb_sync_from_rows


class Command(BaseCommand):
    help = "Upsert sandbox Article rows as source=sandbox KnowledgeArticle rows."

    def handle(self, *args: Any, **options: Any) -> None:
        # Setup glue: the only place outside the sandbox app allowed to read its tables.
        from sandbox.models import Article

        rows = Article.objects.order_by("slug").values("slug", "title", "category", "body")
        written = kb_sync_from_rows(rows)
        self.stdout.write(f"knowledge base: {written} sandbox articles synced")
