"""Rollups kept as records are archived: ``add`` (in the batch's transaction), ``upsert``.

``archive.batch.write_batch`` calls ``add`` (or ``prepared`` then ``write``) with exactly
the records it inserted, inside the transaction that inserts them: duplicates and dead
letters never count, a batch that fails to commit takes its rollups with it, and the
rollups with the deltas not yet folded never disagree with the rows they sum. Every
feeder (tracker, pass-through, ingest) archives through it. A batch writes its
records' level-0 minute cells as deltas (``models.RollupDelta``), rows of its own that
no other writer touches; ``archive/fold.py`` adds them to the rollup rows below
(``upsert``) a few times a minute and before every usage answer.

Each record is counted in its minute and in its hour (``models.Rollup``), under its
group ``(model, route, replica, via_api_key, outcome)``; ``outcome`` is the archive's
column (``rows.outcome``: aborted, else error for an error or HTTP status >= 400, else
ok), so errors and aborts are the requests of those groups, and each aborted group
counts its abort reasons (each of ``core.rollup.KNOWN_ABORTS`` in a column of its own,
``ABORT_COLUMNS``, summed by the database like the other counters; any other reason in
``Rollup.aborts``). Each bucket's groups are kept merged too, at the coarser
``LEVELS``: per model, per key, per replica, per route, per outcome, and in total
(their dropped labels NULL, replica and outcome ""; errors and aborts counted in
``Rollup.errors``/``aborted``), so that an answer by one label or by nothing reads a
row per value of it or per bucket (``archive.usage``), not one per group: with its
latency percentiles stored, where parsing every group's distributions cost seconds.
The counters alone are also kept per label and model (``COUNTED_LEVELS``), which a
priced answer by one label sums (each model's tokens at the model's price).
They are cells like the others: written in the same statement, lock order and
transaction, deleted and rebuilt with them.

Concurrency (several processes and hosts, one PostgreSQL). Batches only insert deltas,
so they never wait on each other's rollup rows; the folds, rebuilds and migrations that
``upsert`` write a set of cells in one order every writer shares, ``(span, bucket,
group digest)``:

1. one ``INSERT … ON CONFLICT DO UPDATE`` (on PostgreSQL of fixed text, the cells as
   one array per column, ``unnest``-ed in order) adds the counters (no lost update: each
   row's update runs on its latest committed version, under its row lock) and creates
   a missing row with the cells' distributions; ``RETURNING`` hands back each row's
   counters and its stored distributions, read under that lock;
2. a row that existed before (its request count is above the cell's) has its
   distributions merged in Python and written back by id while the lock is still held
   (on PostgreSQL in one ``UPDATE … FROM unnest``).

Locks are taken in that one order, so two writers never wait on each other in a cycle
(no deadlock); the fold lock (``archive/fold.py``) also keeps a fold from running beside
another or beside a rebuild. SQLite serialises writers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from django.db import connections

from ..core.requests import Record
from ..core.rollup import KNOWN_ABORTS, TIMES, Tally, positions
from .pace import pace
from .rows import at_ms_to_datetime, datetime_to_at_ms, outcome

__all__ = [
    "ABORT_COLUMNS",
    "COUNTED_LEVELS",
    "COUNTERS",
    "DAY",
    "DELTA_COLUMNS",
    "DELTA_TABLE",
    "GROUP_FIELDS",
    "LEVELS",
    "PERCENTILES",
    "SPANS",
    "Cell",
    "Deltas",
    "Group",
    "add",
    "binds_arrays",
    "cells_from_minutes",
    "cells_of",
    "collapsed",
    "day_cells",
    "days_from_hours",
    "group_key",
    "merged_levels",
    "minute_cells",
    "percentiles_text",
    "prepared",
    "stored_tally",
    "upsert",
    "write",
]

SPANS = (60, 3600)
"""Bucket widths in seconds of every level: minute and hour."""
DAY = 86_400
"""The merged levels' rows are also kept per UTC day (``days_from_hours``): a usage
answer by model or by nothing reads a 30-day range's totals from 30 rows, not 720."""

Group = tuple[str | None, str | None, str, str | None, str]
"""``(model, route, replica, via_api_key, outcome)``."""
GROUP_FIELDS = ("model", "route", "replica", "via_api_key", "outcome")

LEVELS = {
    0: GROUP_FIELDS,
    1: ("model",),
    2: (),
    3: ("via_api_key",),
    4: ("replica",),
    5: ("route",),
    6: ("outcome",),
    7: ("model", "via_api_key"),
    8: ("model", "replica"),
    9: ("model", "route"),
    10: ("model", "outcome"),
}
"""Rollup level -> the group columns its rows keep (``Rollup.level``): every label; one
label alone (levels 1 and 3-6); none, the bucket's total (2); or a label and the model
(7-10, ``COUNTED_LEVELS``)."""
COUNTED_LEVELS = frozenset((7, 8, 9, 10))
"""The levels whose rows keep counters and abort reasons only, no distributions: what
a priced answer by one label sums (a price is a model's, so its tokens are summed per
model too), from a row per (label, model) instead of every group's. Their latency
would be the label's own level's, so they keep none (what they cost the writer is a
sum of counters per cell)."""
_COLLAPSED: Group = (None, None, "", None, "")
"""A merged row's group before its kept labels are filled in."""
_KEPT_AT = {
    level: tuple(GROUP_FIELDS.index(name) for name in kept)
    for level, kept in LEVELS.items()
    if level
}
"""Merged level -> the positions in a ``Group`` of the labels it keeps."""
# Merged level -> how a group's tally is added to it (counters alone where it keeps no
# distributions).
_ADDS = tuple(
    (level, Tally.merge_counters if level in COUNTED_LEVELS else Tally.merge) for level in _KEPT_AT
)


def collapsed(group: Group, level: int) -> Group:
    """``group`` as ``level`` keeps it: its labels ``LEVELS[level]`` kept, the others
    NULL (``replica`` and ``outcome`` "")."""
    if level == 0:
        return group
    kept = list(_COLLAPSED)
    for at in _KEPT_AT[level]:
        kept[at] = group[at]
    return cast(Group, tuple(kept))


Cell = tuple[int, int, int, Group]
"""``(span_s, bucket start in epoch ms, level, group)``."""

TABLE = "ferrox_stats_rollup"
_KEY = ("span_s", "bucket", "group_key")
ABORT_COLUMNS = tuple(f"aborts_{reason}" for reason in KNOWN_ABORTS)
"""The columns counting each of ``KNOWN_ABORTS`` (``Rollup.aborts`` holds the others)."""
COUNTERS = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "out_of_range",
    "errors",
    "aborted",
    *ABORT_COLUMNS,
)
"""The summed columns of a rollup row."""
_TEXTS = ("aborts", "duration", "ttft", "tpot")
PERCENTILES = (50, 95, 99)
"""The percentiles a usage answer gives of each distribution (``percentiles_text``)."""
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
# What the rows' distributions give (``percentiles_text``), rewritten with them.
_WRITTEN = (*_TEXTS, "percentiles")
_COLUMNS = (*_KEY, *GROUP_FIELDS, "level", *COUNTERS, *_WRITTEN)
# Rows per statement: 24 parameters each stays below SQLite's 32766 and PostgreSQL's
# 65535 bound parameters.
CHUNK = 500


def group_key(group: Group, level: int = 0) -> str:
    """The digest naming ``group`` at ``level`` in the unique key (NULL labels included;
    a level-0 group's alone, as before the levels)."""
    named = group if level == 0 else [level, group]
    text = json.dumps(named, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def minute_cells(records: Iterable[Record]) -> dict[Cell, Tally]:
    """The records summed per minute and group (level 0): what a batch's deltas hold."""
    records = list(records)
    groups = cast(
        list[Group],
        list(
            zip(
                [r.model for r in records],
                [r.route for r in records],
                [r.replica for r in records],  # archived: never None
                [r.via_api_key for r in records],
                map(outcome, records),
                strict=True,
            )
        ),
    )
    minute_ms = SPANS[0] * 1000
    keys: list[Cell] = [
        (SPANS[0], t - t % minute_ms, 0, group)
        for t, group in zip(
            cast(list[int], [r.at_ms for r in records]),  # archived: never None
            groups,
            strict=True,
        )
    ]
    # A cell's records are tallied together, the cells in pieces of about PACED_RECORDS
    # records (``pace`` between them), in order of first arrival.
    pace()
    pieces: list[list[int]] = [[]]
    for indices in positions(keys).values():
        if len(pieces[-1]) >= PACED_RECORDS:
            pieces.append([])
        pieces[-1].extend(indices)
    cells: dict[Cell, Tally] = {}
    for piece in pieces:
        cells.update(_tallied([keys[i] for i in piece], [records[i] for i in piece]))
        pace()
    for (_, _, _, group), tally in cells.items():
        if group[4] == "error":
            tally.errors = tally.requests
        elif group[4] == "aborted":
            tally.aborted = tally.requests
    return cells


PACED_RECORDS = 250
"""Records tallied at a time (about a millisecond of Python) in ``minute_cells``."""


def _tallied(keys: list[Cell], records: list[Record]) -> dict[Cell, Tally]:
    """Each key's records tallied (``keys[i]`` is ``records[i]``'s)."""
    cells = Tally.grouped(keys, records)
    if cells is None:
        # A value add() leaves out (out of range, not a number): one at a time.
        cells = {}
        for key, record in zip(keys, records, strict=True):
            tally = cells.get(key)
            if tally is None:
                tally = cells[key] = Tally()
            tally.add(record)
    return cells


def cells_of(records: Iterable[Record]) -> dict[Cell, Tally]:
    """The records summed per minute, hour and day cell of every level."""
    return cells_from_minutes(minute_cells(records))


def cells_from_minutes(minutes: dict[Cell, Tally]) -> dict[Cell, Tally]:
    """Every cell the level-0 minute cells ``minutes`` add to: themselves, their merged
    levels (``merged_levels``), and each of those summed into its hour, and at the
    merged levels into its UTC day. A coarser cell that sums a single finer one (a
    fold of one minute's batches, the usual case) is that cell's tally, shared: the
    same additions would make an equal one, and nothing changes a tally once made."""
    cells = dict(minutes)
    cells.update(merged_levels(minutes))
    hours = _coarser(cells, SPANS[1])
    cells.update(hours)
    cells.update(_coarser({key: tally for key, tally in hours.items() if key[2]}, DAY))
    return cells


def _coarser(cells: dict[Cell, Tally], span: int) -> dict[Cell, Tally]:
    """``cells`` summed per bucket of ``span`` seconds (a lone one shared)."""
    span_ms = span * 1000
    into: dict[Cell, list[Tally]] = {}
    for (_, start, level, group), tally in cells.items():
        key = (span, start - start % span_ms, level, group)
        found = into.get(key)
        if found is None:
            into[key] = [tally]
        else:
            found.append(tally)
    coarser: dict[Cell, Tally] = {}
    for key, tallies in into.items():
        if len(tallies) == 1:
            coarser[key] = tallies[0]
            continue
        summed = coarser[key] = Tally()
        add = Tally.merge_counters if key[2] in COUNTED_LEVELS else Tally.merge
        for tally in tallies:
            add(summed, tally)
        pace()
    return coarser


def merged_levels(cells: dict[Cell, Tally]) -> dict[Cell, Tally]:
    """The level-0 ``cells`` merged at each coarser level (``LEVELS``), per the same
    bucket. ``COUNTED_LEVELS`` sum the counters alone."""
    merged: dict[Cell, Tally] = {}
    for (span, start, level, group), tally in cells.items():
        if level != 0:
            continue
        for coarser, add in _ADDS:
            key = (span, start, coarser, collapsed(group, coarser))
            into = merged.get(key)
            if into is None:
                into = merged[key] = Tally()
            add(into, tally)
        pace()
    return merged


def percentiles_text(tally: Tally, level: int, span: int) -> str:
    """What a merged level's hour or day row stores of its distributions' percentiles:
    per ``TIMES``, ``[count, p50, p95, p99]`` (seconds; null when it holds none), as
    compact JSON. An answer at the row's own bucket reads them instead of parsing the
    distributions. ``""`` at level 0 (its answers merge rows), for minutes (short
    ranges: their answers parse) and at the ``COUNTED_LEVELS`` (no distributions)."""
    if level == 0 or span < 3600 or level in COUNTED_LEVELS:
        return ""
    summary = []
    for name in TIMES:
        distribution = getattr(tally, name)
        summary.append([distribution.count, *distribution.quantiles(PERCENTILES)])
    return _encode(summary)


def day_cells(hours: Iterable[Any]) -> dict[Cell, Tally]:
    """The ``DAY`` cells of some hour rows of the merged levels (``Rollup`` rows, or
    anything with their fields): each row merged into its UTC day's cell."""
    cells: dict[Cell, Tally] = {}
    day_ms = DAY * 1000
    for row in hours:
        start = datetime_to_at_ms(row.bucket)
        group = collapsed(
            cast(Group, tuple(getattr(row, name) for name in GROUP_FIELDS)), row.level
        )
        key = (DAY, start - start % day_ms, row.level, group)
        into = cells.get(key)
        if into is None:
            into = cells[key] = Tally()
        into.merge(stored_tally(row))
    return cells


def days_from_hours(days: Iterable[datetime], using: str) -> int:
    """Make the ``DAY`` rows of ``days`` (UTC midnights) again from their hour rows
    (``day_cells``): for a rebuild, whose hours change under them. Return the rows
    made. The caller holds whatever keeps the hours from changing meanwhile."""
    from ..models import Rollup

    made = 0
    rows = Rollup.objects.using(using)
    for day in sorted(set(days)):
        rows.filter(span_s=DAY, bucket=day).delete()
        hours = rows.filter(
            span_s=3600, level__gt=0, bucket__gte=day, bucket__lt=day + timedelta(days=1)
        )
        cells = day_cells(hours.order_by("bucket", "id"))
        if cells:
            upsert(cells, using)
            made += len(cells)
    return made


def stored_tally(row: Any) -> Tally:
    """What a ``Rollup`` row holds, as one ``Tally`` (its counters, abort reasons from
    both their columns and their JSON, distributions)."""
    return Tally.stored(
        [getattr(row, name) for name in COUNTERS[: -len(ABORT_COLUMNS)]],
        (row.aborts, row.duration, row.ttft, row.tpot),
        [getattr(row, name) for name in ABORT_COLUMNS],
    )


def _counters(tally: Tally) -> tuple[int, ...]:
    """``tally``'s values of ``COUNTERS``, in their order."""
    return (
        tally.requests,
        tally.prompt_tokens,
        tally.completion_tokens,
        tally.cached_tokens,
        tally.out_of_range,
        tally.errors,
        tally.aborted,
        *tally.known_aborts(),
    )


Deltas = list[tuple[Any, ...]]
"""A batch's delta rows (``prepared``): each level-0 minute cell's column values."""
DELTA_TABLE = "ferrox_stats_rollupdelta"
DELTA_COLUMNS = ("bucket", *GROUP_FIELDS, *COUNTERS, *_TEXTS)
"""A ``models.RollupDelta`` row's columns but its id, in ``prepared``'s order."""


def prepared(records: Sequence[Record], using: str) -> Deltas:
    """What ``write`` inserts for ``records``: their level-0 minute cells, each as a
    delta row's values. A writer prepares its batch before its transaction, so that
    none of this Python runs while it holds the archive's commit-order lock, which
    every other writer of the fleet waits for."""
    adapt = connections[using].ops.adapt_datetimefield_value
    cells = minute_cells(records)
    pace()
    deltas: Deltas = []
    for (_, start, _, group), tally in cells.items():
        deltas.append(
            (
                adapt(at_ms_to_datetime(start)),
                *group,
                *_counters(tally),
                *tally.texts(known_aborts=False),
            )
        )
        pace()
    return deltas


def write(deltas: Deltas, using: str) -> None:
    """Insert a batch's delta rows (``prepared``), in the caller's transaction: rows of
    their own, no conflict and no row another writer holds (``archive/fold.py`` adds
    them to the rollups)."""
    if not deltas:
        return
    connection = connections[using]
    with connection.cursor() as cursor:
        if binds_arrays(connection):
            _binary(connection, cursor, _UNNEST_DELTAS, deltas)
            return
        for lo in range(0, len(deltas), CHUNK):
            part = deltas[lo : lo + CHUNK]
            row = "(" + ", ".join(["%s"] * len(DELTA_COLUMNS)) + ")"
            cursor.execute(
                f"INSERT INTO {DELTA_TABLE} ({', '.join(DELTA_COLUMNS)}) VALUES "
                + ", ".join([row] * len(part)),
                [value for values in part for value in values],
            )


def add(records: Sequence[Record], using: str) -> None:
    """Add ``records`` (just archived, in this transaction) to the rollups: as deltas."""
    if records:
        write(prepared(records, using), using)


def upsert(cells: dict[Cell, Tally], using: str) -> None:
    """Add each tally to its cell's row (created if missing), in the shared lock order:
    each added to its row, created if missing; a row that existed has its
    distributions merged under its lock. For a fold, a rebuild, a migration."""
    _write_chunks(_chunks(cells, using), using)


Chunk = tuple[list[tuple[Any, ...]], dict[tuple[int, Any, str], tuple[Tally, int]]]
"""A statement's cells: their rows of column values, in the lock order, and each cell's
tally and level by ``(span, adapted bucket, group digest)`` (to merge what it returns)."""


def _chunks(cells: dict[Cell, Tally], using: str) -> list[Chunk]:
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    keyed = sorted(
        ((span, start, group_key(group, level)), group, level, tally)
        for (span, start, level, group), tally in cells.items()
    )
    # PostgreSQL takes every cell in one statement of arrays; elsewhere a multi-row
    # INSERT at most CHUNK rows long.
    if binds_arrays(connection):
        parts = [keyed]
    else:
        parts = [keyed[lo : lo + CHUNK] for lo in range(0, len(keyed), CHUNK)]
    # A tally shared by several cells (``cells_of``: a one-minute batch's minute, hour
    # and day) is written out once (its percentiles once for its hour and day).
    written: dict[tuple[int, bool], tuple[str, ...]] = {}
    chunks: list[Chunk] = []
    for part in parts:
        rows: list[tuple[Any, ...]] = []
        mine: dict[tuple[int, Any, str], tuple[Tally, int]] = {}
        for (span, start, digest), group, level, tally in part:
            bucket = adapt(at_ms_to_datetime(start))
            mine[(span, bucket, digest)] = (tally, level)
            shared = (id(tally), span >= 3600)
            texts = written.get(shared)
            if texts is None:
                texts = written[shared] = (
                    *tally.texts(known_aborts=False),
                    percentiles_text(tally, level, span),
                )
            rows.append(
                (
                    span,
                    bucket,
                    digest,
                    *group,
                    level,
                    *_counters(tally),
                    *texts,
                )
            )
            pace()
        chunks.append((rows, mine))
    return chunks


def _write_chunks(chunks: list[Chunk], using: str) -> None:
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    arrays = binds_arrays(connection)
    merged: list[tuple[str, str, str, str, str, int]] = []
    with connection.cursor() as cursor:
        for rows, mine in chunks:
            if arrays:
                # One statement, the cells as one array per column, inserted in the
                # arrays' (the lock) order.
                returned = _binary(connection, cursor, _UNNEST_UPSERT, rows)
            else:
                cursor.execute(_values_upsert(len(rows)), [value for row in rows for value in row])
                returned = cursor.fetchall()
            for row in returned:
                row_id, span, bucket, digest, requests = row[:5]
                tally, level = mine[(span, _same(bucket, adapt), digest)]
                if requests == tally.requests:
                    continue  # created by this statement, with this batch's distributions
                stored = Tally()
                stored.merge_texts(*row[_RETURNED_TEXTS:])
                stored.merge(tally)
                merged.append(
                    (
                        *stored.texts(known_aborts=False),
                        percentiles_text(stored, level, span),
                        row_id,
                    )
                )
                pace()
        if merged and arrays:
            # Rows this transaction holds locked already: their order no longer matters.
            _binary(connection, cursor, _UNNEST_UPDATE, merged)
        elif merged:
            cursor.executemany(
                f"UPDATE {TABLE} SET {', '.join(f'{c} = %s' for c in _WRITTEN)} WHERE id = %s",
                merged,
            )


_COUNTER_SET = ", ".join(f"{c} = {TABLE}.{c} + excluded.{c}" for c in COUNTERS)
_CONFLICT = f" ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET {_COUNTER_SET}"
_RETURNING = " RETURNING " + ", ".join(("id", *_KEY, *COUNTERS, *_TEXTS))
_RETURNED_TEXTS = 1 + len(_KEY) + len(COUNTERS)
# PostgreSQL array types of _COLUMNS (the model's column types).
_ARRAY_TYPES = (
    "integer",
    "timestamptz",
    *("varchar",) * 6,  # group_key, model, route, replica, via_api_key, outcome
    "smallint",  # level
    *("bigint",) * len(COUNTERS),
    *("text",) * len(_WRITTEN),
)
_UNNEST_UPSERT = (
    f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) "
    f"SELECT {', '.join(_COLUMNS)} FROM unnest("
    + ", ".join(f"%b::{t}[]" for t in _ARRAY_TYPES)
    + f") WITH ORDINALITY AS cell ({', '.join(_COLUMNS)}, n) ORDER BY n"
    + _CONFLICT
    + _RETURNING
)
_DELTA_ARRAY_TYPES = (
    "timestamptz",
    *("varchar",) * len(GROUP_FIELDS),
    *("bigint",) * len(COUNTERS),
    *("text",) * len(_TEXTS),
)
_UNNEST_DELTAS = (
    f"INSERT INTO {DELTA_TABLE} ({', '.join(DELTA_COLUMNS)}) "
    f"SELECT * FROM unnest({', '.join(f'%b::{t}[]' for t in _DELTA_ARRAY_TYPES)})"
)
_UNNEST_UPDATE = (
    f"UPDATE {TABLE} SET {', '.join(f'{c} = merged.{c}' for c in _WRITTEN)} "
    f"FROM unnest({'%b::text[], ' * len(_WRITTEN)}%b::bigint[]) "
    f"AS merged ({', '.join(_WRITTEN)}, id) WHERE {TABLE}.id = merged.id"
)


def _values_upsert(n: int) -> str:
    row = "(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"
    return (
        f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES "
        + ", ".join([row] * n)
        + _CONFLICT
        + _RETURNING
    )


def _same(bucket: Any, adapt: Any) -> Any:
    # RETURNING gives PostgreSQL's aware datetime, or SQLite's stored text (what
    # ``adapt`` wrote): either way the value the cell was keyed by.
    return adapt(bucket) if isinstance(bucket, datetime) else bucket


def binds_arrays(connection: Any) -> bool:
    """Whether ``connection`` is PostgreSQL under psycopg 3, whose cursor binds the
    cells as arrays on the server (``_binary``). Under psycopg2, which Django supports
    too, PostgreSQL takes the multi-row statements SQLite does."""
    if connection.vendor != "postgresql":
        return False
    # django-stubs leaves this module out.
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        is_psycopg3,
    )

    return bool(is_psycopg3)


def _binary(connection: Any, cursor: Any, statement: str, rows: list[Any]) -> list[Any]:
    """Run ``statement`` with ``rows``' columns as array parameters, bound by the server
    in binary; what it returns. Django's psycopg cursor binds on the client: each text
    of each cell quoted into the SQL, by a regular expression per element (a sixth of
    what the rollups cost the writer's CPU). On ``cursor``'s connection: in its
    transaction, prepared as its ``prepare_threshold`` says (Django's default: never,
    for a pooler in transaction mode); errors raised as Django's. (Django's execute
    wrappers and query log do not see it, as they do not see the archive's COPY.)"""
    import psycopg

    with connection.wrap_database_errors, psycopg.Cursor(cursor.connection) as binary:
        binary.execute(statement, [list(c) for c in zip(*rows, strict=True)])
        return binary.fetchall() if binary.description else []
