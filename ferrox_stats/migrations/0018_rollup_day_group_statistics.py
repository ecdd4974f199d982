# Statistics of how many (UTC day, group) combinations the rollups hold (issue 14), on
# PostgreSQL. A usage answer at day buckets sums every group's hour rows per day
# (``archive.usage``: the day as ``CAST(EXTRACT(EPOCH FROM bucket) AS bigint) / 86400``).
# Without these the planner cannot know how few days an expression of the bucket makes:
# it guessed 38 595 groups for 600 (30 days by key), so sorted all 72 000 rows, on disk
# at the default work_mem, instead of hashing them (130 ms against 76 ms;
# docs/benchmarks.md, "Usage API, third pass"). One ndistinct object over the day and
# the five dimensions covers every grouping of them. ANALYZE (autovacuum's, or the
# operator's) fills them; it takes about 2 s longer per 0.74M rollup rows. SQLite has
# no such statistics: nothing is done there.

from django.db import migrations

STATISTICS = "ferrox_rollup_day_groups"
DAY = "(CAST(EXTRACT(EPOCH FROM bucket) AS bigint) / 86400)"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("ferrox_stats", "Rollup")._meta.db_table)
    schema_editor.execute(
        f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (ndistinct) "
        f"ON {DAY}, model, route, replica, via_api_key, outcome FROM {table}"
    )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0017_rollup_days_and_percentiles'),
    ]

    operations = [migrations.RunPython(create, drop)]
