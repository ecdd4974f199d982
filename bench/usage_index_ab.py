"""The usage counters with index-only scans allowed and not, in one run, on the same data.

Migration 0014's covering indexes serve ``archive.usage``'s counters and abort reasons
by index-only scans. This loads ``bench/usage_api.py``'s 30-day history (100 groups per
hour, priced) and times the counter answers (no ``latency=``) in ``--rounds`` rounds,
each with ``enable_indexonlyscan`` on and off in alternating order (off: the plans read
the heap rows, as before 0014). Prints medians and the median of per-round ratios.
Creates and drops its own database. From the repo root::

    PYTHONPATH=.:bench python bench/usage_index_ab.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from typing import Any

from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_usage_ab"
CASES: dict[str, dict[str, Any]] = {
    "usage()": {},
    "by model": {"group_by": ["model"]},
    "by key": {"group_by": ["key"]},
    "by key, model": {"group_by": ["key", "model"]},
    "top keys": {"group_by": ["key"], "per_bucket": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = create_database(args.server, DATABASE)
    try:
        run(url, args.rounds)
    finally:
        drop_database(args.server, DATABASE)


def run(url: str, rounds: int) -> None:
    import django

    django.setup()
    import usage_api
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from ferrox_stats.archive.usage import usage
    from ferrox_stats.conf import conf

    call_command("migrate", verbosity=0)
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PRICES": usage_api.PRICES}
    prices = conf.PRICE_BOOK
    usage_api.load(url, 30, 100, 10)
    since, until = usage_api.END - timedelta(days=30), usage_api.END
    timings: dict[tuple[str, str], list[float]] = {}
    for round_ in range(rounds):
        for mode in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
            with connection.cursor() as cursor:
                cursor.execute(f"SET enable_indexonlyscan = {mode}")
            for name, kwargs in CASES.items():
                began = time.perf_counter()
                usage(since, until, prices=prices, **kwargs)
                elapsed = (time.perf_counter() - began) * 1000
                timings.setdefault((name, mode), []).append(elapsed)
    print(__doc__.splitlines()[0])
    print("call            index-only  not allowed  ratio (median of per-round)")
    for name in CASES:
        on, off = timings[(name, "on")], timings[(name, "off")]
        ratio = statistics.median(a / b for a, b in zip(on, off, strict=True))
        median_on, median_off = statistics.median(on), statistics.median(off)
        print(f"{name:15} {median_on:8.1f} ms {median_off:9.1f} ms  {ratio:.2f}x")


if __name__ == "__main__":
    main()
