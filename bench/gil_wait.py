"""How long a serving thread waits for the GIL while the archive writer writes.

The writer runs on a thread of the serving process; a request whose socket becomes
ready while the writer's Python holds the GIL waits for it, up to CPython's switch
interval (5 ms) each time it needs it back (issue 13: the pass-through's p99).
``archive/pace.py`` has the writer's long steps pause between pieces of about 1 ms.

Here a probe thread stands for the request: it sleeps 1 ms (releasing the GIL, as a
server waits on its sockets) and measures how late it woke, again and again, while the
real ``ArchiveWriter`` thread writes ``--rows`` records (``archive_write.make_records``,
48 label groups, in batches of ``--batch``) into a migrated SQLite file (the embedded
default; with ``--postgres``, a throwaway PostgreSQL database), rollups on as by
default, and folds their rollups once at the end. Lateness beyond a few hundred
microseconds is waiting for the GIL.

Variants, interleaved over ``--rounds`` rounds (rotating their order):

- ``paced``: the writer as shipped;
- ``unpaced``: ``pace`` replaced by a no-op in the archive's modules (the writer before
  ``archive/pace.py``, but for its pieces' boundaries).

The garbage collector is off while a round runs (its full collections stop every
thread, whoever's objects they are: the host's to tune, not the writer's). Printed per
variant: the probe's lateness at p50, p99 and max over all its wake-ups, the share of
wake-ups later than 2 ms, and the writer's wall time; then paced ÷ unpaced at p99.

Run from the repo root::

    PYTHONPATH=.:bench python bench/gil_wait.py [--rows 5000 --batch 1000 --rounds 5] [--postgres]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from archive_write import make_records
from host import header, interleaved
from pgdb import SERVER, create_database, drop_database

PROBE_S = 0.001
DATABASE = "ferrox_bench_gil_wait"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="archive to a throwaway PostgreSQL database instead (the COPY under the "
        "commit-order lock is not paced; the rollups and the fold are)",
    )
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    if args.postgres:
        create_database(args.server, DATABASE)
        try:
            run(args, "PostgreSQL")
        finally:
            drop_database(args.server, DATABASE)
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'archive.sqlite3'}"
        run(args, "SQLite")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace, database: str) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from ferrox_stats.archive import batch, fold, rollups
    from ferrox_stats.archive.pace import pace
    from ferrox_stats.archive.rows import Pending
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta

    call_command("migrate", verbosity=0)
    settings.DEBUG = False  # as a production host runs: no query log
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": True}
    records = make_records(args.rows, groups=48)
    items = [Pending(i, r, "bench") for i, r in enumerate(records)]
    paced_modules = (batch, rollups, fold)

    def set_pace(function: object) -> None:
        for module in paced_modules:
            module.pace = function  # type: ignore[attr-defined]

    def write() -> None:
        writer = ArchiveWriter(batch_size=args.batch, autostart=False)
        for item in items:
            writer.submit(item.seq, item.record, item.instance)
        assert writer.drain(600.0)
        writer.fold_if_due(now=True)
        connections.close_all()  # this thread's connection

    def probe(stop: threading.Event, late: list[float]) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            time.sleep(PROBE_S)
            late.append((time.perf_counter() - start - PROBE_S) * 1e3)

    def one_round() -> tuple[list[float], float]:
        for model in (FinishedRequest, Rollup, RollupDelta):
            model.objects.all().delete()
        late: list[float] = []
        stop = threading.Event()
        prober = threading.Thread(target=probe, args=(stop, late))
        writer = threading.Thread(target=write)
        gc.disable()
        try:
            prober.start()
            start = time.perf_counter()
            writer.start()
            writer.join()
            wall = time.perf_counter() - start
            stop.set()
            prober.join()
        finally:
            gc.enable()
        assert FinishedRequest.objects.count() == args.rows
        return late, wall

    variants = {"paced": pace, "unpaced": lambda: None}
    print(
        header(
            f"Django {django.get_version()}; {args.rows} rows in batches of {args.batch} to "
            f"{database}, rollups on, {args.rounds} rounds, probe every {PROBE_S * 1e3:.0f} ms"
        )
    )
    lateness: dict[str, list[float]] = {name: [] for name in variants}
    p99s: dict[str, list[float]] = {name: [] for name in variants}
    walls: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    try:
        for r, name in interleaved(names, args.rounds):
            set_pace(variants[name])
            late, wall = one_round()
            if r:  # round 0 warms up
                lateness[name].extend(late)
                p99s[name].append(quantile(late, 0.99))
                walls[name].append(wall * 1e3)
    finally:
        set_pace(pace)
    for name in names:
        late = lateness[name]
        over = sum(x > 2.0 for x in late) / len(late)
        print(
            f"  {name:8s} probe late p50 {quantile(late, 0.5):5.2f} ms, p99 "
            f"{quantile(late, 0.99):5.2f} ms, max {max(late):6.2f} ms, later than 2 ms "
            f"{over:6.1%} of {len(late)}; writer {statistics.median(walls[name]):5.0f} ms a round"
        )
    ratio = statistics.median(a / b for a, b in zip(p99s["paced"], p99s["unpaced"], strict=True))
    print(f"  paced ÷ unpaced, probe lateness at p99: {ratio:.2f}x (median of per-round ratios)")


if __name__ == "__main__":
    main()
