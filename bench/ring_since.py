"""Cost of polling the ring with ``since()`` at capacity 1k versus capacity 1M.

Each ring is filled to capacity and then wrapped half as far again, so it is in its
wrapped state (retained seqs ``[capacity/2, 3*capacity/2)``). Two polls, limit 100:

- ``mid``: a cursor in the middle of the retained range -> a full page of 100 rows.
- ``tail``: cursor = ``recorded_total - 50`` -> the 50 newest rows.

Measured, in ns per call:

- ``RequestRing.since()`` alone.
- ``Stats.since()`` + ``page_entries()``: the poll plus the conversion to wire dicts,
  which is what ``/v1/requests`` pays.

The baseline is capacity 1k; the ratio printed is 1M / 1k. Method: ``--calls`` calls
per variant per round, rounds interleave the variants (rotating their order), the
median round is reported, gc disabled while timing.

Run: ``cd /work/main && PYTHONPATH=. python bench/ring_since.py [--calls N --rounds R]``
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from collections.abc import Callable

from ferrox_stats.core import Record, RequestRing, Stats, page_entries

CAPACITIES = {"capacity 1k": 1_000, "capacity 1M": 1_000_000}
LIMIT = 100

DESCRIPTION = "RequestRing.since() and Stats.since()+page_entries() at capacity 1k vs 1M."

# A variant runs n calls and returns the elapsed ns.
Variant = Callable[[int], int]
# (what is polled, which poll, which capacity)
Key = tuple[str, str, str]

# A pool of distinct records, pushed in turn: rows are real Records (page_entries
# converts them), without holding a million of them in memory.
RECORDS = [
    Record(
        request_id=f"req-{i}",
        at_ms=1_764_000_000_000 + i,
        route="/v1/chat/completions",
        model="llama-3.1-8b",
        status=200,
        stream=True,
        prompt_tokens=512,
        completion_tokens=128,
        ttft_ms=80.0 + i % 50,
        duration_ms=2_000.0 + i % 500,
        decode_ms=1_900.0 + i % 500,
        finish_reason="stop",
        replica="bench",
    )
    for i in range(1024)
]


def fill(push: Callable[[Record], int], capacity: int) -> None:
    """Fill to capacity, then wrap half as far again."""
    pool = len(RECORDS)
    for i in range(capacity + capacity // 2):
        push(RECORDS[i % pool])


def cursors(recorded_total: int, capacity: int) -> dict[str, int]:
    oldest = recorded_total - capacity
    return {"mid": oldest + capacity // 2, "tail": recorded_total - 50}


def ring_poll(ring: RequestRing[Record], cursor: int) -> Variant:
    def run(n: int) -> int:
        since = ring.since
        clock = time.perf_counter_ns
        start = clock()
        for _ in range(n):
            since(cursor, LIMIT)
        return clock() - start

    return run


def stats_poll(stats: Stats, cursor: int) -> Variant:
    def run(n: int) -> int:
        since = stats.since
        clock = time.perf_counter_ns
        start = clock()
        for _ in range(n):
            page_entries(since(cursor, LIMIT))
        return clock() - start

    return run


def build() -> dict[Key, Variant]:
    """Every variant, keyed by (what, poll, capacity)."""
    variants: dict[Key, Variant] = {}
    for label, capacity in CAPACITIES.items():
        ring: RequestRing[Record] = RequestRing(capacity)
        fill(ring.push, capacity)
        stats = Stats(capacity)
        fill(stats.record, capacity)
        # The page must really be a wrapped, full one, or the comparison means nothing.
        assert ring.recorded_total == capacity + capacity // 2 and len(ring) == capacity
        for poll, cursor in cursors(ring.recorded_total, capacity).items():
            assert len(ring.since(cursor, LIMIT).rows) == min(LIMIT, ring.recorded_total - cursor)
            variants[("RequestRing.since", poll, label)] = ring_poll(ring, cursor)
            variants[("Stats.since+page_entries", poll, label)] = stats_poll(stats, cursor)
    return variants


def measure(variants: dict[Key, Variant], calls: int, rounds: int) -> dict[Key, float]:
    """Median ns per call of each variant over interleaved rounds."""
    keys = list(variants)
    for run in variants.values():
        run(min(calls, 1_000))
    per_call: dict[Key, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        order = keys[r % len(keys) :] + keys[: r % len(keys)]
        for key in order:
            gc.collect()
            gc.disable()
            try:
                elapsed = variants[key](calls)
            finally:
                gc.enable()
            per_call[key].append(elapsed / calls)
    return {key: statistics.median(values) for key, values in per_call.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--calls", type=int, default=5_000, help="calls per variant per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    variants = build()
    print(
        f"python {platform.python_version()}, limit {LIMIT}, "
        f"{args.rounds} rounds x {args.calls} calls, median round"
    )
    ns = measure(variants, args.calls, args.rounds)
    print(f"{'what':<26} {'poll':<5} {'capacity 1k':>12} {'capacity 1M':>12} {'1M/1k':>7}")
    for what in ("RequestRing.since", "Stats.since+page_entries"):
        for poll in ("mid", "tail"):
            small = ns[(what, poll, "capacity 1k")]
            large = ns[(what, poll, "capacity 1M")]
            print(f"{what:<26} {poll:<5} {small:>9.0f} ns {large:>9.0f} ns {large / small:>6.2f}x")


if __name__ == "__main__":
    main()
