"""A packing ring under concurrent pushes and polls: every row read is the row pushed
with that seq (packing runs outside the lock, beside pushes and polls)."""

from __future__ import annotations

import marshal
import threading

import pytest

from ferrox_stats.core.ring import Packing, RequestRing

PUSHERS = 6
PER_PUSHER = 3_000
CAPACITY = 4_096


# Threads switch far more often than the default, so a missing lock shows.
pytestmark = pytest.mark.usefixtures("frequent_thread_switches")


def test_rows_read_while_others_push_and_pack_are_the_rows_pushed() -> None:
    packing: Packing[tuple[int, int]] = Packing(marshal.dumps, marshal.loads, hot=64, block=16)
    ring: RequestRing[tuple[int, int]] = RequestRing(CAPACITY, packing=packing)
    pushed: dict[int, tuple[int, int]] = {}
    read: list[tuple[int, tuple[int, int]]] = []
    done = threading.Event()
    barrier = threading.Barrier(PUSHERS + 1)

    def push(worker: int) -> None:
        barrier.wait()
        n = 0
        while n < PER_PUSHER:
            if n % 7 == 0:  # some in batches, as a batching caller would
                rows = [(worker, n + i) for i in range(5)]
                first = ring.push_many(rows)
                pushed.update(zip(range(first, first + 5), rows, strict=True))
                n += 5
            else:
                pushed[ring.push((worker, n))] = (worker, n)
                n += 1

    def poll() -> None:
        barrier.wait()
        cursor = 0
        while not done.is_set() or cursor < ring.recorded_total:
            page = ring.since(cursor, 37)
            read.extend(page.rows)
            cursor = page.next_cursor

    threads = [threading.Thread(target=push, args=(w,)) for w in range(PUSHERS)]
    poller = threading.Thread(target=poll)
    for thread in [*threads, poller]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    poller.join()

    total = ring.recorded_total
    assert sorted(pushed) == list(range(total))
    assert ring.packed_blocks > 0
    assert all(row == pushed[seq] for seq, row in read)
    assert [seq for seq, _ in read] == sorted({seq for seq, _ in read})
    assert ring.rows() == [pushed[seq] for seq in range(total - CAPACITY, total)]
