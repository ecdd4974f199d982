"""Rollups kept as records are archived: ``add`` (in the batch's transaction), ``upsert``.

``archive.batch.write_batch`` calls ``add`` with exactly the records it inserted, inside
the transaction that inserts them: duplicates and dead letters never count, a batch
that fails to commit takes its rollups with it, and a rollup never disagrees with the
rows it sums. Every feeder (tracker, pass-through, ingest) archives through it.

Each record is counted in its minute and in its hour (``models.Rollup``), under its
group ``(model, route, replica, via_api_key, outcome)``; ``outcome`` is the archive's
column (``rows.outcome``: aborted, else error for an error or HTTP status >= 400, else
ok), so errors and aborts are the requests of those groups, and each aborted group
counts its abort reasons (``Rollup.aborts``).

Concurrency (several processes and hosts, one PostgreSQL). A batch's cells are written
in one order every writer shares, ``(span, bucket, group digest)``:

1. one ``INSERT … ON CONFLICT DO UPDATE`` adds the counters (no lost update: each
   row's update runs on its latest committed version, under its row lock) and creates
   a missing row with the batch's distributions; ``RETURNING`` hands back each row's
   counters and its stored distributions, read under that lock;
2. a row that existed before (its request count is above the batch's) has its
   distributions merged in Python and written back by id while the lock is still held.

Locks are taken in that one order, so two batches never wait on each other in a cycle
(no deadlock). On PostgreSQL the archive's commit-order trigger (migration 0006) already
serialises archive batches; the order keeps rollups correct without relying on it (a
rebuild, or a future writer that inserts no archive row). SQLite serialises writers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connections

from ..core.requests import Record
from ..core.rollup import Tally
from .rows import at_ms_to_datetime, outcome

__all__ = ["SPANS", "Cell", "Group", "add", "cells_of", "group_key", "upsert"]

SPANS = (60, 3600)
"""Bucket widths in seconds: minute and hour (days are summed from hours)."""

Group = tuple[str | None, str | None, str, str | None, str]
"""``(model, route, replica, via_api_key, outcome)``."""
GROUP_FIELDS = ("model", "route", "replica", "via_api_key", "outcome")

Cell = tuple[int, int, Group]
"""``(span_s, bucket start in epoch ms, group)``."""

TABLE = "ferrox_stats_rollup"
_KEY = ("span_s", "bucket", "group_key")
_COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "out_of_range")
_TEXTS = ("aborts", "duration", "ttft", "tpot")
_COLUMNS = (*_KEY, *GROUP_FIELDS[:4], "outcome", *_COUNTERS, *_TEXTS)
# Rows per statement: 17 parameters each stays below SQLite's 32766 and PostgreSQL's
# 65535 bound parameters.
CHUNK = 500


def group_key(group: Group) -> str:
    """The digest naming ``group`` in the unique key (NULL labels included)."""
    text = json.dumps(group, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def cells_of(records: Iterable[Record]) -> dict[Cell, Tally]:
    """The records summed per minute and hour cell."""
    minutes: dict[Cell, Tally] = {}
    minute_ms = SPANS[0] * 1000
    for record in records:
        at_ms: int = record.at_ms  # type: ignore[assignment]  # archived: never None
        group: Group = (
            record.model,
            record.route,
            record.replica,  # type: ignore[assignment]  # archived: never None
            record.via_api_key,
            outcome(record),
        )
        key = (SPANS[0], at_ms - at_ms % minute_ms, group)
        tally = minutes.get(key)
        if tally is None:
            tally = minutes[key] = Tally()
        tally.add(record)
    cells = dict(minutes)
    for span in SPANS[1:]:
        span_ms = span * 1000
        for (_, start, group), tally in minutes.items():
            key = (span, start - start % span_ms, group)
            wider = cells.get(key)
            if wider is None:
                wider = cells[key] = Tally()
            wider.merge(tally)
    return cells


def add(records: Sequence[Record], using: str) -> None:
    """Add ``records`` (just archived, in this transaction) to the rollups."""
    if records:
        upsert(cells_of(records), using)


def upsert(cells: dict[Cell, Tally], using: str) -> None:
    """Add each tally to its cell's row (created if missing), in the shared lock order."""
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    keyed = sorted(
        ((span, start, group_key(group)), group, tally)
        for (span, start, group), tally in cells.items()
    )
    columns = ", ".join(_COLUMNS)
    row_sql = "(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"
    counters = ", ".join(f"{c} = {TABLE}.{c} + excluded.{c}" for c in _COUNTERS)
    returning = ", ".join(("id", *_KEY, *_COUNTERS, *_TEXTS))
    merged: list[tuple[str, str, str, str, int]] = []
    with connection.cursor() as cursor:
        for lo in range(0, len(keyed), CHUNK):
            chunk = keyed[lo : lo + CHUNK]
            params: list[Any] = []
            mine: dict[tuple[int, Any, str], Tally] = {}
            for (span, start, digest), group, tally in chunk:
                bucket = adapt(at_ms_to_datetime(start))
                mine[(span, bucket, digest)] = tally
                params.extend((span, bucket, digest, *group))
                params.extend((tally.requests, tally.prompt_tokens, tally.completion_tokens))
                params.extend((tally.cached_tokens, tally.out_of_range, *tally.texts()))
            cursor.execute(
                f"INSERT INTO {TABLE} ({columns}) VALUES "
                + ", ".join([row_sql] * len(chunk))
                + f" ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {counters}"
                + f" RETURNING {returning}",
                params,
            )
            for row in cursor.fetchall():
                row_id, span, bucket, digest, requests = row[:5]
                tally = mine[(span, _same(bucket, adapt), digest)]
                if requests == tally.requests:
                    continue  # created by this statement, with this batch's distributions
                texts = row[9:]
                stored = Tally()
                stored.merge_texts(*texts)
                stored.merge(tally)
                merged.append((*stored.texts(), row_id))
        if merged:
            cursor.executemany(
                f"UPDATE {TABLE} SET {', '.join(f'{c} = %s' for c in _TEXTS)} WHERE id = %s",
                merged,
            )


def _same(bucket: Any, adapt: Any) -> Any:
    # RETURNING gives PostgreSQL's aware datetime, or SQLite's stored text (what
    # ``adapt`` wrote): either way the value the cell was keyed by.
    return adapt(bucket) if isinstance(bucket, datetime) else bucket
