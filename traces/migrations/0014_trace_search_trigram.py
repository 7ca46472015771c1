"""Trigram indexes behind the trace list's free-text search (PostgreSQL only).

The search is ``query`` or ``final_answer`` containing the text, case-insensitive, which
Django writes as ``UPPER(column::text) LIKE UPPER(%s)``: the indexes are on that expression,
so a rare word is an index lookup instead of a scan of every trace. ``pg_trgm`` is a trusted
extension (PostgreSQL 13+): the database's owner may create it. Other databases skip this.
"""

from django.db import migrations

COLUMNS = ("query", "final_answer")


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for column in COLUMNS:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS trace_{column}_trgm ON traces_trace "
            f'USING gin ((UPPER("{column}"::text)) gin_trgm_ops)'
        )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in COLUMNS:
        schema_editor.execute(f"DROP INDEX IF EXISTS trace_{column}_trgm")


class Migration(migrations.Migration):
    dependencies = [("traces", "0013_trace_failed_steps_and_list_indexes")]

    operations = [migrations.RunPython(forward, backward)]
