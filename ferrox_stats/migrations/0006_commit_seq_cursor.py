"""The commit-order cursor waits only for the archive's own writers (issue 11).

``commit_xid`` (0004) could only be served below the oldest transaction open anywhere
on the server. ``commit_seq`` replaces it: on PostgreSQL a statement trigger makes
every INSERT or COPY into the archive take a transaction-scoped advisory lock before
any of its rows draws its value from ``ferrox_stats_commit_seq``. The lock is held
until commit, so values are allocated in commit order and every committed row can be
served at once.

Existing rows are numbered in their old cursor order, (commit_xid, id), before any
new row; the sequence continues after them. Every row is updated once, with the table
locked for the length of the migration.
"""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import ferrox_stats.models

SEQUENCE = "ferrox_stats_commit_seq"
FUNCTION = "ferrox_stats_take_commit_lock"
TRIGGER = "ferrox_stats_commit_order"
TABLE = "ferrox_stats_finishedrequest"
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
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- Held until the transaction ends, so no later writer can draw a value
            -- until this one's rows are visible (or rolled back).
            PERFORM pg_advisory_xact_lock({LOCK_KEY});
            RETURN NULL;
        END
        $$
        """
    )
    # A BEFORE STATEMENT trigger fires before the statement computes any row's
    # defaults, for INSERT and COPY alike: once per statement, not per row.
    schema_editor.execute(
        f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON {TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )


def drop_allocator(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {TABLE}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    schema_editor.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")


def number_existing_rows(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite's cursor is the id.
    schema_editor.execute(
        f"UPDATE {TABLE} AS t SET commit_seq = o.n FROM ("
        f"  SELECT id, row_number() OVER (ORDER BY commit_xid NULLS FIRST, id) AS n"
        f"  FROM {TABLE}) AS o "
        "WHERE t.id = o.id"
    )
    schema_editor.execute(
        f"SELECT setval('{SEQUENCE}', COALESCE(MAX(commit_seq), 0) + 1, false) FROM {TABLE}"
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
