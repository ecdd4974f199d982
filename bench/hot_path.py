"""Cost of one tracked request on the hot path, beside prometheus_client and a floor.

Measured, per request, in ns:

- ``tracked``: ``Recorder.track(...)`` entered, ``first_token()``, ``finish(...)``
  with token totals, exited: begin -> in flight, first token, finish -> Record into
  the ring, completion counter, token totals and both rate windows.
- ``prom unlabelled``: the prometheus_client equivalent -- the same three clock reads,
  one ``Counter.inc`` and three ``Histogram.observe`` (TTFT, duration, decode) on a
  private ``CollectorRegistry``.
- ``prom labelled``: the same with the dimensions our record keeps: the counter
  labelled model/route/status, the histograms model/route, ``.labels(...)`` called
  per request as serving code does.
- ``prom pre-bound``: the fair anchor (issue 13): the same labelled families with
  their children looked up once before the loop (``c = counter.labels(model, route,
  status)``), so a request pays one ``c.inc()`` and three bound ``.observe()`` plus the
  same three clock reads. The headline ratio is ``tracked / prom pre-bound``.
- ``floor``: ``threading.Lock`` + ``deque.append`` of a prebuilt tuple: what any
  thread-safe record of a request cannot go below in CPython.

- ``tracked (before)``, with ``--before DIR``: ``tracked`` on the ``ferrox_stats``
  package of another checkout (say main's, while measuring a branch), loaded beside
  this one under another name, so before and after run interleaved in one process.
- ``tracked, folds apart``: ``tracked`` with its folds taken out of the requesting
  thread's time: every 1 000 requests the loop stops its clock and folds the recorder
  and the breakdown itself (the heartbeat's work, on its thread in production), timing
  that fold apart. What a request pays whenever a reader keeps up with the requests;
  ``tracked`` is the tight loop's saturation, where the reader and the requests share
  one GIL and the requests fold whatever the reader could not.
- ``tracked, no reader``: ``tracked`` with nobody folding the per-label breakdown, so
  the requests fold it themselves every ``Breakdown.fold_every`` records: what a
  process without a heartbeat (``HEARTBEAT_S = None``, no archive sink) pays. (With a
  reader, a request folds only past ``Breakdown.max_queued``: the reader fell behind.)

The reader: while a round runs, a thread wakes every ``--fold-ms`` ms in every variant
(but ``no reader``), as the heartbeat does every ``HEARTBEAT_S``; in ``tracked`` it folds
the breakdown's queued records into its cells (what the heartbeat's state document
does first), so the fold is paid where production pays it: on that thread, not the
request's. The request path's figures are the requesting thread's time; the fold's
CPU on the reader thread is reported apart, per record, with the mean batch (a 2 s
heartbeat at ``batch / 2`` requests/s folds batches that size; the GIL's switch
interval is CPython's 5 ms, as in production, so the reader waits up to that for the
GIL and a fold shorter than that is not interrupted). Then ``fold alone``
times the fold of one batch directly, of the bench's records (microsecond durations:
few buckets), of records with spread values (log-normal times, 2-2000 tokens: many
buckets, as in production) in one cell and over 45 cells, and what the heartbeat
thread pays at 1000 requests/s.

Method: each variant runs ``--requests`` requests per round; rounds interleave the
variants (rotating their order) and the median round is reported (and the least, the
least disturbed by other work on the machine), with gc disabled while timing. Ratios
are medians of per-round ratios (each round's two figures measured moments apart).

``--threads T`` (default 4; 0 skips it) then times ``tracked`` and ``prom pre-bound``
with ``T`` threads sharing ONE recorder (one set of prometheus children), each doing
``requests / T``, against one thread doing them all, and reports per-request cost of T
threads / per-request cost of 1 thread (a median of per-round ratios): what locks that
a thread may hold while it loses the GIL cost under concurrency. With ``--clock cpu``
the cost is the worker threads' summed CPU time, else the wall time of the run.

``--quick``: 100 000 requests x 3 rounds (rounds as long as the full mode's: in rounds
of 20 000, 40 ms each, the reader never fell behind the tight loop, so the request
thread never folded and ``tracked`` read 0.75x where the full mode read 1.20x), the
fold-alone section on fewer records: under 15 s on an idle 2-core machine.
``--clock cpu`` times the thread's CPU time instead of the wall clock: on a machine
shared with other work, time spent preempted (or, here, waiting for the GIL while the
reader folds) is not counted. Use it: the wall clock of the requesting thread
includes the reader's folds whenever they take the GIL.

Run: ``cd /work/main && PYTHONPATH=. python bench/hot_path.py [--quick] [--requests N
--rounds R] [--clock cpu] [--threads T] [--before ../other-checkout] [--fold-ms MS]``
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import os
import platform
import random
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from ferrox_stats.core.breakdown import Breakdown
from ferrox_stats.core.requests import Record
from ferrox_stats.live import Recorder

ROUTE = "/v1/chat/completions"
MODEL = "llama-3.1-8b"

DESCRIPTION = "One tracked request beside prometheus_client and a lock+deque floor."

# A variant runs n requests and returns the elapsed ns.
Variant = Callable[[int], int]

# What variants time with: the wall clock, or (``--clock cpu``) this thread's CPU time.
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
clock_ns = CLOCKS["wall"]


def load_before(checkout: str) -> Any:
    """``Recorder`` from ``<checkout>/ferrox_stats``, imported as package
    ``ferrox_stats_before`` (its modules import each other relatively, so they stay
    within it); the process's own ``ferrox_stats`` is untouched."""
    root = Path(checkout, "ferrox_stats")
    name = "ferrox_stats_before"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{name}.live").Recorder


class Reader:
    """A thread that, while a round runs, wakes every ``interval_s`` like the heartbeat
    and folds the recorder's queued reports (``Recorder.fold``, where it has one) and
    ``breakdown`` (if any), adding its thread CPU and the records it folded."""

    def __init__(
        self,
        breakdown: Breakdown | None,
        interval_s: float,
        fold: Callable[[], None] | None = None,
    ) -> None:
        self.breakdown = breakdown
        self.fold = fold
        self.interval_s = interval_s
        self.cpu_ns = 0
        self.records = 0
        self.folds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Reader:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        breakdown = self.breakdown
        fold = self.fold
        while not self._stop.wait(self.interval_s):
            if breakdown is None:
                continue
            start = time.thread_time_ns()
            if fold is not None:
                fold()  # what every read of the recorder does first
            # What every reader of the cells (to_wire, cells) does first.
            with breakdown._lock:
                queued = len(breakdown._queue)
                breakdown._fold()
            self.cpu_ns += time.thread_time_ns() - start
            self.records += queued
            self.folds += 1


def tracked(recorder_class: Any = Recorder, reader_s: float | None = None) -> Variant:
    """``reader_s``: a ``Reader`` every that many seconds during a round (None: none)."""
    recorder = recorder_class(replica="bench")
    # The objects themselves: on a recorder that queues its reports, the properties
    # fold them first (a reader's work, not the request's).
    breakdown = getattr(recorder, "_breakdown", None)
    if breakdown is None:
        breakdown = getattr(recorder, "breakdown", None)  # none before issue 10
    fold = getattr(recorder, "fold", None)
    reader = None if reader_s is None else Reader(breakdown, reader_s, fold)

    def requests(n: int) -> int:
        # Locals: the loop should measure the library, not global lookups.
        track = recorder.track
        clock = clock_ns
        start = clock()
        for _ in range(n):
            with track(route=ROUTE, model=MODEL, stream=True) as t:
                t.first_token()
                t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
        return clock() - start

    def run(n: int) -> int:
        if reader is None:
            return requests(n)
        with reader:
            return requests(n)

    def reset() -> None:
        # After the warm-up (before the first fold, requests fold every fold_every).
        if reader is not None:
            reader.cpu_ns = reader.records = reader.folds = 0
        if breakdown is not None:
            breakdown.request_folds = 0
        if fold is not None:
            recorder.request_folds = 0

    run.recorder = recorder  # type: ignore[attr-defined]
    run.requests = requests  # type: ignore[attr-defined]
    run.reader = reader  # type: ignore[attr-defined]
    run.breakdown = breakdown  # type: ignore[attr-defined]
    run.reset = reset  # type: ignore[attr-defined]
    return run


def folds_apart(chunk: int = 1000) -> Variant:
    """``tracked`` with its folds out of the requesting thread's time: every ``chunk``
    requests (below ``fold_every``, so a request never folds) the loop folds the
    recorder and the breakdown with its clock stopped; their thread CPU and the records
    folded are kept on the variant (``fold_ns``, ``records``)."""
    loop = tracked()
    recorder = loop.recorder  # type: ignore[attr-defined]
    breakdown = loop.breakdown  # type: ignore[attr-defined]
    folded = {"fold_ns": 0, "records": 0}

    def run(n: int) -> int:
        spent = 0
        done = 0
        while done < n:
            size = min(chunk, n - done)
            spent += loop.requests(size)  # type: ignore[attr-defined]
            start = time.thread_time_ns()
            recorder.fold()
            with breakdown._lock:
                breakdown._fold()
            folded["fold_ns"] += time.thread_time_ns() - start
            folded["records"] += size
            done += size
        return spent

    def reset() -> None:
        folded["fold_ns"] = folded["records"] = 0

    run.folded = folded  # type: ignore[attr-defined]
    run.recorder = recorder  # type: ignore[attr-defined]
    run.reset = reset  # type: ignore[attr-defined]
    return run


def prom_unlabelled() -> Variant:
    registry = CollectorRegistry()
    requests = Counter("requests", "Finished requests.", registry=registry)
    ttft = Histogram("ttft_seconds", "Arrival to first token.", registry=registry)
    duration = Histogram("duration_seconds", "Arrival to end.", registry=registry)
    decode = Histogram("decode_seconds", "First token to last.", registry=registry)

    def run(n: int) -> int:
        monotonic = time.monotonic
        clock = clock_ns
        start = clock()
        for _ in range(n):
            # The same clock reads the tracker makes: begin, first token, end.
            arrived = monotonic()
            first = monotonic()
            end = monotonic()
            requests.inc()
            ttft.observe(first - arrived)
            duration.observe(end - arrived)
            decode.observe(end - first)
        return clock() - start

    return run


def prom_labelled() -> Variant:
    registry = CollectorRegistry()
    requests = Counter(
        "requests", "Finished requests.", ["model", "route", "status"], registry=registry
    )
    labels = ["model", "route"]
    ttft = Histogram("ttft_seconds", "Arrival to first token.", labels, registry=registry)
    duration = Histogram("duration_seconds", "Arrival to end.", labels, registry=registry)
    decode = Histogram("decode_seconds", "First token to last.", labels, registry=registry)

    def run(n: int) -> int:
        monotonic = time.monotonic
        clock = clock_ns
        start = clock()
        for _ in range(n):
            arrived = monotonic()
            first = monotonic()
            end = monotonic()
            # Positional labels: the cheaper of the two spellings, so the baseline is
            # not made slow on purpose. The status arrives as an int, as in real code.
            requests.labels(MODEL, ROUTE, 200).inc()
            ttft.labels(MODEL, ROUTE).observe(first - arrived)
            duration.labels(MODEL, ROUTE).observe(end - arrived)
            decode.labels(MODEL, ROUTE).observe(end - first)
        return clock() - start

    return run


def prom_prebound() -> Variant:
    """``prom labelled`` with the children looked up once: the strongest fair
    configuration of prometheus_client for a known label set."""
    registry = CollectorRegistry()
    requests = Counter(
        "requests", "Finished requests.", ["model", "route", "status"], registry=registry
    )
    labels = ["model", "route"]
    ttft = Histogram("ttft_seconds", "Arrival to first token.", labels, registry=registry)
    duration = Histogram("duration_seconds", "Arrival to end.", labels, registry=registry)
    decode = Histogram("decode_seconds", "First token to last.", labels, registry=registry)
    requests_child = requests.labels(MODEL, ROUTE, 200)
    ttft_child = ttft.labels(MODEL, ROUTE)
    duration_child = duration.labels(MODEL, ROUTE)
    decode_child = decode.labels(MODEL, ROUTE)

    def run(n: int) -> int:
        monotonic = time.monotonic
        inc = requests_child.inc
        observe_ttft = ttft_child.observe
        observe_duration = duration_child.observe
        observe_decode = decode_child.observe
        clock = clock_ns
        start = clock()
        for _ in range(n):
            arrived = monotonic()
            first = monotonic()
            end = monotonic()
            inc()
            observe_ttft(first - arrived)
            observe_duration(end - arrived)
            observe_decode(end - first)
        return clock() - start

    return run


def threaded(variant: Variant, threads: int) -> Variant:
    """``variant`` run by ``threads`` threads at once, ``n / threads`` requests each, on
    the same objects; the elapsed wall time of the whole run or (``--clock cpu``) the
    threads' summed CPU time."""

    def run(n: int) -> int:
        share = n // threads
        spent = [0] * threads
        barrier = threading.Barrier(threads + 1)

        def work(i: int) -> None:
            barrier.wait()
            spent[i] = variant(share)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        start = time.perf_counter_ns()
        barrier.wait()
        for worker in workers:
            worker.join()
        wall = time.perf_counter_ns() - start
        # Scaled to n requests, so per-request figures compare with one thread's.
        total = sum(spent) if clock_ns is CLOCKS["cpu"] else wall
        return total * n // (share * threads)

    return run


def floor() -> Variant:
    lock = threading.Lock()
    rows: deque[tuple[object, ...]] = deque(maxlen=1024)
    row = (None, 0, ROUTE, MODEL, 200, True, 512, 128)

    def run(n: int) -> int:
        append = rows.append
        clock = clock_ns
        start = clock()
        for _ in range(n):
            with lock:
                append(row)
        return clock() - start

    return run


def with_reader(variant: Variant, interval_s: float) -> Variant:
    """``variant`` with an idle ``Reader`` waking as often: the same thread switches."""
    reader = Reader(None, interval_s)

    def run(n: int) -> int:
        with reader:
            return variant(n)

    return run


def measure(
    variants: dict[str, Variant], requests: int, rounds: int
) -> tuple[dict[str, float], dict[str, float], dict[str, list[float]]]:
    """Median and least ns per request of each variant over interleaved rounds (other
    work on the machine only adds time: the least round is the least disturbed), and
    every round's figure (for ratios as medians of per-round ratios)."""
    names = list(variants)
    for run in variants.values():
        # Warm up: first-use allocations, label children, the ring's first wrap.
        run(min(requests, 10_000))
        if (reset := getattr(run, "reset", None)) is not None:
            reset()  # counts from here are the timed rounds'
    per_request: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        # Rotate the order so no variant always runs right after the same neighbour.
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            gc.disable()
            try:
                elapsed = variants[name](requests)
            finally:
                gc.enable()
            per_request[name].append(elapsed / requests)
    return (
        {name: statistics.median(values) for name, values in per_request.items()},
        {name: min(values) for name, values in per_request.items()},
        per_request,
    )


def ratio(rounds: dict[str, list[float]], name: str, anchor: str) -> float:
    """The median over rounds of ``name``'s figure / ``anchor``'s in the same round."""
    return statistics.median(a / b for a, b in zip(rounds[name], rounds[anchor], strict=True))


def bench_records(n: int) -> list[Record]:
    """``n`` records as the ``tracked`` loop records them (microsecond times)."""
    recorder = Recorder(replica="bench", capacity=n)
    for _ in range(n):
        with recorder.track(route=ROUTE, model=MODEL, stream=True) as t:
            t.first_token()
            t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
    return [row for _, row in recorder.stats.ring.since(0, n).rows]


def spread_records(n: int) -> list[Record]:
    """``n`` records whose values spread over many buckets, as in production: log-normal
    TTFT (median 150 ms) and decode time (median 3 s), 1-8000 prompt tokens and 2-2000
    completion tokens; seeded, so every run folds the same values."""
    rng = random.Random(10)
    result = []
    for i in range(n):
        ttft = rng.lognormvariate(5, 1)
        decode = rng.lognormvariate(8, 1)
        result.append(
            Record(
                request_id=f"req-{i}",
                at_ms=1_800_000_000_000 + i,
                route=ROUTE,
                model=MODEL,
                status=200,
                stream=True,
                prompt_tokens=rng.randint(1, 8000),
                completion_tokens=rng.randint(2, 2000),
                ttft_ms=ttft,
                duration_ms=ttft + decode,
                decode_ms=decode,
                finish_reason="stop",
                replica="bench",
            )
        )
    return result


def mixed_records(n: int) -> list[Record]:
    """``spread_records`` over 5 models x 3 routes, 3 % errors and 3 % aborts: 45 cells,
    the label set of issue 10's heartbeat goal, so each cell's batch holds a few dozen
    values of a 2048-record fold (most in buckets of their own)."""
    rng = random.Random(11)
    models = [f"model-{i}" for i in range(5)]
    routes = [ROUTE, "/v1/completions", "/v1/embeddings"]
    return [
        record._replace(
            model=rng.choice(models),
            route=rng.choice(routes),
            error="Timeout" if rng.random() < 0.03 else None,
            aborted="client_disconnect" if rng.random() < 0.03 else None,
        )
        for record in spread_records(n)
    ]


def fold_alone(records: list[Record], batch: int, rounds: int) -> float:
    """Median thread-CPU ns per record of folding ``records`` in batches of ``batch``."""
    per_record = []
    for _ in range(rounds):
        breakdown = Breakdown(fold_every=len(records) + 1)
        gc.collect()
        gc.disable()
        elapsed = 0
        try:
            for i in range(0, len(records), batch):
                breakdown._queue.extend(records[i : i + batch])
                start = time.thread_time_ns()
                with breakdown._lock:
                    breakdown._fold()
                elapsed += time.thread_time_ns() - start
        finally:
            gc.enable()
        per_record.append(elapsed / len(records))
    return statistics.median(per_record)


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--requests", type=int, default=None, help="requests per round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--quick", action="store_true", help="100 000 requests x 3 rounds, a shorter fold-alone"
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a round is timed with"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=4,
        help="threads sharing one recorder in the concurrency section (0: skip it)",
    )
    parser.add_argument("--threads-only", action="store_true", help="run only the threads section")
    parser.add_argument(
        "--before", metavar="DIR", help="also time `tracked` on DIR's ferrox_stats (a checkout)"
    )
    parser.add_argument(
        "--fold-ms",
        type=float,
        default=10.0,
        help="ms between the reader thread's wake-ups (its folds, in tracked)",
    )
    args = parser.parse_args()
    requests = args.requests or 100_000
    rounds = args.rounds or (3 if args.quick else 7)
    global clock_ns
    clock_ns = CLOCKS[args.clock]
    reader_s = args.fold_ms / 1000

    main_tracked = tracked(reader_s=reader_s)
    before = load_before(args.before) if args.before else None
    variants = {
        "tracked": main_tracked,
        **({"tracked (before)": tracked(before, reader_s=reader_s)} if before else {}),
        "tracked, folds apart": (apart := folds_apart()),
        "tracked, no reader": (lonely := tracked()),
        "prom pre-bound": with_reader(prom_prebound(), reader_s),
        "prom unlabelled": with_reader(prom_unlabelled(), reader_s),
        "prom labelled": with_reader(prom_labelled(), reader_s),
        "floor": with_reader(floor(), reader_s),
    }
    commit = os.popen("git rev-parse --short HEAD 2>/dev/null").read().strip() or "?"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, commit {commit}, "
        f"python {platform.python_version()}, "
        f"prometheus_client {importlib.metadata.version('prometheus-client')}, "
        f"{rounds} rounds x {requests} requests, median round, {args.clock} clock, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if args.threads_only:
        threads_section(max(args.threads, 2), requests, rounds, reader_s, before)
        return
    print(
        f"request path (the requesting thread's time; a reader thread wakes every "
        f"{args.fold_ms:g} ms, in tracked it folds the recorder and the breakdown):"
    )
    ns, least, per_round = measure(variants, requests, rounds)
    for name, value in ns.items():
        print(f"  {name:<22} {value:8.0f} ns/request (least round {least[name]:.0f})")
    print(
        f"  HEADLINE tracked / prom pre-bound {ratio(per_round, 'tracked', 'prom pre-bound'):6.2f}x"
        " (median of per-round ratios; goal <= 0.7x)"
    )
    fold_apart = apart.folded["fold_ns"] / max(apart.folded["records"], 1)  # type: ignore[attr-defined]
    print(
        f"  request path alone: tracked, folds apart / prom pre-bound "
        f"{ratio(per_round, 'tracked, folds apart', 'prom pre-bound'):6.2f}x (what a request "
        f"pays while a reader keeps up); with its fold ({fold_apart:.0f} ns/record, thread "
        f"cpu, cache-warm batches of 1000) "
        f"{(ns['tracked, folds apart'] + fold_apart) / ns['prom pre-bound']:.2f}x"
    )
    if args.before:
        for name in ["tracked", "tracked, no reader"]:
            print(f"  {name} / tracked (before) {ratio(per_round, name, 'tracked (before)'):6.2f}x")
    for name in ["tracked, no reader"]:
        print(f"  {name} / prom pre-bound {ratio(per_round, name, 'prom pre-bound'):6.2f}x")
    for name in ["prom unlabelled", "prom labelled", "floor"]:
        print(f"  tracked / {name:<22} {ratio(per_round, 'tracked', name):6.2f}x")

    reader = main_tracked.reader  # type: ignore[attr-defined]
    breakdown = main_tracked.breakdown  # type: ignore[attr-defined]
    recorder = main_tracked.recorder  # type: ignore[attr-defined]
    batch = reader.records / max(reader.folds, 1)
    print(
        f"fold on the reader thread (tracked): "
        f"{reader.cpu_ns / max(reader.records, 1):.0f} ns/record, {reader.folds} folds "
        f"of {batch:.0f} records on average (a 2 s heartbeat at {batch / 2:.0f} "
        f"requests/s); folds on the request thread: recorder "
        f"{getattr(recorder, 'request_folds', '-')}, breakdown {breakdown.request_folds} "
        f"(they start past max_queued = {breakdown.max_queued})"
    )
    # What tracked costs wherever it is paid: prometheus_client does all its work on
    # the request thread; the tracker leaves its folds to the reader (the heartbeat).
    all_of_it = ns["tracked"] + reader.cpu_ns / (requests * rounds)
    print(
        f"tracked, all its CPU (request thread + the reader's folds): {all_of_it:.0f} "
        f"ns/request = {all_of_it / ns['prom pre-bound']:.2f}x prom pre-bound"
    )
    lonely_recorder = lonely.recorder  # type: ignore[attr-defined]
    print(
        f"fold on the request thread (tracked, no reader): recorder "
        f"{getattr(lonely_recorder, 'request_folds', '-')} folds, breakdown "
        f"{lonely.breakdown.request_folds} folds, "  # type: ignore[attr-defined]
        f"one every fold_every = {breakdown.fold_every} records"
    )

    if args.threads > 1:
        threads_section(args.threads, requests, rounds, reader_s, before)

    size = 4096 if args.quick else 16384
    alone_rounds = 3 if args.quick else 5
    print(f"fold alone, per record, thread cpu, median of {alone_rounds}:")
    alone = {
        "the bench's records": bench_records(size),
        "spread records": spread_records(size),
        "spread, 45 cells": mixed_records(size),
    }
    per_record = {}
    sizes = (1000, 2048) if args.quick else (1000, 2048, 16384)
    for what, records in alone.items():
        # 1000: the heartbeat at 500 requests/s (HEARTBEAT_S = 2 s), bench/fleet.py's tick.
        figures = {n: fold_alone(records, n, alone_rounds) for n in sizes}
        per_record[what] = figures[2048]
        print(
            f"  {what:<20} "
            + ", ".join(f"batch {n}: {value:5.0f} ns" for n, value in figures.items())
        )
    for what in ("spread records", "spread, 45 cells"):
        cost = per_record[what]
        print(
            f"  so at 1000 requests/s ({what}) a worker's heartbeat thread (batches of "
            f"2048) pays about {cost / 1e3:.2f} ms of CPU per second ({cost / 1e4:.2f} % "
            f"of a core)"
        )


def threads_section(
    threads: int, requests: int, rounds: int, reader_s: float, before: Any = None
) -> None:
    """Per-request cost of ``threads`` threads on one recorder (one set of prometheus
    children) over one thread's, tracked and prom pre-bound (and ``before``'s
    ``Recorder``, if given), in interleaved rounds."""
    one_tracked = tracked(reader_s=reader_s)
    shared_prom = prom_prebound()
    many_tracked = tracked(reader_s=reader_s)
    variants: dict[str, Variant] = {}
    if before is not None:
        many_before = tracked(before, reader_s=reader_s)
        variants["tracked (before), 1 thread"] = tracked(before, reader_s=reader_s)
        variants[f"tracked (before), {threads} threads"] = with_fold(
            threaded(many_before.requests, threads),  # type: ignore[attr-defined]
            many_before,
        )
    variants |= {
        "tracked, 1 thread": one_tracked,
        f"tracked, {threads} threads": with_fold(
            threaded(many_tracked.requests, threads),  # type: ignore[attr-defined]
            many_tracked,
        ),
        "prom pre-bound, 1 thread": with_reader(shared_prom, reader_s),
        f"prom pre-bound, {threads} threads": with_reader(threaded(shared_prom, threads), reader_s),
    }
    ns, _, per_round = measure(variants, requests, rounds)
    print(
        f"{threads} threads on one recorder vs 1 thread (per-request cost; "
        f"{'summed thread cpu' if clock_ns is CLOCKS['cpu'] else 'wall time of the run'}):"
    )
    for name, value in ns.items():
        print(f"  {name:<28} {value:8.0f} ns/request")
    for what in ("tracked", "prom pre-bound", *(["tracked (before)"] if before else [])):
        figure = ratio(per_round, f"{what}, {threads} threads", f"{what}, 1 thread")
        print(f"  {what}: {threads} threads / 1 thread {figure:6.2f}x (goal for tracked <= 1.2x)")


def with_fold(run: Variant, source: Variant) -> Variant:
    """``run`` (threads sharing ``source``'s recorder) with ``source``'s reader folding."""
    reader = source.reader  # type: ignore[attr-defined]

    def timed(n: int) -> int:
        with reader:
            return run(n)

    return timed


if __name__ == "__main__":
    main()
