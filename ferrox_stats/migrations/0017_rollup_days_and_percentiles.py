# The merged levels' rows (per model, in total) kept per UTC day too, and each merged
# row's percentiles stored beside its distributions (issue 14: a 30-day answer by model
# or by nothing reads its totals from 30 day rows, not 720 hour rows, and its per-hour
# percentiles without parsing a distribution).
#
# Existing merged hour rows get their day rows, made by merging them day by day, and
# their percentiles (both in Python; minute rows store none: their answers parse). A
# partial covering index holds the merged rows' percentiles, so that an answer reads
# them by an index-only scan. Backwards, the day rows are deleted (the percentiles
# column and its index go with the field).

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import ferrox_stats.indexes

# Rows read per round trip, and written per statement.
CHUNK = 2000
DAY = 86400


def _pages(rows: Any) -> Iterator[list[Any]]:
    """Keyset pages by id, each read whole before anything is written."""
    page = list(rows.order_by("id")[:CHUNK])
    while page:
        yield page
        page = list(rows.filter(id__gt=page[-1].id).order_by("id")[:CHUNK])


def days_and_percentiles(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The rollup code of this release: the digest, the stored texts and the percentiles'
    # form are formats the rows keep, so they stay what they were when this was written.
    from ferrox_stats.archive.rollups import day_cells, group_key, percentiles_text, stored_tally

    Rollup = apps.get_model("ferrox_stats", "Rollup")
    rows = Rollup.objects.using(schema_editor.connection.alias)
    hours = rows.filter(level__gt=0, span_s=3600)
    for page in _pages(hours.filter(percentiles="")):
        written = [
            (percentiles_text(stored_tally(row), row.level, row.span_s), row.id) for row in page
        ]
        with schema_editor.connection.cursor() as cursor:
            # One UPDATE per row, in one round trip (psycopg pipelines executemany).
            cursor.executemany(
                "UPDATE ferrox_stats_rollup SET percentiles = %s WHERE id = %s", written
            )
    hours = hours.order_by("bucket", "id")
    made: list[Any] = []
    day_start: Any = None
    pending: list[Any] = []

    def flush() -> None:
        for (span, start_ms, level, group), tally in day_cells(pending).items():
            aborts, duration, ttft, tpot = tally.texts(known_aborts=False)
            known = tally.known_aborts()
            made.append(
                Rollup(
                    span_s=span, bucket=pending[0].bucket.replace(hour=0),
                    group_key=group_key(group, level), model=group[0], route=None,
                    replica="", via_api_key=None, outcome="", level=level,
                    requests=tally.requests, prompt_tokens=tally.prompt_tokens,
                    completion_tokens=tally.completion_tokens,
                    cached_tokens=tally.cached_tokens, out_of_range=tally.out_of_range,
                    errors=tally.errors, aborted=tally.aborted,
                    aborts_client_disconnect=known[0], aborts_explicit=known[1],
                    aborts_timeout=known[2], aborts=aborts, duration=duration, ttft=ttft,
                    tpot=tpot, percentiles=percentiles_text(tally, level, span),
                )
            )  # fmt: skip
        pending.clear()

    # Written once the scan is over (a few rows a day: SQLite leaves writes into a
    # scan still under way undefined).
    for row in hours.iterator(chunk_size=CHUNK):
        day = row.bucket.date()
        if day != day_start and pending:
            flush()
        day_start = day
        pending.append(row)
    if pending:
        flush()
    rows.bulk_create(made, batch_size=CHUNK)


def delete_days(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).filter(span_s=DAY).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0016_rollup_known_abort_reasons'),
    ]

    operations = [
        migrations.AddField(
            model_name='rollup',
            name='percentiles',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.RunPython(days_and_percentiles, delete_days, elidable=False),
        migrations.AlterField(
            model_name='rollup',
            name='span_s',
            field=models.PositiveIntegerField(choices=[(60, 'minute'), (3600, 'hour'), (86400, 'day')]),
        ),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(condition=models.Q(('level__gt', 0)), covering=('model', 'percentiles'), fields=['span_s', 'level', 'bucket'], name='ferrox_rollup_percentiles'),
        ),
    ]
