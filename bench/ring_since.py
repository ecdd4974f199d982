"""Cost of pushing to and polling the ring: main's ring vs this tree's, packed or not.

Three storages, each filled with realistic records (``ring_memory.realistic_records``,
a pool pushed in turn) to capacity and wrapped a quarter as far again:

- ``main``: main's ``RequestRing`` (``ferrox_stats/core/ring.py`` at 9e02609, read with
  ``git show``), records kept as objects: the baseline.
- ``objects``: this tree's ring without packing (what ``Stats`` uses below 2048 rows).
- ``packed``: this tree's ``Stats(capacity).ring``: the newest 1024 records as objects,
  older ones packed 256 to a block.

Measured, in ns per call, each divided by ``main``'s in the same round:

- ``push``: one push in steady state (a wrapped ring), over a multiple of 256 pushes so
  the packing of one block in 256 pushes is in the mean.
- ``since tail``: ``since(recorded_total - 50, 100)``, a poller that keeps up.
- ``since cold``: ``since(cursor, 100)`` with the cursor walking forward 100 rows a call
  through the oldest half of the ring: a poller catching up, which on ``packed``
  unpacks each block it reaches once (about 1 block in 2.5 polls).
- ``entries tail``/``entries cold``: the same polls through ``Stats.since`` plus
  ``page_entries``, what ``/v1/requests`` pays.
- ``summary``: ``Stats.summary()`` (percentiles over every retained record, what
  ``admin/stats`` adds to a poll), which on ``packed`` unpacks every packed block.

Ratios are medians of per-round ratios; rounds interleave the storages in rotating
order; gc disabled while timing; CPU time of this thread (``--clock wall`` for wall).

Run: ``PYTHONPATH=. python bench/ring_since.py [--quick]`` (``--quick``: capacity
100 000, fewer rounds, under a minute; default capacity 1 000 000).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from ring_memory import header, realistic_records

from ferrox_stats.core import Record, RequestRing, Stats, page_entries
from ferrox_stats.core.requests import MAX_PAGE

MAIN = "9e02609"
LIMIT = 100
STORAGES = ("main", "objects", "packed")
OPERATIONS = ("push", "since tail", "since cold", "entries tail", "entries cold", "summary")
POOL = list(realistic_records(4096))


def main_ring_class() -> Any:
    """Main's RequestRing, from git (the baseline must be main's code, not a copy)."""
    source = subprocess.run(
        ["git", "show", f"{MAIN}:ferrox_stats/core/ring.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("main_ring")
    sys.modules["main_ring"] = module  # dataclasses look their module up
    exec(compile(source, "main_ring.py", "exec"), module.__dict__)
    return module.RequestRing


class Storage:
    """One ring and a ``Stats`` over it, wrapped, with a cursor walking its oldest half."""

    def __init__(self, ring: Any, capacity: int) -> None:
        self.ring = ring
        self.stats = Stats(capacity)
        self.stats.ring = ring  # Stats.since and page_entries over this ring
        self.capacity = capacity
        pushes = capacity + capacity // 4
        for record in itertools.islice(itertools.cycle(POOL), pushes):
            ring.push(record)
        self.cold = self._oldest()
        self.next_record = itertools.cycle(POOL)

    def _oldest(self) -> int:
        return int(self.ring.recorded_total) - self.capacity

    def cold_cursor(self) -> int:
        """The next page of a poller catching up through the oldest half of the ring."""
        if self.cold < self._oldest() or self.cold + LIMIT > self._oldest() + self.capacity // 2:
            self.cold = self._oldest()
        cursor = self.cold
        self.cold += LIMIT
        return cursor


def timed(clock: Callable[[], int], run: Callable[[int], None], n: int) -> float:
    gc.collect()
    gc.disable()
    try:
        start = clock()
        run(n)
        return (clock() - start) / n
    finally:
        gc.enable()


def operation(storage: Storage, name: str) -> Callable[[int], None]:
    ring, stats = storage.ring, storage.stats

    def push(n: int) -> None:
        records = storage.next_record
        for _ in range(n):
            ring.push(next(records))

    def since_tail(n: int) -> None:
        for _ in range(n):
            ring.since(ring.recorded_total - 50, LIMIT)

    def since_cold(n: int) -> None:
        for _ in range(n):
            ring.since(storage.cold_cursor(), LIMIT)

    def entries_tail(n: int) -> None:
        for _ in range(n):
            page_entries(stats.since(ring.recorded_total - 50, LIMIT))

    def entries_cold(n: int) -> None:
        for _ in range(n):
            page_entries(stats.since(storage.cold_cursor(), LIMIT))

    def summary(n: int) -> None:
        for _ in range(n):
            stats.summary()

    return {
        "summary": summary,
        "push": push,
        "since tail": since_tail,
        "since cold": since_cold,
        "entries tail": entries_tail,
        "entries cold": entries_cold,
    }[name]


def main() -> None:
    parser = argparse.ArgumentParser(description="Ring push and poll cost, main vs packed.")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="capacity 100 000, 5 rounds")
    args = parser.parse_args()
    capacity, rounds = (100_000, 5) if args.quick else (args.capacity, args.rounds)
    clock = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    calls = {"push": 25_600, "since tail": 400, "since cold": 400}
    calls |= {"entries tail": 100, "entries cold": 100}
    if args.quick:
        calls = {name: n // 4 for name, n in calls.items()}
    calls["summary"] = 1

    print(header())
    main_ring = main_ring_class()
    storages = {
        "main": Storage(main_ring(capacity), capacity),
        "objects": Storage(RequestRing[Record](capacity), capacity),
        "packed": Storage(Stats(capacity).ring, capacity),
    }
    assert storages["packed"].ring.packed_blocks > 0 and MAX_PAGE >= LIMIT
    print(
        f"capacity {capacity}, limit {LIMIT}, {rounds} rounds, {args.clock} clock; calls per "
        "round: " + ", ".join(f"{name} {n}" for name, n in calls.items())
    )
    ns: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        order = STORAGES[r % 3 :] + STORAGES[: r % 3]
        for name in OPERATIONS:
            for storage in order:
                run = operation(storages[storage], name)
                ns.setdefault((name, storage), []).append(timed(clock, run, calls[name]))
    print(
        f"{'operation':<13} {'main':>12} {'objects':>12} {'packed':>12} "
        f"{'obj/main':>9} {'packed/main':>12}"
    )
    for name in OPERATIONS:
        medians = {s: statistics.median(ns[(name, s)]) for s in STORAGES}
        ratio = {
            s: statistics.median(
                a / b for a, b in zip(ns[(name, s)], ns[(name, "main")], strict=True)
            )
            for s in ("objects", "packed")
        }
        print(
            f"{name:<13} {medians['main']:>9.0f} ns {medians['objects']:>9.0f} ns "
            f"{medians['packed']:>9.0f} ns {ratio['objects']:>8.2f}x {ratio['packed']:>11.2f}x"
        )


if __name__ == "__main__":
    main()
