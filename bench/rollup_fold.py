"""What a fold of the rollup deltas costs, as pending deltas grow (``archive/fold.py``).

Every usage answer folds the pending deltas before it reads (so that it counts every
batch committed before it), and each process's writer folds at most every
``ROLLUP_FOLD_S``: what a fleet left pending is what the next fold, or an answer,
pays. Per size (``--deltas``): archive batches of ``--batch`` records over at most
``--groups`` rollup groups (``archive_write.make_records``) until that many deltas are
pending (untimed), then one ``fold`` timed, wall and this process's CPU, the rollups
already holding the same minutes (a fold merges into existing rows, as it does in
production). Each round starts from empty tables; the rollups must then count every
row and no delta be left. The script creates (and finally drops) its own database on
the local PostgreSQL.

Run from the repo root::

    PYTHONPATH=.:bench python bench/rollup_fold.py [--deltas 500 2000 8000 --rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from archive_write import make_records
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_fold"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, nargs="+", default=[500, 2000, 8000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100, help="records per archive batch")
    parser.add_argument("--groups", type=int, default=48, help="rollup groups at most")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()
    create_database(args.server, DATABASE)
    try:
        run(args)
    finally:
        drop_database(args.server, DATABASE)


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from ferrox_stats.archive import partitions
    from ferrox_stats.archive.batch import write_batch
    from ferrox_stats.archive.fold import fold
    from ferrox_stats.archive.rows import Pending, at_ms_to_datetime
    from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta

    call_command("migrate", verbosity=0)
    settings.FERROX_STATS = {**getattr(settings, "FERROX_STATS", {}), "ROLLUPS": True}
    tables = ", ".join(m._meta.db_table for m in (FinishedRequest, Rollup, RollupDelta))
    biggest = max(args.deltas)
    # Enough records for the largest size (a batch of 100 over 48 groups leaves ~40).
    records = make_records(biggest * 4, groups=args.groups)
    partitions.make_days({at_ms_to_datetime(r.at_ms).date() for r in records})
    items = [Pending(i, r, "bench") for i, r in enumerate(records)]
    print(
        f"folds of pending rollup deltas: batches of {args.batch} records over at most "
        f"{args.groups} groups, {args.rounds} rounds per size"
    )

    def pending() -> int:
        return RollupDelta.objects.count()

    for size in args.deltas:
        walls: list[float] = []
        cpus: list[float] = []
        taken = 0
        for _ in range(args.rounds):
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {tables}")
            # The rollups already hold these minutes: one batch's worth, folded.
            lo = args.batch
            write_batch(items[:lo])
            fold("default")
            written = lo
            while pending() < size:
                assert lo < len(items), "too few records for that many deltas"
                write_batch(items[lo : lo + args.batch])
                lo += args.batch
                written = lo
            taken = pending()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            folded = fold("default")
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            assert folded == taken and not pending(), (folded, taken)
            assert total(Rollup) == written, "the rollups miss rows"
            walls.append(wall)
            cpus.append(cpu)
        wall_ms = statistics.median(walls) * 1000
        cpu_ms = statistics.median(cpus) * 1000
        print(
            f"{taken:6d} deltas pending: fold {wall_ms:7.1f} ms wall, {cpu_ms:7.1f} ms CPU "
            f"(median); {wall_ms * 1000 / taken:5.0f} µs wall per delta"
        )


def total(rollup: Any) -> int:
    """The requests the rollups count (each minute's total)."""
    from django.db.models import Sum

    rows = rollup.objects.filter(span_s=60, level=2)
    return int(rows.aggregate(n=Sum("requests"))["n"] or 0)


if __name__ == "__main__":
    main()
