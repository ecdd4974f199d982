"""Archive write throughput with several writer processes at once.

Every archive insert takes the commit-order lock until it commits (migration 0006), so
concurrent writers no longer overlap their transactions. This measures what that
costs: W processes (``--writers``, default 1 2 4) each COPY their share of N realistic
rows (``--rows``) into the archive in batches of ``ARCHIVE_BATCH_SIZE``, one commit
per batch, all starting together. Timed: from the start signal until the last one
finishes. Each round starts from an empty table and must leave exactly N rows.
The script creates (and finally drops) its own database on the local PostgreSQL.

Run from the repo root::

    PYTHONPATH=. python bench/archive_writers.py [--rows N --rounds R --writers 1 2 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

import psycopg
from archive_write import make_records
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_writers"


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
    args = parser.parse_args()
    url = create_database(args.server, DATABASE)
    try:
        run(args, url)
    finally:
        drop_database(args.server, DATABASE)


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
    batch = conf.ARCHIVE_BATCH_SIZE
    # Fork: the children inherit the rows instead of pickling them.
    context = multiprocessing.get_context("fork")
    print(f"{args.rows} rows, batch {batch}, {args.rounds} rounds")
    for writers in args.writers:
        share = args.rows // writers
        seconds = []
        for _ in range(args.rounds):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"TRUNCATE {table}")
            go = context.Event()
            procs = [
                context.Process(
                    target=write,
                    args=(url, copy_sql, rows[w * share : (w + 1) * share], batch, go),
                )
                for w in range(writers)
            ]
            for proc in procs:
                proc.start()
            start = time.perf_counter()
            go.set()
            for proc in procs:
                proc.join(600)
            seconds.append(time.perf_counter() - start)
            assert all(proc.exitcode == 0 for proc in procs), "a writer failed"
            with psycopg.connect(url) as conn:
                got = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert got == (share * writers,), got
        n = share * writers
        print(
            f"{writers} writer(s): median {n / statistics.median(seconds):8.0f} rows/s, "
            f"best {n / min(seconds):8.0f} rows/s"
        )


if __name__ == "__main__":
    main()
