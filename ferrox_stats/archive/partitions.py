"""The archive's time partitions on PostgreSQL: one per UTC day, made ahead, dropped whole.

Migration 0013 partitions ``ferrox_stats_finishedrequest`` by ``finished_at``: a
``_legacy`` partition holds what was archived before it, a DEFAULT partition any row no
day partition covers (so no insert ever fails for want of one), and day partitions
``ferrox_stats_finishedrequest_pYYYYMMDD`` the rest. ``keep_ahead`` makes yesterday's,
today's and the next ``AHEAD_DAYS`` days' partitions before a batch is written (once a
day per process); ``manage.py ferrox_stats_partitions`` makes them further ahead.

A day partition is made as a plain table and then attached, which takes a SHARE UPDATE
EXCLUSIVE lock on the archive: reads and inserts go on meanwhile. Attaching scans the
DEFAULT partition (normally empty) for rows of that day; if it holds some, the day is
left to it. Dropping a partition takes an ACCESS EXCLUSIVE lock, briefly: every DDL
statement here runs under ``lock_timeout``, so it fails rather than queue the archive's
readers and writers behind it. SQLite keeps one plain table and none of this applies.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import DatabaseError, connections, transaction

logger = logging.getLogger("ferrox_stats.archive")

PARENT = "ferrox_stats_finishedrequest"
DAY_PREFIX = f"{PARENT}_p"
DEFAULT = f"{PARENT}_default"
# Day partitions made ahead of today (and yesterday's, for records that finish just
# before midnight and are written just after).
AHEAD_DAYS = 2
# Milliseconds a DDL statement waits for its lock before it gives up.
LOCK_TIMEOUT_MS = 2_000
# Held (per transaction) while partitions are made, so two processes never race to
# attach the same day: "ferroxpa" in ASCII.
LOCK_KEY = 0x6665_7272_6F78_7061
# After a failed attempt, ``keep_ahead`` tries again no sooner than this.
RETRY_S = 60.0

_BOUND = re.compile(r"FOR VALUES FROM \((?P<lower>[^)]*)\) TO \((?P<upper>[^)]*)\)")
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Partition:
    """One partition of the archive: its range (``None``: unbounded) and row estimate."""

    name: str
    lower: datetime | None
    upper: datetime | None
    default: bool = False
    # From the planner's statistics (ANALYZE, autovacuum); None before the first.
    rows_estimate: int | None = None

    @property
    def daily(self) -> bool:
        return self.name.startswith(DAY_PREFIX)

    def overlaps(self, lower: datetime, upper: datetime) -> bool:
        if self.default:
            return False
        return (self.lower is None or self.lower < upper) and (
            self.upper is None or lower < self.upper
        )


@dataclass
class Made:
    """What ``make_days`` did: partitions created, and days left to the DEFAULT partition."""

    created: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def is_partitioned(using: str = "default") -> bool:
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s))",
            [PARENT],
        )
        (partitioned,) = cursor.fetchone()
    return bool(partitioned)


def partitions(using: str = "default") -> list[Partition]:
    """The archive's partitions, ordered by range (DEFAULT last); [] if it has none."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [PARENT],
        )
        rows = cursor.fetchall()
    found = [_partition(name, bound, reltuples) for name, bound, reltuples in rows]
    return sorted(found, key=lambda p: (p.default, p.lower or datetime.min.replace(tzinfo=UTC)))


def _partition(name: str, bound: str, reltuples: float) -> Partition:
    estimate = int(reltuples) if reltuples >= 0 else None
    if bound == "DEFAULT":
        return Partition(name, None, None, default=True, rows_estimate=estimate)
    match = _BOUND.fullmatch(bound)
    if match is None:
        raise ValueError(f"partition {name} has a bound this app does not make: {bound}")
    return Partition(name, _moment(match["lower"]), _moment(match["upper"]), False, estimate)


def _moment(literal: str) -> datetime | None:
    if literal in ("MINVALUE", "MAXVALUE"):
        return None
    return datetime.fromisoformat(literal.strip("'")).astimezone(UTC)


def day_name(day: date) -> str:
    return f"{DAY_PREFIX}{day:%Y%m%d}"


def make_days(days: Iterable[date], using: str = "default") -> Made:
    """Create the day partitions of ``days`` that no partition covers yet.

    A day whose rows the DEFAULT partition already holds, or whose lock could not be
    had in time, is left out (``Made.skipped`` says why); its rows stay in DEFAULT.
    Raises ``DatabaseError`` for anything else, and ``RuntimeError`` if the archive is
    not partitioned.
    """
    result = Made()
    if not is_partitioned(using):
        raise RuntimeError(f"{PARENT} is not partitioned (SQLite, or before migration 0013)")
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}")
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
        (locked,) = cursor.fetchone()
        if not locked:
            for day in sorted(set(days)):
                result.skipped[day_name(day)] = "another process is making partitions"
            return result
        existing = partitions(using)
        for day in sorted(set(days)):
            name = day_name(day)
            lower = datetime(day.year, day.month, day.day, tzinfo=UTC)
            upper = lower + _DAY
            if any(p.overlaps(lower, upper) for p in existing):
                continue
            try:
                with transaction.atomic(using=using):
                    cursor.execute(
                        f"CREATE TABLE {name} "
                        f"(LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
                    )
                    cursor.execute(
                        f"ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES "
                        f"FROM ('{lower.isoformat()}') TO ('{upper.isoformat()}')"
                    )
            except DatabaseError as exc:
                reason = _why_not(exc)
                if reason is None:
                    raise
                result.skipped[name] = reason
            else:
                result.created.append(name)
    return result


def _why_not(exc: DatabaseError) -> str | None:
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate == "23514":  # check_violation: DEFAULT holds rows of the day
        return "the default partition holds rows of that day"
    if sqlstate == "55P03":  # lock_not_available
        return f"its lock was not had within {LOCK_TIMEOUT_MS} ms"
    return None


def drop(partition: Partition, using: str = "default") -> None:
    """Drop one partition and its rows: ``detach`` it, then ``drop_detached``."""
    detach(partition, using)
    drop_detached(partition.name, using)


def detach(partition: Partition, using: str = "default") -> None:
    """Take ``partition`` out of the archive: its rows are gone from every read.

    A catalog change, committed at once under ``lock_timeout``: the archive's lock is
    held for milliseconds, whatever the partition holds. Dropping it in the same
    transaction would hold that lock while the database removes the partition's files
    (seconds for 10M rows on some disks: docs/benchmarks.md, "Partition retention").
    """
    if partition.default:
        raise ValueError("the default partition is never dropped")
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}")
        cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {partition.name}")


def drop_detached(name: str, using: str = "default") -> None:
    """Drop a day table ``detach`` took out of the archive (no lock of the archive's)."""
    if not re.fullmatch(f"{DAY_PREFIX}[0-9]{{8}}", name) and name != f"{PARENT}_legacy":
        raise ValueError(f"{name} is not one of the archive's partitions")
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}")
        cursor.execute(f"DROP TABLE IF EXISTS {name}")


def detached(using: str = "default") -> list[str]:
    """Tables a prune detached but did not drop (it was stopped in between), by name."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND NOT c.relispartition "
            "AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass(%s)) "
            "AND (c.relname ~ %s OR c.relname = %s) ORDER BY c.relname",
            [PARENT, f"^{DAY_PREFIX}[0-9]{{8}}$", f"{PARENT}_legacy"],
        )
        return [name for (name,) in cursor.fetchall()]


def wholly_before(cutoff: datetime, using: str = "default") -> list[Partition]:
    """The partitions every row of which finished before ``cutoff``, oldest first."""
    return [p for p in partitions(using) if p.upper is not None and p.upper <= cutoff]


def window(today: date) -> list[date]:
    """The days ``keep_ahead`` makes: yesterday, today and ``AHEAD_DAYS`` more."""
    return [today + timedelta(days=n) for n in range(-1, AHEAD_DAYS + 1)]


# using -> the UTC day keep_ahead last made partitions for; using -> when to try again.
_kept: dict[str, date] = {}
_retry_at: dict[str, float] = {}


def keep_ahead(using: str = "default", *, now: datetime | None = None) -> None:
    """Make the ``window`` of day partitions, once per UTC day per process; never raises.

    Called before each archive batch: a dictionary lookup unless the day turned. A
    failure (the database down, a lock not had) is logged and tried again after
    ``RETRY_S``; meanwhile rows go to the DEFAULT partition, so nothing is lost.
    """
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    if _kept.get(using) == today or time.monotonic() < _retry_at.get(using, 0.0):
        return
    try:
        if is_partitioned(using):
            made = make_days(window(today), using)
            for name, reason in made.skipped.items():
                logger.warning("ferrox_stats: partition %s not made: %s", name, reason)
            if made.skipped:
                _retry_at[using] = time.monotonic() + RETRY_S
                return
    except DatabaseError as exc:
        logger.warning("ferrox_stats: could not make the archive's partitions: %s", exc)
        _retry_at[using] = time.monotonic() + RETRY_S
        return
    _kept[using] = today


def forget() -> None:
    """Forget what ``keep_ahead`` made (tests; a database recreated under a process)."""
    _kept.clear()
    _retry_at.clear()
