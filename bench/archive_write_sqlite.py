"""The archive writer on SQLite (the embedded default): what a batch holds the GIL for.

On SQLite (and on PostgreSQL under psycopg2) a batch is a bulk insert, not a COPY. Its
Python work runs on the writer thread of a serving process, holding the GIL: while it
does, a request whose socket became ready waits for the GIL (up to the 5 ms switch
interval at a time). So the figure that matters is the writer thread's CPU per row.

N records (``archive_write.make_records``, ``--rows``) are written in batches of
``--batch`` into a migrated SQLite file in a temp directory, each round from an empty
table, by each variant:

- ``archiver``: ``ArchiveWriter(autostart=False)``: every record ``submit()``-ed, then
  ``drain()`` from this thread, as the writer thread does (the rollups as configured,
  ``--rollups on|off``; on is the default);
- ``bulk_create``: the insert the bulk path used before (issue 13), without the lookup
  of every row's keys that came before it: the batch's model instances through
  ``FinishedRequest.objects.bulk_create``, in a transaction;
- ``executemany`` (the anchor): the standard library's ``sqlite3`` on its own
  connection to the same file, one ``executemany`` of the rows' values (built before
  the clock starts) per batch and a commit: what no writer can go much below.

Rounds interleave the variants, rotating their order; per variant the median round's
thread CPU per row and rows/s (wall) are printed, and ``archiver``'s CPU per row ÷ each
other's (a median of per-round ratios).

Run from the repo root::

    PYTHONPATH=.:bench python bench/archive_write_sqlite.py [--rows 5000 --batch 1000 --rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archive_write import make_records
from host import header, interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rollups", choices=["on", "off"], default="on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'archive.sqlite3'}"
        os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
        run(args)


def run(args: argparse.Namespace) -> None:
    import sqlite3

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, transaction

    from ferrox_stats.archive.batch import _COLUMN_LIST, TABLE
    from ferrox_stats.archive.rows import COLUMNS, Pending, row_values
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta

    call_command("migrate", verbosity=0)
    # As a production host runs: no query log (DEBUG formats every statement it runs).
    settings.DEBUG = False
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": args.rollups == "on"}
    records = make_records(args.rows, groups=48)
    items = [Pending(i, r, "bench") for i, r in enumerate(records)]
    batches = [items[i : i + args.batch] for i in range(0, len(items), args.batch)]
    field = FinishedRequest._meta.get_field("finished_at")
    at = COLUMNS.index("finished_at")

    def sqlite_row(item: Pending) -> tuple[Any, ...]:
        row = row_values(item)
        return (*row[:at], field.get_db_prep_save(row[at], connection), *row[at + 1 :])

    plain_rows = [[sqlite_row(item) for item in batch] for batch in batches]
    database = settings.DATABASES["default"]["NAME"]

    def empty() -> None:
        for model in (FinishedRequest, Rollup, RollupDelta):
            model.objects.all().delete()

    def archiver() -> None:
        writer = ArchiveWriter(batch_size=args.batch, autostart=False)
        for item in items:
            writer.submit(item.seq, item.record, item.instance)
        assert writer.drain(600.0)
        writer.fold_if_due(now=True)

    def bulk_create() -> None:
        for batch in batches:
            with transaction.atomic():
                FinishedRequest.objects.bulk_create(
                    [
                        FinishedRequest(**dict(zip(COLUMNS, row_values(i), strict=True)))
                        for i in batch
                    ],
                    batch_size=500,
                )

    placeholders = ", ".join(["?"] * len(COLUMNS))
    insert = f"INSERT INTO {TABLE} ({_COLUMN_LIST}) VALUES ({placeholders})"
    raw = sqlite3.connect(database, isolation_level=None)

    def executemany() -> None:
        for rows in plain_rows:
            raw.execute("BEGIN IMMEDIATE")
            raw.executemany(insert, rows)
            raw.execute("COMMIT")

    variants: dict[str, Callable[[], None]] = {
        "archiver": archiver,
        "bulk_create": bulk_create,
        "executemany": executemany,
    }
    print(
        header(
            f"Django {django.get_version()}, SQLite {sqlite3.sqlite_version}; {args.rows} rows "
            f"in batches of {args.batch}, {args.rounds} rounds, rollups {args.rollups}"
        )
    )
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r, name in interleaved(names, args.rounds):
        empty()
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        variants[name]()
        spent_cpu, spent_wall = time.thread_time() - cpu_start, time.perf_counter() - wall_start
        assert FinishedRequest.objects.count() == args.rows, name
        if r:  # round 0 warms up
            cpu[name].append(spent_cpu / args.rows * 1e6)
            wall[name].append(args.rows / spent_wall)
    raw.close()
    for name in names:
        print(
            f"  {name:12s} {statistics.median(cpu[name]):6.1f} µs of thread CPU per row, "
            f"{statistics.median(wall[name]):8,.0f} rows/s"
        )
    for other in ("bulk_create", "executemany"):
        ratio = statistics.median(a / b for a, b in zip(cpu["archiver"], cpu[other], strict=True))
        print(f"  archiver ÷ {other}, CPU per row: {ratio:.2f}x")


if __name__ == "__main__":
    main()
