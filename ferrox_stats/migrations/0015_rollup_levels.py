# Rollup levels (issue 14): each bucket's groups kept merged per model and in total
# (``Rollup.level`` 1 and 2), so that a usage answer by model or by nothing reads a row
# per model or per bucket instead of every group's; ``errors`` and ``aborted`` count the
# requests of those outcomes on every row (a merged row has no outcome of its own). The
# covering indexes lead with (span_s, level): a level's range is one index range.
#
# Existing rows are level 0: their errors and aborted are set from their outcome, and
# their merged rows are made from them, bucket by bucket (their distributions merged in
# Python: 100 000 stored rows took 30 s on 2 busy cores, so millions take many minutes;
# stop the archive writers meanwhile, or rebuild the hours they wrote with ``manage.py
# ferrox_stats_rollup`` after). Backwards, the
# merged rows are deleted.

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import F, Q

import ferrox_stats.indexes

# Stored rows read per round trip, and merged rows written per INSERT.
CHUNK = 2000


def merge_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The rollup code of this release: the digest and the stored texts are formats the
    # rows keep, so they stay what they were when this migration was written.
    from ferrox_stats.archive.rollups import group_key
    from ferrox_stats.core.rollup import Tally

    Rollup = apps.get_model("ferrox_stats", "Rollup")
    rows = Rollup.objects.using(schema_editor.connection.alias)
    rows.filter(outcome="error").update(errors=F("requests"))
    rows.filter(outcome="aborted").update(aborted=F("requests"))
    stored = rows.filter(level=0).order_by("span_s", "bucket", "id")
    fields = (
        "id", "span_s", "bucket", "model", "requests", "prompt_tokens", "completion_tokens",
        "cached_tokens", "out_of_range", "errors", "aborted", "aborts", "duration", "ttft",
        "tpot",
    )

    def chunks() -> Iterator[list[tuple[Any, ...]]]:
        # Keyset pages, each read whole before anything is written: the writes below
        # never land in a scan still under way (SQLite leaves that undefined).
        page = list(stored.values_list(*fields)[:CHUNK])
        while page:
            yield page
            _, span_s, bucket, *_ = last = page[-1]
            after = (
                Q(span_s__gt=span_s)
                | Q(span_s=span_s, bucket__gt=bucket)
                | Q(span_s=span_s, bucket=bucket, id__gt=last[0])
            )
            page = list(stored.filter(after).values_list(*fields)[:CHUNK])

    pending: list[Any] = []
    cell: tuple[int, Any] | None = None
    merged: dict[tuple[int, str | None], Tally] = {}

    def flush() -> None:
        assert cell is not None
        for (level, model), tally in merged.items():
            group = (model, None, "", None, "")
            aborts, duration, ttft, tpot = tally.texts()
            pending.append(
                Rollup(
                    span_s=cell[0], bucket=cell[1], group_key=group_key(group, level),
                    model=model, route=None, replica="", via_api_key=None, outcome="",
                    level=level, requests=tally.requests, prompt_tokens=tally.prompt_tokens,
                    completion_tokens=tally.completion_tokens,
                    cached_tokens=tally.cached_tokens, out_of_range=tally.out_of_range,
                    errors=tally.errors, aborted=tally.aborted,
                    aborts=aborts, duration=duration, ttft=ttft, tpot=tpot,
                )
            )
        merged.clear()
        if len(pending) >= CHUNK:
            rows.bulk_create(pending)
            pending.clear()

    for _, span_s, bucket, model, *counters, aborts, duration, ttft, tpot in (
        row for page in chunks() for row in page
    ):
        if cell != (span_s, bucket):
            if cell is not None:
                flush()
            cell = (span_s, bucket)
        tally = Tally.stored(counters, (aborts, duration, ttft, tpot))
        for key in ((1, model), (2, None)):
            into = merged.get(key)
            if into is None:
                into = merged[key] = Tally()
            into.merge(tally)
    if cell is not None:
        flush()
    rows.bulk_create(pending)


def delete_levels(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    Rollup.objects.using(schema_editor.connection.alias).exclude(level=0).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0014_rollup_covering_indexes'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='rollup',
            name='ferrox_rollup_counters',
        ),
        migrations.RemoveIndex(
            model_name='rollup',
            name='ferrox_rollup_aborts',
        ),
        migrations.AddField(
            model_name='rollup',
            name='aborted',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='rollup',
            name='errors',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='rollup',
            name='level',
            field=models.PositiveSmallIntegerField(choices=[(0, 'group'), (1, 'model'), (2, 'total')], default=0),
        ),
        migrations.RunPython(merge_levels, delete_levels, elidable=False),
        migrations.AlterField(
            model_name='rollup',
            name='outcome',
            field=models.CharField(blank=True, choices=[('ok', 'ok'), ('error', 'error'), ('aborted', 'aborted')], max_length=16),
        ),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'requests', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'out_of_range', 'errors', 'aborted'), fields=['span_s', 'level', 'bucket'], name='ferrox_rollup_level_counters'),
        ),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(condition=models.Q(('aborts', ''), _negated=True), covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'aborts'), fields=['span_s', 'level', 'bucket'], name='ferrox_rollup_level_aborts'),
        ),
    ]
