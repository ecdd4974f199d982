"""The core counts exactly under concurrent callers (SPEC §1.3: thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ferrox_stats.core.ring import RequestRing
from ferrox_stats.core.serving import ServingStats

THREADS = 8
PER_THREAD = 10_000


# Threads switch far more often than the default, so a missing lock shows.
pytestmark = pytest.mark.usefixtures("frequent_thread_switches")


def run_together(work: Callable[[int], None]) -> None:
    barrier = threading.Barrier(THREADS)

    def start(worker: int) -> None:
        barrier.wait()
        work(worker)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_pushes_get_unique_seqs() -> None:
    ring: RequestRing[int] = RequestRing(1024)
    seqs: list[list[int]] = [[] for _ in range(THREADS)]

    def push(worker: int) -> None:
        seqs[worker].extend(ring.push(worker) for _ in range(PER_THREAD))

    run_together(push)
    every = [seq for worker in seqs for seq in worker]
    assert ring.recorded_total == THREADS * PER_THREAD
    assert sorted(every) == list(range(THREADS * PER_THREAD))


def test_concurrent_begin_finish_counts_every_completion() -> None:
    stats = ServingStats()

    def serve(worker: int) -> None:
        for n in range(PER_THREAD):
            stats.begin((worker, n))
            stats.finish((worker, n))

    run_together(serve)
    snap = stats.snapshot(0.0)
    assert (snap.completed, snap.active) == (THREADS * PER_THREAD, 0)


def test_concurrent_token_deltas_all_count() -> None:
    stats = ServingStats()

    def observe(worker: int) -> None:
        for n in range(PER_THREAD):
            stats.observe_tokens(float(n), prompt=1, completion=2)

    run_together(observe)
    snap = stats.snapshot(float(PER_THREAD))
    assert snap.prompt_tokens_total == THREADS * PER_THREAD
    assert snap.completion_tokens_total == 2 * THREADS * PER_THREAD
