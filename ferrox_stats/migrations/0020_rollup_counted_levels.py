# Rollup levels per label and model, counters only (issue 14): a priced usage answer
# by one label (key, replica, route or outcome) summed every group's rows, because a
# price is a model's (GET v1/usage?group_by=replica&latency=duration over 30 days:
# 131 ms of its 166 in that sum). ``Rollup.level`` 7-10 keep the counters and abort
# reasons per (label, model), and per UTC day too, with no distributions.
#
# Existing level-0 minute and hour rows are summed into the new levels' rows (and the
# hours into their days) in Python, by the rollup code's own upsert, a few thousand
# cells at a time (counters only: quicker than migration 0019, which merged
# distributions); stop the archive writers meanwhile, or rebuild the hours they wrote
# after with ``manage.py ferrox_stats_rollup``. Backwards, the new levels' rows are
# deleted.

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# Rows read per round trip; cells upserted at once.
CHUNK = 2000
NEW_LEVELS = (7, 8, 9, 10)
DAY = 86400


def _pages(rows: Any) -> Iterator[list[Any]]:
    """Keyset pages by id, each read whole before anything is written."""
    page = list(rows.order_by("id")[:CHUNK])
    while page:
        yield page
        page = list(rows.filter(id__gt=page[-1].id).order_by("id")[:CHUNK])


def sum_counted_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The rollup code of this release: the digest and the stored texts are formats the
    # rows keep, so they stay what they were when this was written.
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
                    into.merge_counters(tally)
        if len(cells) >= CHUNK:
            upsert(cells, alias)  # a cell written before is added to, not replaced
            cells = {}
    if cells:
        upsert(cells, alias)


def delete_counted_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).filter(level__in=NEW_LEVELS).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0019_rollup_label_levels'),
    ]

    operations = [
        migrations.AlterField(
            model_name='rollup',
            name='level',
            field=models.PositiveSmallIntegerField(choices=[(0, 'group'), (1, 'model'), (2, 'total'), (3, 'key'), (4, 'replica'), (5, 'route'), (6, 'outcome'), (7, 'key and model, counters'), (8, 'replica and model, counters'), (9, 'route and model, counters'), (10, 'outcome and model, counters')], default=0),
        ),
        migrations.RunPython(sum_counted_levels, delete_counted_levels, elidable=False),
    ]
