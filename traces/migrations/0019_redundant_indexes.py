"""Drop the Trace and Step indexes that others already provide; every row written, by a
run or by the OTLP ingest, updated them all (Trace had 26 indexes, Step 9).

- A single-column index whose column leads a composite index (``agent_id``:
  ``trace_agent_time``, ``created_by_id``: ``trace_owner_time``, ``status``:
  ``trace_status_time``, a step's ``trace_id``: ``step_unique_number``).
- The ``varchar_pattern_ops`` ("_like") index Django adds on PostgreSQL beside the index
  of an indexed or unique CharField, for ``LIKE 'x%'``: no query matches these columns by
  pattern. The plain indexes of ``query_hash``, ``session_id`` and ``customer_id`` stay,
  renamed to their names in ``Meta.indexes``; ``idempotency_key``'s unique constraint
  stays, renamed to its ``Meta.constraints`` name.

The state changes are what ``makemigrations`` writes; the database changes are made
here, so that no index is rebuilt (dropping and renaming take a moment on any table, and
on PostgreSQL the drops do not block writers).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Django's names for these indexes (a hash of table and columns: the same everywhere).
DROPPED = [
    ("traces_trace", "traces_trace_agent_id_df07ee29", "agent_id", ""),
    ("traces_trace", "traces_trace_created_by_id_dd9176ac", "created_by_id", ""),
    ("traces_trace", "traces_trace_status_f833142a", "status", ""),
    ("traces_trace", "traces_trace_status_f833142a_like", "status", "varchar_pattern_ops"),
    ("traces_trace", "traces_trace_session_id_80c32dc2_like", "session_id", "varchar_pattern_ops"),
    (
        "traces_trace",
        "traces_trace_customer_id_bfcd0f33_like",
        "customer_id",
        "varchar_pattern_ops",
    ),
    ("traces_trace", "traces_trace_query_hash_dfe52f31_like", "query_hash", "varchar_pattern_ops"),
    ("traces_step", "traces_step_trace_id_ba5934e4", "trace_id", ""),
    (
        "traces_step",
        "traces_step_idempotency_key_f3cd76fc_like",
        "idempotency_key",
        "varchar_pattern_ops",
    ),
]
RENAMED = [
    ("traces_trace", "traces_trace_query_hash_dfe52f31", "trace_query_hash", "query_hash"),
    ("traces_trace", "traces_trace_session_id_80c32dc2", "trace_session", "session_id"),
    ("traces_trace", "traces_trace_customer_id_bfcd0f33", "trace_customer", "customer_id"),
]
UNIQUE = ("traces_step", "idempotency_key", "step_idempotency_key")


def _rename(schema_editor, table, old, new, column):
    q = schema_editor.quote_name
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX IF EXISTS {q(old)} RENAME TO {q(new)}")
    else:  # SQLite renames no index: made again (the embedded shape's small tables)
        schema_editor.execute(f"DROP INDEX IF EXISTS {q(old)}")
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {q(new)} ON {q(table)} ({q(column)})")


def _unique_rename(schema_editor, to_name):
    """Rename idempotency_key's unique constraint (PostgreSQL named it at CREATE TABLE;
    SQLite's is part of the column and has no name)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    table, column, _ = UNIQUE
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u'"
            " AND conkey = ARRAY[(SELECT attnum FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attname = %s)]::int2[]",
            [table, table, column],
        )
        row = cursor.fetchone()
    if row and row[0] != to_name:
        q = schema_editor.quote_name
        schema_editor.execute(
            f"ALTER TABLE {q(table)} RENAME CONSTRAINT {q(row[0])} TO {q(to_name)}"
        )


def forwards(apps, schema_editor):
    q = schema_editor.quote_name
    # CONCURRENTLY: writers go on while an index goes (it cannot run in a transaction:
    # the migration is not atomic; every step can be run again).
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    for _, name, _, _ in DROPPED:
        schema_editor.execute(f"DROP INDEX {concurrently}IF EXISTS {q(name)}")
    for table, old, new, column in RENAMED:
        _rename(schema_editor, table, old, new, column)
    _unique_rename(schema_editor, UNIQUE[2])


def backwards(apps, schema_editor):
    q = schema_editor.quote_name
    postgres = schema_editor.connection.vendor == "postgresql"
    _unique_rename(schema_editor, f"{UNIQUE[0]}_{UNIQUE[1]}_key")
    for table, old, new, column in RENAMED:
        _rename(schema_editor, table, new, old, column)
    for table, name, column, opclass in DROPPED:
        if opclass and not postgres:
            continue
        indexed = f"{q(column)} {opclass}".strip()
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {q(name)} ON {q(table)} ({indexed})")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("agents", "0008_customerfact"),
        ("traces", "0018_trace_learning"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="idempotency_key",
                    field=models.CharField(blank=True, max_length=64, null=True),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="trace",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="traces.trace",
                    ),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="traces",
                        to="agents.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="created_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="traces",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="customer_id",
                    field=models.CharField(blank=True, max_length=64),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="query_hash",
                    field=models.CharField(max_length=32),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="session_id",
                    field=models.CharField(blank=True, max_length=64),
                ),
                migrations.AlterField(
                    model_name="trace",
                    name="status",
                    field=models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("finished", "Finished"),
                            ("fallback", "Fallback"),
                            ("failed", "Failed"),
                        ],
                        default="queued",
                        max_length=10,
                    ),
                ),
                migrations.AddIndex(
                    model_name="trace",
                    index=models.Index(fields=["query_hash"], name="trace_query_hash"),
                ),
                migrations.AddIndex(
                    model_name="trace",
                    index=models.Index(fields=["session_id"], name="trace_session"),
                ),
                migrations.AddIndex(
                    model_name="trace",
                    index=models.Index(fields=["customer_id"], name="trace_customer"),
                ),
                migrations.AddConstraint(
                    model_name="step",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key",), name="step_idempotency_key"
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
