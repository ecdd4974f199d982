"""Moving the archive batches' rollup deltas into the rollups: ``fold``.

Why deltas. A batch used to add its cells to the shared rollup rows (each minute's,
hour's and day's totals per model, per key ...) in its own transaction, under those
rows' locks and, on PostgreSQL, after its archive rows took the commit-order lock: a
fleet's rollup writes ran one batch at a time, about 15-19 batches a second in all on
a 2-core machine (docs/benchmarks.md, "Rollups in a fleet"). Now a batch inserts its
level-0 minute cells as rows of their own (``models.RollupDelta``,
``rollups.write``), in the transaction that archives the rows they sum, and waits on
no other writer's rows; a fold adds many batches' deltas to the rollups at once.

A fold, in one transaction:

1. takes the fold lock (on PostgreSQL the transaction-scoped advisory lock
   ``models.FOLD_LOCK_KEY``: one fold at a time in the fleet, and none while a
   rebuild or a prune rewrites rollups; SQLite serialises writers anyway);
2. deletes the oldest deltas, at most ``limit``, ``RETURNING`` them;
3. sums them per minute cell (in id order), and adds those sums to the rollup rows of
   their minute, hour and day at every level (``rollups.upsert``, in the order every
   writer of the rollups shares).

The deltas leave the table in the commit that adds them to the rollups: a fold that
fails (a crash, a lost connection) rolls back both and the next takes them again.
Nothing is counted twice or lost, and the rollups plus the deltas always equal the
archive's rows (a batch's deltas commit with its rows).

Who folds:

- each process's archive writer, right after a batch, at most every ``ROLLUP_FOLD_S``
  seconds (``wait=False``: if another process is folding, it does not wait for it),
  in the batch's turn: never on a timer of its own, so that whoever waits for the
  queue to drain (a host's test, then tearing its database down) waits for the fold;
- the same writer as it stops, once its queue is drained;
- a usage answer, first, only if some delta was left pending ``ABANDONED`` x
  ``ROLLUP_FOLD_S`` (no writer is folding: ``fold_abandoned``);
- a rebuild and a prune, which also take the lock (``locked``).

So an answer counts every batch a writer folded, a few seconds behind the archive at
most while the writers run (README "Usage rollups").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from django.db import connections, router, transaction
from django.db.models.functions import Now

from ..core.rollup import Tally
from .pace import pace
from .rollups import (
    DELTA_COLUMNS,
    DELTA_TABLE,
    GROUP_FIELDS,
    SPANS,
    Cell,
    Group,
    cells_from_minutes,
    stored_tally,
    upsert,
)
from .rows import datetime_to_at_ms

__all__ = ["ABANDONED", "FOLD_LIMIT", "fold", "fold_abandoned", "locked"]

FOLD_LIMIT = 20_000
"""Deltas per fold transaction (a backlog is folded in several): a 48-group fleet's
minute is about 3 000 per process."""


def locked(using: str, *, wait: bool = True) -> bool:
    """Take the fold lock in the current transaction (PostgreSQL; elsewhere the
    database serialises writers): whether it was taken (``wait=False``: not if another
    transaction holds it)."""
    from ..models import FOLD_LOCK_KEY

    connection = connections[using]
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [FOLD_LOCK_KEY])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [FOLD_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def fold(using: str, *, wait: bool = True, limit: int = FOLD_LIMIT) -> int | None:
    """Fold every delta committed before this call into the rollups, ``limit`` per
    transaction; return how many. ``None`` when ``wait`` is false and another fold (or
    a rebuild, a prune) holds the lock: that one folds them, or the next."""
    folded = 0
    while True:
        with transaction.atomic(using=using):
            if not locked(using, wait=wait):
                return None
            taken = _take(using, limit)
            if taken:
                upsert(_summed(taken), using)
            folded += len(taken)
        if len(taken) < limit:
            return folded


ABANDONED = 3
"""A delta still pending ``ABANDONED`` x ``ROLLUP_FOLD_S`` after it was inserted is one
no writer is folding (its processes stopped, crashed, or are stuck): a usage answer
folds it (``fold_abandoned``)."""


def fold_abandoned(using: str | None = None) -> int | None:
    """Before a usage answer reads the rollups: fold if some delta is older than any
    running writer would have left it (``ABANDONED``), without waiting for a fold that
    holds the lock; return how many it folded (``None``: none was abandoned, or another
    fold is running). An answer does not fold what the writers will: that costs tens
    to hundreds of milliseconds (docs/benchmarks.md "Rollup deltas"), so an answer
    counts the batches folded before it, at most a few ``ROLLUP_FOLD_S`` behind the
    archive."""
    from ..conf import conf
    from ..models import RollupDelta

    using = using or router.db_for_write(RollupDelta)
    # By the database's clock, which stamped the deltas (``RollupDelta.made``).
    cutoff = Now() - timedelta(seconds=ABANDONED * conf.ROLLUP_FOLD_S)
    if not RollupDelta.objects.using(using).filter(made__lt=cutoff).exists():
        return None
    return fold(using, wait=False)


_TAKE = (
    f"DELETE FROM {DELTA_TABLE} WHERE id IN "
    f"(SELECT id FROM {DELTA_TABLE} ORDER BY id LIMIT %s) "
    f"RETURNING id, {', '.join(DELTA_COLUMNS)}"
)


def _take(using: str, limit: int) -> list[tuple[Any, ...]]:
    """Delete up to ``limit`` of the oldest deltas; return them, in id order."""
    with connections[using].cursor() as cursor:
        cursor.execute(_TAKE, [limit])
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    rows.sort(key=lambda row: row[0])
    return rows


def _at_ms(bucket: Any) -> int:
    # PostgreSQL gives an aware datetime; SQLite what it stored, UTC and naive (as a
    # datetime, or as its text).
    if not isinstance(bucket, datetime):
        bucket = datetime.fromisoformat(bucket)
    if bucket.tzinfo is None:
        bucket = bucket.replace(tzinfo=UTC)
    return datetime_to_at_ms(bucket)


def _summed(rows: list[tuple[Any, ...]]) -> dict[Cell, Tally]:
    """The taken deltas summed per level-0 minute cell, then every cell they add to."""
    minutes: dict[Cell, Tally] = {}
    span = SPANS[0]
    first_group = 1 + DELTA_COLUMNS.index(GROUP_FIELDS[0])
    for row in rows:
        delta = SimpleNamespace(**dict(zip(DELTA_COLUMNS, row[1:], strict=True)))
        group = cast(Group, tuple(row[first_group : first_group + len(GROUP_FIELDS)]))
        key = (span, _at_ms(delta.bucket), 0, group)
        tally = stored_tally(delta)
        into = minutes.get(key)
        if into is None:
            minutes[key] = tally
        else:
            into.merge(tally)
        pace()
    return cells_from_minutes(minutes)
