# Rollup levels per key, replica, route and outcome (issue 14): each bucket's groups
# kept merged per value of each label too (``Rollup.level`` 3-6, as 1 is per model), with
# their day rows and stored percentiles, so that a usage answer by one of them reads a
# row per value instead of every group's (with latency: 2.7 s over 30 days by key,
# every group's distributions parsed). The merged rows' percentiles index covers every
# label, so that each of these answers reads them by an index-only scan.
#
# Existing level-0 minute and hour rows are merged into the new levels' rows (and the
# hours into their days) in Python, by the rollup code's own upsert, a few thousand
# cells at a time: about as long as migration 0015 took over the same rows; stop the
# archive writers meanwhile, or rebuild the hours they wrote after with ``manage.py
# ferrox_stats_rollup``. Backwards, the new levels' rows are deleted.

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import ferrox_stats.indexes

# Rows read per round trip; cells upserted at once.
CHUNK = 2000
NEW_LEVELS = (3, 4, 5, 6)
DAY = 86400


def _pages(rows: Any) -> Iterator[list[Any]]:
    """Keyset pages by id, each read whole before anything is written."""
    page = list(rows.order_by("id")[:CHUNK])
    while page:
        yield page
        page = list(rows.filter(id__gt=page[-1].id).order_by("id")[:CHUNK])


def merge_label_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The rollup code of this release: the digest, the stored texts and the percentiles'
    # form are formats the rows keep, so they stay what they were when this was written.
    from ferrox_stats.archive.rollups import GROUP_FIELDS, collapsed, stored_tally, upsert
    from ferrox_stats.archive.rows import datetime_to_at_ms
    from ferrox_stats.core.rollup import Tally

    Rollup = apps.get_model("ferrox_stats", "Rollup")
    alias = schema_editor.connection.alias
    stored = Rollup.objects.using(alias).filter(level=0, span_s__in=(60, 3600))
    cells: dict[Any, Tally] = {}
    for page in _pages(stored):
        for row in page:
            tally = stored_tally(row)
            start = datetime_to_at_ms(row.bucket)
            group = tuple(getattr(row, name) for name in GROUP_FIELDS)
            spans = [(row.span_s, start)]
            if row.span_s == 3600:
                spans.append((DAY, start - start % (DAY * 1000)))
            for level in NEW_LEVELS:
                kept = collapsed(group, level)
                for span, at in spans:
                    into = cells.get((span, at, level, kept))
                    if into is None:
                        into = cells[(span, at, level, kept)] = Tally()
                    into.merge(tally)
        if len(cells) >= CHUNK:
            upsert(cells, alias)  # a cell written before is merged into, not replaced
            cells = {}
    if cells:
        upsert(cells, alias)


def delete_label_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).filter(level__in=NEW_LEVELS).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0018_rollup_statistics'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='rollup',
            name='ferrox_rollup_percentiles',
        ),
        migrations.AlterField(
            model_name='rollup',
            name='level',
            field=models.PositiveSmallIntegerField(choices=[(0, 'group'), (1, 'model'), (2, 'total'), (3, 'key'), (4, 'replica'), (5, 'route'), (6, 'outcome')], default=0),
        ),
        migrations.RunPython(merge_label_levels, delete_label_levels, elidable=False),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(condition=models.Q(('level__gt', 0)), covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'percentiles'), fields=['span_s', 'level', 'bucket'], name='ferrox_rollup_percentiles_all'),
        ),
    ]
