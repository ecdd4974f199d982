"""What the usage rollups cost the archive writer, counted in instructions (callgrind).

``bench/archive_write.py`` times the writer with and without ``ROLLUPS``; on a shared
2-core machine its rollups ratio swings by a third from run to run. This counts
instead: ``valgrind --tool=callgrind`` runs a Python process that archives batches of
``--batch`` records (``archive_write.make_records``, over ``--groups`` rollup groups at
most; ``all``: about 540) with ``archive.batch.write_batch`` on the local PostgreSQL,
as the writer's thread does, and with the rollups on folds every ``--fold-every``
batches (``archive/fold.py``, as a writer folds every ``ROLLUP_FOLD_S``). A warm-up of
as many batches runs first, so the counted folds merge into rollup rows that exist, as
in production. Each case runs twice, with ``K`` and ``2K`` counted batches (``K`` =
``--fold-every``), so ``(count(2K) - count(K)) / (K x batch)`` is one record's
instructions, start-up, migrations and warm-up cancelled out. The collector is off
while the batches are counted and hashes are seeded alike. The counts still move by a
few per cent from run to run (psycopg's client polls while it waits for the server, as
often as the server's timing makes it): the archive alone, the same code, read
28.0-30.8k instructions a record in six runs on 2026-12-07. That is far steadier than
times on a shared machine, and small beside the rollups' share.

Cases: ``archive`` (``ROLLUPS`` off) and ``archive + rollups``; their difference is what
the rollups cost the writer's process per record: tallying each batch's minute cells,
inserting them as deltas, and the folds. The database server's own work is another
process's, and not counted.

``--before DIR`` counts the same cases with the ``ferrox_stats`` of another checkout
(a ``git worktree`` of an earlier commit) and prints the ratios.

Run from the repo root (needs Debian's ``valgrind`` and the local PostgreSQL; a few
minutes; the two runs of a case go side by side)::

    PYTHONPATH=.:bench python bench/rollup_instructions.py [--groups 48] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from host import callgrind, commit
from pgdb import SERVER

REPO = Path(__file__).resolve().parent.parent
CASES = {"archive": "off", "archive + rollups": "on"}

# What runs under valgrind: ``python -c CHILD <on|off> <batches> <batch> <fold every>
# <groups> <database> <server>``.
CHILD = r"""
import gc, sys
rollups, batches, size, every = sys.argv[1] == "on", *map(int, sys.argv[2:5])
groups, database, server = sys.argv[5], sys.argv[6], sys.argv[7]
from pgdb import create_database, drop_database
create_database(server, database)
try:
    import django
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from archive_write import make_records
    from ferrox_stats.archive import partitions
    from ferrox_stats.archive.batch import write_batch
    from ferrox_stats.archive.fold import fold
    from ferrox_stats.archive.rows import Pending, at_ms_to_datetime
    settings.FERROX_STATS = {**getattr(settings, "FERROX_STATS", {}), "ROLLUPS": rollups}
    # As many records in every run (the warm-up and 2K batches), so making them cancels.
    records = make_records((3 * every) * size, groups=None if groups == "all" else int(groups))
    partitions.make_days({at_ms_to_datetime(r.at_ms).date() for r in records})
    items = [Pending(i, r, "bench") for i, r in enumerate(records)]

    def archive(first, n):
        for k in range(first, first + n):
            write_batch(items[k * size : (k + 1) * size])
            if rollups and (k + 1) % every == 0:
                fold("default")

    archive(0, every)  # the warm-up: the rollup rows exist from here on
    gc.collect()
    gc.disable()
    archive(every, batches)
    gc.enable()
finally:
    drop_database(server, database)
"""


def count(tree: Path, case: str, batches: int, args: argparse.Namespace, tmp: Path) -> int:
    """Instructions of one run: ``case``'s ``batches`` counted batches with ``tree``'s
    ``ferrox_stats``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "bench"), str(REPO)]),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        # The same hashes, so the same dict and set layouts, in every run.
        "PYTHONHASHSEED": "0",
    }
    name = f"ferrox_bench_rollup_ir_{os.getpid()}_{CASES[case]}_{batches}_{abs(hash(tree)) % 10**6}"
    child = [
        sys.executable, "-c", CHILD, CASES[case], str(batches), str(args.batch),
        str(args.fold_every), str(args.groups), name, args.server,
    ]  # fmt: skip
    try:
        return callgrind(child, tmp / f"{name}.out", env)["Ir"]
    except RuntimeError as e:
        raise RuntimeError(f"{case} ({tree}): {e}") from None


def per_record(tree: Path, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    """Each case's instructions per counted record with ``tree``'s code."""
    k = args.fold_every
    result = {}
    with ThreadPoolExecutor(2) as pool:
        for case in CASES:
            runs = [pool.submit(count, tree, case, n, args, tmp) for n in (k, 2 * k)]
            once, twice = (run.result() for run in runs)
            result[case] = (twice - once) / (k * args.batch)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="48", help="rollup groups at most, or 'all'")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch")
    parser.add_argument("--fold-every", type=int, default=5, help="K: batches per fold")
    parser.add_argument("--before", type=Path, help="another checkout, to compare with")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        name = Path(__file__).name
        print(f"{name}: skipped, valgrind is not installed (apt-get install -y valgrind)")
        return
    groups = "about 540" if args.groups == "all" else f"at most {args.groups}"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, python "
        f"{sys.version.split()[0]}; batches of {args.batch} records over {groups} rollup "
        f"groups, a fold every {args.fold_every} batches; per record = (count at 2K "
        f"batches - count at K) / (K x {args.batch}), K = {args.fold_every}"
    )
    trees = {"now": REPO, **({"before": args.before.resolve()} if args.before else {})}
    counted = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, tree in trees.items():
            counted[label] = per_record(tree, args, Path(tmp))
    print("\n| code | archive | archive + rollups | the rollups' share |")
    print("|---|---:|---:|---:|")
    for label, ir in counted.items():
        share = ir["archive + rollups"] - ir["archive"]
        print(f"| {label} | {ir['archive']:,.0f} | {ir['archive + rollups']:,.0f} | {share:,.0f} |")
    now = counted["now"]
    share = now["archive + rollups"] - now["archive"]
    print(
        f"\nthe rollups cost the writer's process {share:,.0f} instructions a record = "
        f"{share / now['archive']:.2f}x the archive alone (archive + rollups: "
        f"{now['archive + rollups'] / now['archive']:.2f}x)"
    )
    if "before" in counted:
        before = counted["before"]
        shares = {k: v["archive + rollups"] - v["archive"] for k, v in counted.items()}
        print(
            f"now / before: the rollups' share {shares['now'] / shares['before']:.3f}x, "
            f"the archive alone {now['archive'] / before['archive']:.3f}x"
        )


if __name__ == "__main__":
    main()
