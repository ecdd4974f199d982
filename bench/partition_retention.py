"""Retention on the partitioned archive: a day of rows dropped whole, against deleting rows.

Issue 14: retention of a day at 10M rows per day in under a second, by dropping its
partition (no bulk DELETE). This bench fills one day partition of the archive (every
index of migration 0013 in place) with ``--sizes`` rows each, generated in the server
(``INSERT ... SELECT generate_series``: the fill is not what is measured), ANALYZEs it
and times ``archive.retention.prune`` (what ``manage.py ferrox_stats_prune`` runs: the
advisory lock, the partition listing, the DROP under ``lock_timeout``, the row-by-row
pass over the DEFAULT partition, which finds nothing) with a cutoff at the end of that
day. For scale it also times what rows outside a day partition still cost: the same
prune deleting ``--delete-rows`` rows from the DEFAULT partition in batches of
``--batch-size``. And it times migration 0013 itself over an unpartitioned archive of
``--migrate-rows`` rows (the one-off cost of the migration path).

Each figure is one wall-clock run (the database on this machine; a drop is one
catalog change, not repeated). Creates and drops its own database. From the repo root::

    PYTHONPATH=.:bench python bench/partition_retention.py --quick   # ~1 min
    PYTHONPATH=.:bench python bench/partition_retention.py           # 1M and 10M rows
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_partitions"
GOAL_S = 1.0
FIRST_DAY = date(2026, 11, 1)

FILL = """
INSERT INTO ferrox_stats_finishedrequest (
    request_id, finished_at, route, model, status, stream, prompt_tokens,
    completion_tokens, cached_tokens, ttft_ms, duration_ms, queue_ms, decode_ms,
    finish_reason, client, via_api_key, replica, instance, seq, outcome, ingested)
SELECT 'chatcmpl-' || %(day)s || '-' || g,
       %(start)s::timestamptz + (g %% 86400000) * interval '1 millisecond',
       '/v1/chat/completions', 'model-' || (g %% 5), 200, true, 500 + g %% 300,
       10 + g %% 90, 0, 50 + g %% 200, 400 + g %% 900, 1, 300 + g %% 600, 'stop',
       '10.0.0.' || (g %% 50), 'team-' || (g %% 20), 'gpu-' || (g %% 4), 'w-' || %(day)s,
       g, 'ok', false
FROM generate_series(1, %(rows)s) AS g
"""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--delete-rows", type=int, default=1_000_000)
    parser.add_argument("--migrate-rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="100k and 1M rows; 100k others")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.delete_rows, args.migrate_rows = [100_000, 1_000_000], 100_000, 100_000
    return args


def main() -> None:
    args = arguments()
    create_database(args.server, args.database)
    try:
        run(args)
    finally:
        drop_database(args.server, args.database)


def fill(cursor: object, day: date, rows: int) -> float:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    began = time.perf_counter()
    cursor.execute(FILL, {"day": day.isoformat(), "start": start, "rows": rows})  # type: ignore[attr-defined]
    cursor.execute("ANALYZE ferrox_stats_finishedrequest")  # type: ignore[attr-defined]
    return time.perf_counter() - began


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from ferrox_stats.archive import partitions, retention
    from ferrox_stats.archive.retention import prune

    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    print(f"{__doc__.splitlines()[0]}\n{platform.python_version()}, PostgreSQL {pg_major}")

    # The migration path first: an unpartitioned archive of --migrate-rows rows.
    MigrationExecutor(connection).migrate([("ferrox_stats", "0012_usage_rollups")])
    with connection.cursor() as cursor:
        fill(cursor, FIRST_DAY - timedelta(days=1), args.migrate_rows)
    began = time.perf_counter()
    call_command("migrate", "ferrox_stats", verbosity=0)
    migrated = time.perf_counter() - began
    print(f"migration 0013 over {args.migrate_rows:,} unpartitioned rows: {migrated:.1f} s")
    call_command("migrate", verbosity=0)
    # The old rows (now the _legacy partition, up to tomorrow) go, so that the days
    # below get partitions of their own.
    for p in partitions.partitions():
        if p.name.endswith("_legacy"):
            partitions.drop(p)

    # What each step of the prune took: the DETACH (the rows leave the archive; the
    # archive's lock, for a catalog change) and the DROP of the detached table after.
    steps: dict[str, float] = {}

    def timed(step: str, function: Any) -> Any:
        def run_timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                steps[step] = steps.get(step, 0.0) + time.perf_counter() - began

        return run_timed

    retention.detach = timed("detach", retention.detach)  # type: ignore[assignment]
    retention.drop_detached = timed("drop", retention.drop_detached)  # type: ignore[assignment]

    drops: list[tuple[int, float, float]] = []
    for n, rows in enumerate(args.sizes):
        day = FIRST_DAY + timedelta(days=n)
        partitions.make_days([day])
        with connection.cursor() as cursor:
            filled = fill(cursor, day, rows)
        cutoff = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        steps.clear()
        began = time.perf_counter()
        result = prune(cutoff, batch_size=args.batch_size)
        took = time.perf_counter() - began
        assert result.partitions == (partitions.day_name(day),), result
        drops.append((rows, steps["detach"], took))
        print(
            f"a day of {rows:>11,} rows (filled in {filled:5.1f} s): prune dropped "
            f"{result.partitions[0]} (about {result.partition_rows:,} rows) in "
            f"{took * 1000:7.1f} ms: out of the archive (DETACH) in "
            f"{steps['detach'] * 1000:6.1f} ms, its files removed (DROP) in "
            f"{steps['drop'] * 1000:7.1f} ms"
        )

    # Rows outside any day partition (DEFAULT) are still deleted in batches.
    day = FIRST_DAY + timedelta(days=len(args.sizes) + 1)
    with connection.cursor() as cursor:
        fill(cursor, day, args.delete_rows)
    cutoff = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    began = time.perf_counter()
    result = prune(cutoff, batch_size=args.batch_size)
    deleted = time.perf_counter() - began
    print(
        f"the same prune deleting {result.finished_requests:,} rows of the DEFAULT partition "
        f"in {result.batches} batches of {args.batch_size:,}: {deleted:.1f} s"
    )

    (small, small_out, small_s), (large, large_out, large_s) = drops[0], drops[-1]
    out_verdict = "met" if large_out < GOAL_S else "NOT met"
    all_verdict = "met" if large_s < GOAL_S else "NOT met"
    print(
        f"HEADLINE: a day of {large:,} rows left the archive in {large_out * 1000:.0f} ms "
        f"({large_out / small_out:.2f}x the {small:,}-row day; goal < {GOAL_S:.0f} s: "
        f"{out_verdict}); the whole prune, files removed, {large_s * 1000:.0f} ms "
        f"({large_s / small_s:.2f}x; < {GOAL_S:.0f} s: {all_verdict}); deleting "
        f"{args.delete_rows:,} rows row by row took {deleted:.1f} s"
    )


if __name__ == "__main__":
    main()
