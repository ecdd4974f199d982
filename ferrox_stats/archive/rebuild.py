"""Rebuilding the rollups of a time range from the archive: ``rebuild``.

For ``manage.py ferrox_stats_rollup`` (after a restore, a bug fix, or to roll up rows
archived before the rollups existed). The range is widened to whole hours, and done one
hour at a time, each in its own transaction: the hour's minute and hour rollups are
deleted and summed again from the hour's archived rows (read in chunks, so memory holds
the hour's cells, not its rows). Then each day the range touches has its day rows
(the merged levels', ``rollups.DAY``) made again from all its hour rows, in a
transaction of its own. Idempotent: the same rows give the same rollups.

On PostgreSQL each hour's transaction first takes the archive's commit-order lock
(``models.COMMIT_LOCK_KEY``, which every archive batch holds until it commits): no batch
is half-way through the hour while it is summed, and batches wait for one hour's
rebuild at most. Hours before the oldest archived row are left as they are: what
retention pruned is kept only in its rollups, and a rebuild must not erase it. The hour
that holds the oldest row may have lost older rows to retention too: rebuilding it
keeps only what is still archived (``RebuildResult.first_hour`` names it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, transaction

from ..core.requests import Record
from .fold import locked as fold_locked
from .pace import lock_held
from .rollups import DAY, cells_of, days_from_hours, upsert
from .rows import record_from_values

__all__ = ["HOUR", "RebuildResult", "hour_ceil", "hour_floor", "rebuild"]

HOUR = timedelta(hours=1)
# Archive rows fetched per round trip while an hour is summed.
CHUNK = 2000


@dataclass(frozen=True)
class RebuildResult:
    """What a rebuild did: the whole hours ``[since, until)`` it covered, how many it
    rebuilt (those from ``first_hour`` on), and the archived rows it summed.
    ``first_hour`` is ``None`` when the archive holds no row before ``until``."""

    since: datetime
    until: datetime
    first_hour: datetime | None
    hours: int
    rows: int


def hour_floor(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def hour_ceil(moment: datetime) -> datetime:
    floor = hour_floor(moment)
    return floor if floor == moment else floor + HOUR


def rebuild(
    since: datetime,
    until: datetime,
    using: str,
    progress: Callable[[datetime, int], None] | None = None,
) -> RebuildResult:
    """Replace the rollups of ``[since, until)`` (aware datetimes, widened to whole hours)
    with sums of the archived rows; ``progress(hour, rows)`` after each hour."""
    from ..models import COMMIT_LOCK_KEY, FinishedRequest, Rollup, RollupDelta

    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("since and until must be aware datetimes")
    start, end = hour_floor(since), hour_ceil(until)
    if start >= end:
        raise ValueError("since must be before until")
    archive = FinishedRequest.objects.using(using)
    oldest = archive.filter(finished_at__lt=end).order_by("finished_at").first()
    if oldest is None:
        return RebuildResult(start, end, None, 0, 0)
    first = max(start, hour_floor(oldest.finished_at))
    fields = [f.name for f in FinishedRequest._meta.concrete_fields]
    connection = connections[using]
    hours = rows = 0
    hour = first

    def locked() -> None:
        # The fold lock first (no fold adds deltas to the rollups being rewritten),
        # then the commit-order lock (no batch is half-way through); a batch never
        # takes the fold lock, a fold never the commit-order lock: no cycle.
        fold_locked(using)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [COMMIT_LOCK_KEY])

    # On PostgreSQL the commit-order lock is held: nothing pauses inside (``pace``).
    commit_lock = connection.vendor == "postgresql"
    while hour < end:
        with transaction.atomic(using=using), lock_held(commit_lock):
            locked()
            # The hour's minute and hour rows; its day's rows are made again from the
            # day's hours once they are all rebuilt (below).
            in_hour = Rollup.objects.using(using).filter(bucket__gte=hour, bucket__lt=hour + HOUR)
            in_hour.exclude(span_s=DAY).delete()
            # The hour's unfolded deltas sum rows summed again below.
            RollupDelta.objects.using(using).filter(
                bucket__gte=hour, bucket__lt=hour + HOUR
            ).delete()
            values = (
                archive.filter(finished_at__gte=hour, finished_at__lt=hour + HOUR)
                .order_by()
                .values(*fields)
                .iterator(chunk_size=CHUNK)
            )
            counted = [0]

            def records(
                rows: Iterator[dict[str, Any]], counted: list[int] = counted
            ) -> Iterator[Record]:
                for row in rows:
                    counted[0] += 1
                    yield record_from_values(row)

            cells = {
                key: tally for key, tally in cells_of(records(values)).items() if key[0] != DAY
            }
            if cells:
                upsert(cells, using)
        hours += 1
        rows += counted[0]
        if progress is not None:
            progress(hour, counted[0])
        hour += HOUR
    day = first.replace(hour=0)
    while day < end:
        with transaction.atomic(using=using), lock_held(commit_lock):
            locked()
            days_from_hours([day], using)
        day += timedelta(days=1)
    return RebuildResult(start, end, first, hours, rows)
