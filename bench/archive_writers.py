"""Archive write throughput with several writer processes at once.

Every archive insert takes the commit-order lock until it commits (migration 0006), so
concurrent writers no longer overlap their transactions. This measures what that
costs: W processes (``--writers``, default 1 2 4) each COPY their share of N realistic
rows (``--rows``) into the archive in batches of ``ARCHIVE_BATCH_SIZE``, one commit
per batch, all starting together. Timed: from the start signal until the last one
finishes. Each round starts from an empty table and must leave exactly N rows.
The script creates (and finally drops) its own database on the local PostgreSQL.

``--app``: each writer is the app's own ``archive.batch.write_batch`` (what every
archiver, ingest and pass-through process runs) instead of a bare COPY, with the usage
rollups off and then on (``ROLLUPS``), the records spread over ``--groups`` rollup
groups (``archive_write.make_records``) and dealt to the writers in turn, so that they
write the same minutes at once, as a fleet's processes do. What it shows: how many
rows/s the fleet's archive takes as writers are added. With rollups on, each batch also
inserts its minute cells as rollup deltas, and the writers fold them into the shared
rollup rows as the app's writer thread does (``archive/fold.py``); a round ends when
every row is in the rollups, and is checked to be. Each writer is a process of its own
(``spawn``: a fresh interpreter, its own connection).

Run from the repo root::

    PYTHONPATH=. python bench/archive_writers.py [--rows N --rounds R --writers 1 2 4]
        [--app --groups G]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from archive_write import make_records
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_writers"
ARCHIVE = "ferrox_stats_finishedrequest"  # FinishedRequest._meta.db_table


def write(url: str, copy_sql: str, rows: list[Any], batch: int, go: Any) -> None:
    with psycopg.connect(url) as conn:
        go.wait()
        for lo in range(0, len(rows), batch):
            with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                for row in rows[lo : lo + batch]:
                    copy.write_row(row)
            conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    parser.add_argument(
        "--app", action="store_true", help="writers run write_batch, rollups off then on"
    )
    parser.add_argument("--groups", type=int, default=48, help="rollup groups (--app)")
    parser.add_argument(
        "--batch", type=int, default=None, help="rows per batch (ARCHIVE_BATCH_SIZE: 1000)"
    )
    args = parser.parse_args()
    url = create_database(args.server, DATABASE)
    try:
        (run_app if args.app else run)(args, url)
    finally:
        drop_database(args.server, DATABASE)


def timed_round(
    url: str,
    tables: str,
    context: Any,
    jobs: list[tuple[Callable[..., None], tuple[Any, ...]]],
    expected: int,
    started: Callable[[], None] = lambda: None,
) -> float:
    """Empty ``tables``, start a process per job (its target gets its arguments and the
    start signal), wait for ``started``, then time from the signal to the last process's
    end; the archive must then hold ``expected`` rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables}")
    go = context.Event()
    procs = [context.Process(target=target, args=(*args, go)) for target, args in jobs]
    for proc in procs:
        proc.start()
    started()
    start = time.perf_counter()
    go.set()
    for proc in procs:
        proc.join(600)
    elapsed = time.perf_counter() - start
    assert all(proc.exitcode == 0 for proc in procs), "a writer failed"
    assert archived(url) == expected, (archived(url), expected)
    return elapsed


def archived(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {ARCHIVE}").fetchone()
    return int(row[0]) if row else 0


def rolled_up(url: str) -> tuple[int, int]:
    """The requests the rollups count (each minute's total), and the deltas left."""
    with psycopg.connect(url) as conn:
        total = conn.execute(
            "SELECT coalesce(sum(requests), 0) FROM ferrox_stats_rollup "
            "WHERE span_s = 60 AND level = 2"
        ).fetchone()
        deltas = conn.execute("SELECT count(*) FROM ferrox_stats_rollupdelta").fetchone()
    return int(total[0]) if total else 0, int(deltas[0]) if deltas else 0


def app_writer(url: str, rollups: bool, items: list[Any], batch: int, go: Any) -> None:
    """One process of the fleet: the app's archive writer (``ArchiveWriter``) writing its
    items a batch at a time, and with rollups on folding the deltas as it does
    (``flush_once``: after a batch, at most every ``ROLLUP_FOLD_S``, unless another
    process is folding), then once more, waiting, at the end: a round's time is until
    every row is in the rollups."""
    import os

    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.conf import settings

    from ferrox_stats.archive.batch import write_batch
    from ferrox_stats.archive.fold import fold
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.conf import conf

    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": rollups}
    write_batch(items[:1])  # connected, warm; its row is part of the count
    writer = ArchiveWriter(
        batch_size=batch, queue_max=len(items), fold_s=conf.ROLLUP_FOLD_S, autostart=False
    )
    for item in items[1:]:
        writer.submit(item.seq, item.record, item.instance)
    go.wait()
    while writer.flush_once():  # each batch, then its fold when one is due
        pass
    if rollups:
        fold(writer.using)


def run_app(args: argparse.Namespace, url: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from ferrox_stats.archive import partitions
    from ferrox_stats.archive.rows import Pending, at_ms_to_datetime
    from ferrox_stats.conf import conf
    from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta

    call_command("migrate", verbosity=0)
    records = make_records(args.rows, groups=args.groups)
    partitions.make_days({at_ms_to_datetime(r.at_ms).date() for r in records})
    items = [Pending(i, r, "bench") for i, r in enumerate(records)]
    batch = args.batch or conf.ARCHIVE_BATCH_SIZE
    tables = ", ".join(m._meta.db_table for m in (FinishedRequest, Rollup, RollupDelta))
    context = multiprocessing.get_context("spawn")
    print(
        f"{args.rows} rows over at most {args.groups} rollup groups, write_batch in batches of "
        f"{batch}, {args.rounds} rounds"
    )
    for rollups in (False, True):
        for writers in args.writers:

            def started(writers: int = writers) -> None:
                # Each writer has connected and written its first row.
                deadline = time.monotonic() + 60
                while archived(url) < writers:
                    assert time.monotonic() < deadline, "the writers did not start"
                    time.sleep(0.05)

            jobs = [(app_writer, (url, rollups, items[w::writers], batch)) for w in range(writers)]
            seconds = []
            for _ in range(args.rounds):
                seconds.append(timed_round(url, tables, context, jobs, args.rows, started))
                if rollups:
                    assert rolled_up(url) == (args.rows, 0), "the rollups miss rows"
            n = args.rows - writers  # the warm-up rows are not timed
            print(
                f"rollups {'on ' if rollups else 'off'}, {writers} writer(s): median "
                f"{n / statistics.median(seconds):8.0f} rows/s, best {n / min(seconds):8.0f} rows/s"
            )


def run(args: argparse.Namespace, url: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from ferrox_stats.archive.rows import COLUMNS, Pending, row_values
    from ferrox_stats.conf import conf
    from ferrox_stats.models import FinishedRequest

    call_command("migrate", verbosity=0)
    table = FinishedRequest._meta.db_table
    copy_sql = f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN"
    rows = [row_values(Pending(i, r, "bench")) for i, r in enumerate(make_records(args.rows))]
    batch = args.batch or conf.ARCHIVE_BATCH_SIZE
    # Fork: the children inherit the rows instead of pickling them.
    context = multiprocessing.get_context("fork")
    print(f"{args.rows} rows, batch {batch}, {args.rounds} rounds")
    for writers in args.writers:
        share = args.rows // writers
        jobs = [
            (write, (url, copy_sql, rows[w * share : (w + 1) * share], batch))
            for w in range(writers)
        ]
        seconds = [
            timed_round(url, table, context, jobs, share * writers) for _ in range(args.rounds)
        ]
        n = share * writers
        print(
            f"{writers} writer(s): median {n / statistics.median(seconds):8.0f} rows/s, "
            f"best {n / min(seconds):8.0f} rows/s"
        )


if __name__ == "__main__":
    main()
