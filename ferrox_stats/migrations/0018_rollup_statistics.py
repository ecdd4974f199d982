# Statistics the planner needs to read the rollups well (issue 14), on PostgreSQL.
#
# ``ferrox_rollup_levels``: how often each (span_s, level) pair occurs. Every usage read
# filters on both, and they are far from independent (minutes are every group's rows,
# the merged levels a few per bucket): taken as independent, 3 600 rows by model over
# 30 days were guessed 17 000, so the planner started parallel workers and merged
# their sorts, 30 ms against 18 ms for the one-process hash it now plans.
#
# ``ferrox_rollup_day_groups``: how many (UTC day, group) combinations there are. A
# usage answer at day buckets sums every group's hour rows per day (``archive.usage``:
# the day as ``CAST(EXTRACT(EPOCH FROM bucket) AS bigint) / 86400``), and without these
# the planner cannot know how few days an expression of the bucket makes: it guessed
# 38 595 groups for 600 (30 days by key), so sorted all 72 000 rows, on disk at the
# default work_mem, instead of hashing them (130 ms against 76 ms). One ndistinct object
# over the day and the five dimensions covers every grouping of them.
#
# docs/benchmarks.md, "Usage API, third pass". ANALYZE (autovacuum's, or the
# operator's) fills them: about 2 s longer per 0.74M rollup rows. SQLite has no such
# statistics: nothing is done there.

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

DAY = "(CAST(EXTRACT(EPOCH FROM bucket) AS bigint) / 86400)"
STATISTICS = {
    "ferrox_rollup_levels": "(mcv) ON span_s, level",
    "ferrox_rollup_day_groups": f"(ndistinct) ON {DAY}, model, route, replica, via_api_key, outcome",
}


def create(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("ferrox_stats", "Rollup")._meta.db_table)
    for name, what in STATISTICS.items():
        schema_editor.execute(f"CREATE STATISTICS IF NOT EXISTS {name} {what} FROM {table}")


def drop(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in STATISTICS:
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0017_rollup_days_and_percentiles'),
    ]

    operations = [migrations.RunPython(create, drop)]
