"""Pruning archive rows past retention: bounded batches, out of band, one run at a time.

On a partitioned archive (PostgreSQL, migration 0013) a day partition whose whole day
is before the cutoff is detached instead (its rows leave the archive in one catalog
change, milliseconds whatever it holds) and then dropped;
one that reaches past the cutoff is kept whole until its day has passed (so rows live
up to a day longer than the age). Only rows no day partition holds (the DEFAULT and
``_legacy`` partitions) are deleted row by row.

Each batch deletes at most ``batch_size`` of the oldest rows before the cutoff, chosen
by id through a LIMITed subquery, in its own short transaction, so the archiver's
inserts never wait long behind a prune. On PostgreSQL every batch runs under
``statement_timeout`` and ``lock_timeout``, and a session advisory lock keeps two
prunes from running at once. Never call this from a request: it is for
``manage.py ferrox_stats_prune`` and schedulers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.models import Q

from .fold import fold
from .partitions import Partition, detach, detached, drop_detached, partitions

# Milliseconds one prune statement may run / wait for a lock before it fails; a batch
# that fails is rolled back whole and the rows it held stay for the next run.
STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 5_000
# The PostgreSQL advisory lock every prune takes ("ferroxpr" in ASCII). Arbitrary, but
# fixed: every process and host must agree on it.
ADVISORY_LOCK_KEY = 0x6665_7272_6F78_7072
# A batch that lost a lock race (an archiver was writing) is rolled back and tried
# again, this many times in all, after LOCK_BACKOFF_S seconds, then twice that, ...
LOCK_ATTEMPTS = 4
LOCK_BACKOFF_S = 0.1

_sleep = time.sleep

_AGE = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


class PruneAlreadyRunning(RuntimeError):
    """Another prune holds the advisory lock on this database."""


@dataclass(frozen=True)
class PruneResult:
    """What a prune deleted (or, in a dry run, would delete), and in how many batches.

    ``batches`` counts batches that deleted at least one row; a dry run reports the
    batches the same rows would take.
    """

    cutoff: datetime
    finished_requests: int
    dead_letters: int
    batches: int
    dry_run: bool = False
    # Partitions dropped whole (finished requests they held are not in
    # ``finished_requests``: ``partition_rows`` estimates them, None if unknown), and
    # any an interrupted prune had detached and not dropped.
    partitions: tuple[str, ...] = ()
    partition_rows: int | None = 0
    # Partitions past the cutoff whose lock was not had: a later run drops them.
    partitions_busy: tuple[str, ...] = ()


def parse_age(text: str) -> timedelta:
    """``"30d"``, ``"12h"``, ``"90m"`` or ``"3600s"`` as a positive ``timedelta``."""
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"age must be a whole number followed by d, h, m or s (like 30d or 12h), got {text!r}"
        )
    amount, unit = int(match[1]), match[2]
    if amount == 0:
        raise ValueError(f"age must be greater than zero, got {text!r}")
    try:
        return timedelta(**{_UNITS[unit]: amount})
    except OverflowError:
        raise ValueError(f"age {text!r} is too large") from None


def cutoff_before(now: datetime, age: timedelta) -> datetime:
    """``now - age``, to the whole second (a prune's cutoff, stated in its output)."""
    try:
        return (now - age).replace(microsecond=0)
    except OverflowError:
        raise ValueError(f"an age of {age.days} days reaches before year 1") from None


def prune(
    cutoff: datetime,
    *,
    batch_size: int,
    dry_run: bool = False,
    using: str = "default",
    max_batches: int | None = None,
) -> PruneResult:
    """Delete finished requests and dead letters from before ``cutoff``, oldest first.

    Rows exactly at the cutoff stay. At most ``max_batches`` batches per table (None:
    until nothing is left). A dry run deletes nothing and takes no lock. Raises
    ``PruneAlreadyRunning`` when another prune holds the lock.
    """
    from ..models import DeadLetter, FinishedRequest

    if cutoff.tzinfo is None:
        raise ValueError("cutoff must be an aware datetime")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be >= 1 or None, got {max_batches!r}")

    old_letters = DeadLetter.objects.using(using).filter(created_at__lt=cutoff)

    if dry_run:
        due, kept = _due_partitions(cutoff, using)
        rows_cutoff = min([cutoff, *kept])
        old_requests = FinishedRequest.objects.using(using).filter(finished_at__lt=rows_cutoff)
        for p in due:  # its rows go with it, not one by one
            old_requests = old_requests.exclude(_within(p))
        tables = [old_requests, old_letters]
        counts = [_count(qs, batch_size, max_batches, using) for qs in tables]
        batches = sum(-(-n // batch_size) for n in counts)  # ceiling division
        return PruneResult(cutoff, counts[0], counts[1], batches, True, *_dropped(due, []))

    with _advisory_lock(using):
        # Tables an interrupted prune took out of the archive but did not drop.
        leftovers = detached(using)
        for name in leftovers:
            drop_detached(name, using)
        due, kept = _due_partitions(cutoff, using)
        busy = [p for p in due if not _detach_partition(p, using)]
        # Out of the archive now (each in its own short transaction); the files go
        # after, holding no lock any reader or writer of the archive waits for.
        for gone in due:
            if gone not in busy:
                drop_detached(gone.name, using)
        # Rows of a partition not dropped stay with it: never deleted row by row.
        rows_cutoff = min([cutoff, *kept, *(p.lower for p in busy if p.lower is not None)])
        old_requests = FinishedRequest.objects.using(using).filter(finished_at__lt=rows_cutoff)
        deleted: list[int] = []
        batches = 0
        for qs, column in [(old_requests, "finished_at"), (old_letters, "created_at")]:
            total, used = _delete_in_batches(qs, column, batch_size, max_batches, using)
            deleted.append(total)
            batches += used
    names, rows, still = _dropped(due, busy)
    return PruneResult(
        cutoff, deleted[0], deleted[1], batches, False, (*leftovers, *names), rows, still
    )


def _due_partitions(cutoff: datetime, using: str) -> tuple[list[Partition], list[datetime]]:
    """The partitions wholly before ``cutoff``, and where each day partition that
    reaches past it begins (its rows are kept whole until its day has passed)."""
    every = partitions(using)
    due = [p for p in every if not p.default and p.upper is not None and p.upper <= cutoff]
    kept = [
        p.lower
        for p in every
        if p.daily and p.lower is not None and p.lower < cutoff and p not in due
    ]
    return due, kept


def _within(partition: Partition) -> Q:
    q = Q(finished_at__lt=partition.upper)
    return q if partition.lower is None else q & Q(finished_at__gte=partition.lower)


def _dropped(
    due: list[Partition], busy: list[Partition]
) -> tuple[tuple[str, ...], int | None, tuple[str, ...]]:
    gone = [p for p in due if p not in busy]
    estimates = [p.rows_estimate for p in gone]
    rows = None if None in estimates else sum(e for e in estimates if e is not None)
    return tuple(p.name for p in gone), rows, tuple(p.name for p in busy)


def _detach_partition(partition: Partition, using: str) -> bool:
    """Detach ``partition``; False if its lock was not had in ``LOCK_ATTEMPTS`` tries."""
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            detach(partition, using)
            return True
        except OperationalError as exc:
            if not _lost_a_lock_race(exc):
                raise
        if attempt < LOCK_ATTEMPTS:
            _sleep(LOCK_BACKOFF_S * 2 ** (attempt - 1))
    return False


@dataclass(frozen=True)
class RollupPruneResult:
    """The rollup rows a prune deleted (or would delete) per bucket width."""

    cutoffs: dict[int, datetime]
    deleted: dict[int, int]
    batches: int
    dry_run: bool = False


def prune_rollups(
    cutoffs: dict[int, datetime],
    *,
    batch_size: int,
    dry_run: bool = False,
    using: str = "default",
    max_batches: int | None = None,
) -> RollupPruneResult:
    """Delete the usage rollups of each bucket width (``span_s`` -> cutoff: 60 for
    minutes, 3600 for hours) whose bucket starts before its cutoff, oldest first, in
    batches as ``prune`` does (and under its lock). What is pruned no usage answer can
    give again (hour rollups outlive the archive's rows; a rebuild needs those rows)."""
    from ..models import Rollup

    if any(cutoff.tzinfo is None for cutoff in cutoffs.values()):
        raise ValueError("cutoffs must be aware datetimes")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    # The deltas first: folded after, an old one would make a pruned row again (and a
    # dry run counts what a prune would delete).
    fold(using)
    old = {
        span: Rollup.objects.using(using).filter(span_s=span, bucket__lt=cutoff)
        for span, cutoff in sorted(cutoffs.items())
    }
    if dry_run:
        counts = {span: _count(qs, batch_size, max_batches, using) for span, qs in old.items()}
        batches = sum(-(-n // batch_size) for n in counts.values())
        return RollupPruneResult(dict(cutoffs), counts, batches, dry_run=True)
    deleted: dict[int, int] = {}
    batches = 0
    with _advisory_lock(using):
        for span, qs in old.items():
            deleted[span], used = _delete_in_batches(qs, "bucket", batch_size, max_batches, using)
            batches += used
    return RollupPruneResult(dict(cutoffs), deleted, batches)


def _delete_in_batches(
    old: Any, column: str, batch_size: int, max_batches: int | None, using: str
) -> tuple[int, int]:
    # Ids first, in a LIMITed subquery: one DELETE never touches more than batch_size
    # rows, however many are due.
    ids = old.order_by(column, "id").values("id")[:batch_size]
    batch = old.model.objects.using(using).filter(id__in=ids)
    total = batches = 0
    while max_batches is None or batches < max_batches:
        deleted = _delete_batch(batch, using)
        if deleted:
            total += deleted
            batches += 1
        if deleted < batch_size:
            break
    return total, batches


def _delete_batch(batch: Any, using: str) -> int:
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            with transaction.atomic(using=using):
                _set_timeouts(using)
                deleted, _ = batch.delete()
            return int(deleted)
        except OperationalError as exc:
            if attempt == LOCK_ATTEMPTS or not _lost_a_lock_race(exc):
                raise
        _sleep(LOCK_BACKOFF_S * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def _lost_a_lock_race(exc: OperationalError) -> bool:
    # PostgreSQL: lock_timeout expired (SQLSTATE 55P03). SQLite: another connection
    # was writing ("database is locked", "database table is locked").
    return getattr(exc.__cause__, "sqlstate", None) == "55P03" or "is locked" in str(exc)


def _count(old: Any, batch_size: int, max_batches: int | None, using: str) -> int:
    with transaction.atomic(using=using):
        _set_timeouts(using)
        if max_batches is None:
            return int(old.count())
        # Bounded: count no further than the run would delete.
        return int(old.order_by()[: batch_size * max_batches].count())


def _set_timeouts(using: str) -> None:
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # SET LOCAL ends with the batch's transaction; integers are milliseconds.
        cursor.execute(f"SET LOCAL statement_timeout = {int(STATEMENT_TIMEOUT_MS)}")
        cursor.execute(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}")


@contextmanager
def _advisory_lock(using: str) -> Iterator[None]:
    """Hold the prune lock for the whole run (PostgreSQL; a no-op elsewhere)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        # Session-level, not transaction-level: it must outlive each batch's commit.
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        (acquired,) = cursor.fetchone()
    if not acquired:
        raise PruneAlreadyRunning(
            "another prune is running on this database (it holds the advisory lock "
            f"{ADVISORY_LOCK_KEY}); try again when it has finished"
        )
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
        except DatabaseError:
            # The session is broken; ending it is what releases its advisory locks.
            connection.close()
