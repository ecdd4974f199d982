"""The commit-order cursor waits only for the archive's own writers (issue 11).

``commit_xid`` (0004) could only be served below the oldest transaction open anywhere
on the server. ``commit_seq`` replaces it: on PostgreSQL its default,
``ferrox_stats_next_commit_seq()``, takes a transaction-scoped advisory lock and then
draws from ``ferrox_stats_commit_seq``. Every insert into the archive, by any path,
so holds the lock from its first row until it commits: values are allocated in
commit order, and every committed row can be served at once.

Existing rows are numbered in their old cursor order, (commit_xid, id), before any
new row; the sequence continues after them. The table is locked (and rewritten once)
for the length of the migration.
"""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import ferrox_stats.models

SEQUENCE = "ferrox_stats_commit_seq"
FUNCTION = "ferrox_stats_next_commit_seq"
# models.COMMIT_LOCK_KEY, frozen here. Advisory locks are per database, so only
# writers of this database's archive ever wait on it.
LOCK_KEY = 0x666572726F780001


def create_allocator(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    # CACHE 1: a session must not hold values drawn before it took the lock.
    schema_editor.execute(f"CREATE SEQUENCE {SEQUENCE} AS bigint CACHE 1 NO CYCLE")
    schema_editor.execute(
        f"""
        CREATE FUNCTION {FUNCTION}() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            -- Held until the transaction ends, so no later writer can draw a value
            -- until this one's rows are visible (or rolled back).
            PERFORM pg_advisory_xact_lock({LOCK_KEY});
            RETURN nextval('{SEQUENCE}');
        END
        $$
        """
    )


def drop_allocator(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    schema_editor.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")


def number_existing_rows(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite's cursor is the id.
    table = apps.get_model("ferrox_stats", "FinishedRequest")._meta.db_table
    schema_editor.execute(
        f"UPDATE {table} AS t SET commit_seq = o.n FROM ("
        f"  SELECT id, row_number() OVER (ORDER BY commit_xid NULLS FIRST, id) AS n"
        f"  FROM {table}) AS o "
        "WHERE t.id = o.id"
    )
    schema_editor.execute(
        f"SELECT setval('{SEQUENCE}', COALESCE(MAX(commit_seq), 0) + 1, false) FROM {table}"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("ferrox_stats", "0005_api_token_infer_scope"),
    ]

    operations = [
        migrations.RunPython(create_allocator, drop_allocator),
        # No default yet: adding the column is then instant, and the rows are numbered
        # in cursor order, not in whatever order a volatile default would visit them.
        migrations.AddField(
            model_name="finishedrequest",
            name="commit_seq",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(number_existing_rows, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="finishedrequest",
            name="commit_seq",
            field=models.BigIntegerField(
                blank=True,
                db_default=ferrox_stats.models.NextCommitSeq(),
                editable=False,
                null=True,
            ),
        ),
        migrations.RemoveIndex(
            model_name="finishedrequest",
            name="ferrox_fr_commit_id",
        ),
        migrations.RemoveField(
            model_name="finishedrequest",
            name="commit_xid",
        ),
        migrations.AddIndex(
            model_name="finishedrequest",
            index=models.Index(fields=["commit_seq"], name="ferrox_fr_commit_seq"),
        ),
    ]
