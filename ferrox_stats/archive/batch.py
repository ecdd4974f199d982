"""How one batch of pending records is written, and what became of each.

On PostgreSQL under psycopg 3 the batch is COPYed straight into the archive; if some
of its rows are there already (a replay, a retry after a lost acknowledgement), it is
COPYed into a staging table instead and moved with ``INSERT … ON CONFLICT DO NOTHING``.
Elsewhere (SQLite, or PostgreSQL under psycopg2, whose COPY API differs) it is a bulk
insert of the rows not already archived. Both run in one transaction, which also adds
the rows it inserted to the rollups (``archive/rollups.py``). A data error sends the
batch row by row, each in a savepoint, so one bad row is dead-lettered with its reason
and the rest still commit. Connection-level errors propagate: the caller
keeps the batch and retries it.

That is the general path, which looks at each record on its own. A plain batch (every
record valid, no key twice: the usual case, ``columns.plain_rows``) takes a shorter
one: it is checked a column at a time, and on PostgreSQL COPYed in binary, a chunk at a
time, each chunk checked while the server stores the one before. Anything unusual, or
a row the table refuses, sends the batch down the general path, so what becomes of each
record never depends on the path it took.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db import DataError, IntegrityError, connections, transaction

from ..conf import conf
from ..core.requests import encodable
from .columns import PlainBatch, plain_rows
from .pace import lock_held, pace
from .partitions import keep_ahead
from .rollups import add as add_rollups
from .rollups import prepared as prepared_rollups
from .rollups import write as write_rollups
from .rows import (
    COLUMNS,
    Pending,
    datetime_to_at_ms,
    dead_letter_payload,
    invalid_reason,
    row_values,
)

# Errors that belong to a row, not to the connection: the row is dead-lettered.
ROW_ERRORS = (DataError, IntegrityError)

INSERTED = "inserted"
DUPLICATE = "duplicate"
DEAD = "dead"


@dataclass
class BatchResult:
    """What happened to each record of a committed batch.

    ``outcomes[i]`` is ``inserted``, ``duplicate`` (already archived, or earlier in the
    same batch) or ``dead`` for ``items[i]``; ``dead`` pairs each dead one with why.
    """

    outcomes: list[str] = field(default_factory=list)
    dead: list[tuple[Pending, str]] = field(default_factory=list)

    @property
    def inserted(self) -> int:
        return self.outcomes.count(INSERTED)

    @property
    def duplicates(self) -> int:
        return self.outcomes.count(DUPLICATE)


def keys(item: Pending) -> list[Hashable]:
    """The unique keys a row is known by: its request_id and its (instance, seq), each
    within its namespace (``replica`` and whether a producer reported it) and with the
    moment it finished, as the table's keys hold it (migration 0013)."""
    record = item.record
    return _keys(
        item.ingested, record.replica, record.request_id, item.instance, item.seq, record.at_ms
    )


def _keys(
    ingested: bool, replica: Any, request_id: Any, instance: Any, seq: Any, at_ms: Any
) -> list[Hashable]:
    found: list[Hashable] = []
    if request_id is not None:
        found.append(("request", ingested, replica, request_id, at_ms))
    if instance is not None and seq is not None:
        found.append(("seq", ingested, replica, instance, seq, at_ms))
    return found


def write_batch(items: Sequence[Pending], using: str = "default") -> BatchResult:
    """Write ``items`` in one transaction; raise if the batch could not commit at all."""
    # On a partitioned archive, today's partitions first (once a day; never raises).
    keep_ahead(using)
    rollups = conf.ROLLUPS
    # The rollups of the whole batch, computed before the transaction: the archive's
    # insert takes the commit-order lock, which the fleet's other writers wait for until
    # this one commits, so what can be done before it is (usually every row is new).
    ahead = None
    if rollups:
        try:
            ahead = prepared_rollups([item.record for item in items], using)
        except Exception:
            # A record the archive will refuse (a dead letter) may be one no cell can
            # count: the batch then counts, in its transaction, what it inserted.
            ahead = None
    # On PostgreSQL its first insert takes the commit-order lock the fleet's writers wait
    # for until it commits: no pause in there.
    with transaction.atomic(using=using), lock_held(connections[using].vendor == "postgresql"):
        try:
            inserted = _insert_plain(items, using)
        except ROW_ERRORS:
            inserted = None  # a row the table refuses: the general path finds which
        if inserted is not None:
            result = BatchResult(outcomes=[INSERTED if new else DUPLICATE for new in inserted])
        else:
            # The records as stored: a lone surrogate replaced (``encodable``).
            items = [item._replace(record=encodable(item.record)) for item in items]
            result = _write_each(items, using)
        # In this transaction, exactly the rows it inserted: a rollup never disagrees
        # with the archive, and a batch retried after a failed commit counts once.
        if ahead is not None and inserted is not None and result.inserted == len(items):
            write_rollups(ahead, using)  # every record, as given, was inserted
        elif rollups:
            add_rollups(
                [
                    item.record
                    for item, done in zip(items, result.outcomes, strict=True)
                    if done == INSERTED
                ],
                using,
            )
        return result


def _write_each(items: Sequence[Pending], using: str) -> BatchResult:
    """The general path: each record looked at on its own, inside the batch's transaction.

    ``items`` are ``encodable`` already: the server's own records as given on the
    request path may hold a lone surrogate (from a client's body), replaced off it.
    Ingest rejected such items already.
    """
    from ..models import DeadLetter

    result = BatchResult(outcomes=[""] * len(items))
    candidates: list[int] = []
    seen: set[Hashable] = set()
    for index, item in enumerate(items):
        reason = invalid_reason(item)
        if reason is not None:
            result.outcomes[index] = DEAD
            result.dead.append((item, reason))
        elif any(key in seen for key in keys(item)):
            result.outcomes[index] = DUPLICATE
        else:
            seen.update(keys(item))
            candidates.append(index)

    if candidates:
        try:
            with transaction.atomic(using=using):
                inserted = _insert([items[i] for i in candidates], using)
            for index, was_inserted in zip(candidates, inserted, strict=True):
                result.outcomes[index] = INSERTED if was_inserted else DUPLICATE
        except ROW_ERRORS:
            _insert_one_by_one(items, candidates, using, result)
    if result.dead:
        DeadLetter.objects.using(using).bulk_create(
            DeadLetter(
                replica=str(item.record.replica or "")[:200],
                request_id=str(item.record.request_id or "")[:200],
                instance=str(item.instance or "")[:200],
                reason=reason.replace("\x00", "\\x00"),
                payload=dead_letter_payload(item),
            )
            for item, reason in result.dead
        )
    return result


class _NotPlain(Exception):
    """A chunk of the batch being COPYed is not plain: the COPY is abandoned."""


# Rows checked and sent at a time: the server stores one chunk while the next is
# checked, and psycopg sends its buffer every 32 KiB (about 150 binary rows).
CHUNK = 250


def _insert_plain(items: Sequence[Pending], using: str) -> list[bool] | None:
    """Insert a plain batch, in a savepoint; ``None`` if it is not one (nothing written).

    Raises ``ROW_ERRORS`` if the table refuses a row (a CHECK constraint).
    """
    connection = connections[using]
    if connection.vendor != "postgresql" or not copies():
        # Checked in pieces, pacing between them (``pace``), as the insert is.
        checker = PlainBatch()
        for start in range(0, len(items), PACED_ROWS):
            if checker.rows(items[start : start + PACED_ROWS]) is None:
                return None
            pace()
        with transaction.atomic(using=using):
            return _bulk_insert(items, using)
    with connection.cursor() as cursor:
        try:
            with transaction.atomic(using=using), connection.wrap_database_errors:
                _copy_plain(cursor, items)
            return [True] * len(items)
        except _NotPlain:
            return None
        except IntegrityError:
            # Rows archived already (a replay, a retry after a lost acknowledgement), or
            # one a CHECK refuses. The server may have stopped the COPY before the last
            # chunks were checked: check them all before staging.
            if plain_rows(items) is None:
                return None
            with transaction.atomic(using=using), connection.wrap_database_errors:
                return _staged_insert(cursor, items)


def _copy_plain(cursor: Any, items: Sequence[Pending]) -> None:
    """COPY a batch in binary, each chunk once checked; raise ``_NotPlain`` at one that
    is not plain (psycopg then abandons the COPY)."""
    checker = PlainBatch()
    cursor.adapters.register_dumper(None, at_ms_dumper())
    with cursor.copy(f"COPY {TABLE} ({_COLUMN_LIST}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(COPY_TYPES)
        write_row = copy.write_row
        for start in range(0, len(items), CHUNK):
            rows = checker.rows(items[start : start + CHUNK])
            if rows is None:
                raise _NotPlain
            for row in rows:
                write_row(row)


# The archive's column types in ``COLUMNS`` order, for binary COPY, which PostgreSQL
# does not cast (a test compares them with the table).
COPY_TYPES: tuple[str, ...] = (
    "varchar",  # request_id
    "timestamptz",  # finished_at, from at_ms (at_ms_dumper)
    *("varchar", "varchar"),  # route, model
    "int2",  # status
    "bool",  # stream
    *("int8",) * 3,  # prompt, completion, cached tokens
    *("float8",) * 4,  # ttft, duration, queue, decode ms
    *("varchar",) * 7,  # finish_reason, aborted, error, client, via_api_key, replica, instance
    "int8",  # seq
    "varchar",  # outcome
    "bool",  # ingested
)

_MS_2000 = 946_684_800_000  # 2000-01-01 00:00 UTC in epoch ms


@cache
def at_ms_dumper() -> type[Any]:
    """A psycopg dumper of epoch milliseconds (an ``int``) as a binary ``timestamptz``.

    Registered by type only (``register_dumper(None, …)``): a COPY that names
    ``timestamptz`` in ``set_types`` uses it, nothing else does. It spares a
    ``datetime`` per row.
    """
    import struct

    from psycopg.adapt import Dumper
    from psycopg.postgres import types
    from psycopg.pq import Format

    pack = struct.Struct("!q").pack

    class AtMsDumper(Dumper):
        format = Format.BINARY
        oid = types["timestamptz"].oid

        def dump(self, obj: Any) -> bytes:
            # A binary timestamptz: microseconds since 2000-01-01 00:00 UTC.
            return pack((obj - _MS_2000) * 1000)

    return AtMsDumper


def _insert(items: Sequence[Pending], using: str) -> list[bool]:
    """Insert the rows not archived yet; return, per item, whether it was inserted."""
    if connections[using].vendor == "postgresql" and copies():
        return _copy_insert(items, using)
    return _bulk_insert(items, using)


def copies() -> bool:
    """Whether Django's PostgreSQL backend runs on psycopg 3 here, whose COPY we use."""
    # django-stubs leaves this module out.
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        is_psycopg3,
    )

    return bool(is_psycopg3)


def _insert_one_by_one(
    items: Sequence[Pending], candidates: list[int], using: str, result: BatchResult
) -> None:
    for index in candidates:
        item = items[index]
        try:
            with transaction.atomic(using=using):
                [inserted] = _insert([item], using)
        except ROW_ERRORS as exc:
            # The exception's class and the database's message: a constraint or a
            # type, never request content (records carry none).
            result.outcomes[index] = DEAD
            result.dead.append((item, f"{type(exc).__name__}: {exc}".strip()[:1000]))
        else:
            result.outcomes[index] = INSERTED if inserted else DUPLICATE


STAGING = "ferrox_stats_staging"
TABLE = "ferrox_stats_finishedrequest"
_COLUMN_LIST = ", ".join(COLUMNS)


def _copy_insert(items: Sequence[Pending], using: str) -> list[bool]:
    connection = connections[using]
    with connection.cursor() as cursor:
        try:
            # Most batches are all new: COPY them straight into the archive (half the
            # work of staging them), in a savepoint. psycopg's COPY bypasses Django's
            # error wrapping: wrap it, so a constraint is an IntegrityError here too.
            with (
                transaction.atomic(using=using),
                connection.wrap_database_errors,
                cursor.copy(f"COPY {TABLE} ({_COLUMN_LIST}) FROM STDIN") as copy,
            ):
                for item in items:
                    copy.write_row(row_values(item))
            return [True] * len(items)
        except IntegrityError:
            # A replay, or a retry whose first commit went through, holds rows already
            # archived (or one row breaks a CHECK): sort them out through staging.
            with connection.wrap_database_errors:
                return _staged_insert(cursor, items)


def _staged_insert(cursor: Any, items: Sequence[Pending]) -> list[bool]:
    """COPY into a staging table, then move what is new: per-item answers, no errors."""
    # One staging table per connection, emptied by every commit.
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {STAGING} ON COMMIT DELETE ROWS AS "
        f"SELECT {_COLUMN_LIST} FROM {TABLE} WITH NO DATA"
    )
    # A failed earlier attempt in this transaction may have left rows behind.
    cursor.execute(f"TRUNCATE {STAGING}")
    with cursor.copy(f"COPY {STAGING} ({_COLUMN_LIST}) FROM STDIN") as copy:
        for item in items:
            copy.write_row(row_values(item))
    # No conflict target: either unique key makes a row a duplicate of one already
    # archived. RETURNING names the rows that went in; the rest were duplicates.
    cursor.execute(
        f"INSERT INTO {TABLE} ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM {STAGING} "
        "ON CONFLICT DO NOTHING RETURNING ingested, replica, request_id, instance, seq, "
        "finished_at"
    )
    returned = cursor.fetchall()
    cursor.execute(f"TRUNCATE {STAGING}")
    if len(returned) == len(items):
        return [True] * len(items)
    went_in: set[Hashable] = set()
    for ingested, replica, request_id, instance, seq, finished_at in returned:
        at_ms = datetime_to_at_ms(finished_at)
        went_in.update(_keys(ingested, replica, request_id, instance, seq, at_ms))
    # Items are unique by key here (write_batch removed in-batch duplicates), and a
    # row with no key can never conflict, so it always went in.
    return [not keys(item) or keys(item)[0] in went_in for item in items]


class _SomeArchived(Exception):
    """A batch inserted with conflicts skipped left some rows out: undo it and sort."""


def _bulk_insert(items: Sequence[Pending], using: str) -> list[bool]:
    """Insert the rows not archived yet; return, per item, whether it was inserted.

    Usually every row is new: one insert that skips conflicting rows, in a savepoint,
    inserts them all, and nothing is looked up. If it skipped any (a replay, a retry
    after a lost acknowledgement), it is undone, the rows archived already are looked
    up by their keys, and only the others are inserted.
    """
    from ..models import FinishedRequest

    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(items), PACED_ROWS):
        rows.extend([row_values(item) for item in items[start : start + PACED_ROWS]])
        pace()
    try:
        with transaction.atomic(using=using):
            if _execute_inserts(rows, using, skip_conflicts=True) == len(rows):
                return [True] * len(items)
            raise _SomeArchived
    except _SomeArchived:
        pass
    manager = FinishedRequest.objects.using(using)
    request_ids = {i.record.request_id for i in items if i.record.request_id is not None}
    instances = {i.instance for i in items if i.instance is not None and i.seq is not None}
    archived: set[Hashable] = set()
    if request_ids:
        archived.update(
            ("request", ingested, replica, request_id, datetime_to_at_ms(finished_at))
            for ingested, replica, request_id, finished_at in manager.filter(
                request_id__in=request_ids
            )
            .values_list("ingested", "replica", "request_id", "finished_at")
            .iterator()
        )
    if instances:
        seqs = {i.seq for i in items if i.instance is not None and i.seq is not None}
        archived.update(
            ("seq", ingested, replica, instance, seq, datetime_to_at_ms(finished_at))
            for ingested, replica, instance, seq, finished_at in manager.filter(
                instance__in=instances, seq__in=seqs
            )
            .values_list("ingested", "replica", "instance", "seq", "finished_at")
            .iterator()
        )
    fresh = [not any(key in archived for key in keys(item)) for item in items]
    new_rows = [row for row, is_fresh in zip(rows, fresh, strict=True) if is_fresh]
    if new_rows:
        _execute_inserts(new_rows, using)
    return fresh


_FINISHED_AT = COLUMNS.index("finished_at")
# A statement's rows at most, where the connection would bind more parameters.
MAX_ROWS_PER_INSERT = 500
# Rows of one SQLite executemany: about a millisecond of the writer's Python (``pace``).
PACED_ROWS = 100


def _execute_inserts(
    rows: list[tuple[Any, ...]], using: str, *, skip_conflicts: bool = False
) -> int:
    """Insert the rows from their values, skipping those a unique key finds archived
    (with ``skip_conflicts``); return how many went in. On SQLite one ``executemany``
    (the statement compiled once, no round trips); elsewhere (psycopg2) multi-row
    ``INSERT`` statements of as many rows as the connection binds parameters for.

    Not ``bulk_create``: its model instance and per-field preparation of every value
    cost about 100 µs a row on SQLite, in Python, on the writer thread, which held the
    GIL for 70-120 ms a batch while the server's requests waited for it (issue 13,
    the pass-through's p99). Every column but ``finished_at`` is a value the driver
    stores as the field would (str, int, float, bool, None); ``finished_at`` goes
    through the connection's own adaptation of a datetime (UTC, as Django stores it; what
    the field's preparation comes to for an aware datetime, at half its cost).
    """
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    at = _FINISHED_AT
    row_sql = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    insert = f"INSERT INTO {TABLE} ({_COLUMN_LIST}) VALUES "
    # No conflict target: a row that either unique key finds archived is skipped.
    conflicts = " ON CONFLICT DO NOTHING" if skip_conflicts else ""
    with connection.cursor() as cursor:
        inserted = 0
        if connection.vendor == "sqlite":
            # In pieces, pacing between them (``pace``): the whole batch's preparation
            # and executemany held the GIL for 20 ms and more.
            for start in range(0, len(rows), PACED_ROWS):
                params = [
                    (*row[:at], adapt(row[at]), *row[at + 1 :])
                    for row in rows[start : start + PACED_ROWS]
                ]
                cursor.executemany(insert + row_sql + conflicts, params)
                inserted += cursor.rowcount
                pace()
            return inserted
        per_statement = min(
            MAX_ROWS_PER_INSERT, (connection.features.max_query_params or 65535) // len(COLUMNS)
        )
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            flat: list[Any] = []
            for row in chunk:
                flat.extend(row[:at])
                flat.append(adapt(row[at]))
                flat.extend(row[at + 1 :])
            cursor.execute(insert + ", ".join([row_sql] * len(chunk)) + conflicts, flat)
            inserted += cursor.rowcount
        return inserted
