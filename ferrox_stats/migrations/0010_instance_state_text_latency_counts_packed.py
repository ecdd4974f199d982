# Heartbeat rows read faster (issue 10): Instance.state becomes JSON text instead of
# jsonb (PostgreSQL's jsonb output, and the JSON decoding of ~60 000 bucket counts, were
# most of a v1/fleet read at 64 instances), and the three latency distributions' bucket
# counts move to Instance.latency_counts, packed as little-endian lanes of 2 to 8 bytes
# whose top byte stays free (ferrox_stats/fleet_rows.py).
#
# Existing rows are converted: their counts (lists, form D) are packed and the
# breakdown the previous release kept empty is dropped. A row that is not such a
# document is left as it is (v1/fleet skips and counts it). latency_counts is NULL-able
# so that a worker of the previous release, still running during a rolling upgrade,
# can keep writing its row (its lists stay in state; this release reads them).
# TelemetryRouter sends this, RunPython included, to ARCHIVE_DATABASE like 0009.

from __future__ import annotations

import json
import sys
from array import array

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

LATENCY = ("duration_s", "ttft_s", "tpot_s")
TYPECODES = {4: "I", 8: "Q"}


def _packed(values: list[int], lane: int) -> bytes:
    full = 4 if lane <= 4 else 8
    packed = array(TYPECODES[full], values)
    if sys.byteorder == "big":
        packed.byteswap()
    data = packed.tobytes()
    out = bytearray(len(values) * lane)
    for k in range(lane):
        out[k::lane] = data[k::full]
    return bytes(out)


def _unpacked(blob: bytes, lane: int) -> list[int]:
    full = 4 if lane <= 4 else 8
    data = bytearray(len(blob) // lane * full)
    for k in range(lane):
        data[k::full] = blob[k::lane]
    values = array(TYPECODES[full], bytes(data))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def pack_rows(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Instance = apps.get_model("ferrox_stats", "Instance")
    rows = Instance.objects.using(schema_editor.connection.alias)
    for instance, text in rows.filter(latency_counts=None).values_list("instance", "state"):
        try:
            state = json.loads(text)
            latency = state["latency"]
            lists = [latency[name]["counts"] for name in LATENCY]
            top = max((max(counts) for counts in lists if counts), default=0)
            if not all(type(n) is int and n >= 0 for counts in lists for n in counts):
                continue
            heads = {
                name: {
                    "zeros": latency[name]["zeros"],
                    "sum": latency[name]["sum"],
                    "offset": latency[name]["offset"],
                    "buckets": len(latency[name]["counts"]),
                }
                for name in LATENCY
            }
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue  # not a state document: left for v1/fleet to count
        lane = max(2, (top.bit_length() + 7) // 8 + 1)  # one byte free above the largest
        if lane > 8:
            continue  # no lane holds it: the lists stay
        state.pop("breakdown", None)
        state["latency"] = heads
        rows.filter(instance=instance).update(
            state=json.dumps(state, separators=(",", ":")),
            latency_counts=_packed([n for counts in lists for n in counts], lane),
        )


def unpack_rows(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # Back to 0009's form; a row the previous release could not read is deleted (a
    # heartbeat row is rewritten at its process's next tick anyway).
    Instance = apps.get_model("ferrox_stats", "Instance")
    rows = Instance.objects.using(schema_editor.connection.alias)
    for instance, text, blob in rows.values_list("instance", "state", "latency_counts"):
        try:
            state = json.loads(text)
            if blob is not None:
                blob = bytes(blob)
                latency = state["latency"]
                sizes = [latency[name]["buckets"] for name in LATENCY]
                lane = len(blob) // sum(sizes) if sum(sizes) else 2
                if not 2 <= lane <= 8 or lane * sum(sizes) != len(blob):
                    raise ValueError("not the counts of these distributions")
                values = _unpacked(blob, lane)
                if len(values) != sum(sizes):
                    raise ValueError("not the counts of these distributions")
                start = 0
                for name, size in zip(LATENCY, sizes):
                    part = latency[name]
                    del part["buckets"]
                    part["counts"] = values[start : start + size]
                    start += size
                state["breakdown"] = []
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            rows.filter(instance=instance).delete()
            continue
        rows.filter(instance=instance).update(state=json.dumps(state), latency_counts=None)


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0009_instance_heartbeats'),
    ]

    operations = [
        migrations.AddField(
            model_name='instance',
            name='latency_counts',
            field=models.BinaryField(null=True),
        ),
        migrations.AlterField(
            model_name='instance',
            name='state',
            field=models.TextField(),
        ),
        migrations.RunPython(pack_rows, unpack_rows),
    ]
