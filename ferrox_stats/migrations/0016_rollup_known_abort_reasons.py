# The abort reasons every feeder gives (client_disconnect, explicit, timeout) counted in
# columns of their own (issue 14): the database sums them with the other counters, from
# the covering index, so that a usage answer reads no JSON for them (it summed every
# aborted row's JSON: 60-100 ms of a 30-day answer by key). ``aborts`` keeps any other
# reason. Existing rows that have reasons are rewritten in keyset pages; backwards, the
# columns are folded back into the JSON.

from __future__ import annotations

import json
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Q

import ferrox_stats.indexes

# The reasons and their columns as this migration made them (not imported: a later
# release may count more, and this migration must keep doing what it did).
KNOWN = {
    "client_disconnect": "aborts_client_disconnect",
    "explicit": "aborts_explicit",
    "timeout": "aborts_timeout",
}
# Rows read and rewritten per round trip.
CHUNK = 2000


def _text(aborts: dict[str, int]) -> str:
    # The stored form: compact JSON, keys sorted ("" when empty).
    return json.dumps(aborts, separators=(",", ":"), sort_keys=True) if aborts else ""


def _pages(rows: Any) -> Any:
    """Keyset pages of ``(id, aborts, *known columns)`` by id, each read whole before
    it is written."""
    fields = ("id", "aborts", *KNOWN.values())
    page = list(rows.order_by("id").values_list(*fields)[:CHUNK])
    while page:
        yield page
        page = list(rows.filter(id__gt=page[-1][0]).order_by("id").values_list(*fields)[:CHUNK])


def _write(schema_editor: BaseDatabaseSchemaEditor, rows: list[tuple[Any, ...]]) -> None:
    # One UPDATE per row by id, sent in one round trip (psycopg pipelines executemany):
    # bulk_update's CASE over a page costs several times as much.
    table = "ferrox_stats_rollup"
    columns = ", ".join(f"{column} = %s" for column in ("aborts", *KNOWN.values()))
    with schema_editor.connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {columns} WHERE id = %s", rows)


def columns_from_json(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    rows = Rollup.objects.using(schema_editor.connection.alias)
    for page in _pages(rows.exclude(aborts="")):
        written = []
        for row_id, text, *_ in page:
            aborts = json.loads(text)
            known = [aborts.pop(reason, 0) for reason in KNOWN]
            written.append((_text(aborts), *known, row_id))
        _write(schema_editor, written)


def json_from_columns(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Rollup = apps.get_model("ferrox_stats", "Rollup")
    rows = Rollup.objects.using(schema_editor.connection.alias)
    counted = Q()
    for column in KNOWN.values():
        counted |= Q(**{f"{column}__gt": 0})
    for page in _pages(rows.filter(counted)):
        written = []
        for row_id, text, *known in page:
            aborts = json.loads(text) if text else {}
            for reason, n in zip(KNOWN, known, strict=True):
                if n:
                    aborts[reason] = aborts.get(reason, 0) + n
            written.append((_text(aborts), *(0 for _ in KNOWN), row_id))
        _write(schema_editor, written)


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0015_rollup_levels'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='rollup',
            name='ferrox_rollup_level_counters',
        ),
        migrations.AddField(
            model_name='rollup',
            name='aborts_client_disconnect',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='rollup',
            name='aborts_explicit',
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='rollup',
            name='aborts_timeout',
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(columns_from_json, json_from_columns, elidable=False),
        migrations.AddIndex(
            model_name='rollup',
            index=ferrox_stats.indexes.CoveringIndex(covering=('model', 'route', 'replica', 'via_api_key', 'outcome', 'requests', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'out_of_range', 'errors', 'aborted', 'aborts_client_disconnect', 'aborts_explicit', 'aborts_timeout'), fields=['span_s', 'level', 'bucket'], name='ferrox_rollup_level_counters'),
        ),
    ]
