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
- ``floor``: ``threading.Lock`` + ``deque.append`` of a prebuilt tuple: what any
  thread-safe record of a request cannot go below in CPython.

- ``tracked (before)``, with ``--before DIR``: ``tracked`` on the ``ferrox_stats``
  package of another checkout (say main's, while measuring a branch), loaded beside
  this one under another name, so before and after run interleaved in one process.

Method: each variant runs ``--requests`` requests per round; rounds interleave the
variants (rotating their order) and the median round is reported, with gc disabled
while timing. ``--clock cpu`` times the thread's CPU time instead of the wall clock:
on a machine shared with other work, time spent preempted is not counted.

Run: ``cd /work/main && PYTHONPATH=. python bench/hot_path.py [--requests N --rounds R]
[--clock cpu] [--before ../other-checkout]``
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import platform
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

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


def tracked(recorder_class: Any = Recorder) -> Variant:
    recorder = recorder_class(replica="bench")

    def run(n: int) -> int:
        # Locals: the loop should measure the library, not global lookups.
        track = recorder.track
        clock = clock_ns
        start = clock()
        for _ in range(n):
            with track(route=ROUTE, model=MODEL, stream=True) as t:
                t.first_token()
                t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
        return clock() - start

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


def measure(variants: dict[str, Variant], requests: int, rounds: int) -> dict[str, float]:
    """Median ns per request of each variant over interleaved rounds."""
    names = list(variants)
    for run in variants.values():
        # Warm up: first-use allocations, label children, the ring's first wrap.
        run(min(requests, 10_000))
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
    return {name: statistics.median(values) for name, values in per_request.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--requests", type=int, default=100_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a round is timed with"
    )
    parser.add_argument(
        "--before", metavar="DIR", help="also time `tracked` on DIR's ferrox_stats (a checkout)"
    )
    args = parser.parse_args()
    global clock_ns
    clock_ns = CLOCKS[args.clock]

    variants = {
        "tracked": tracked(),
        **({"tracked (before)": tracked(load_before(args.before))} if args.before else {}),
        "prom unlabelled": prom_unlabelled(),
        "prom labelled": prom_labelled(),
        "floor": floor(),
    }
    print(
        f"python {platform.python_version()}, "
        f"prometheus_client {importlib.metadata.version('prometheus-client')}, "
        f"{args.rounds} rounds x {args.requests} requests, median round, {args.clock} clock"
    )
    ns = measure(variants, args.requests, args.rounds)
    for name, value in ns.items():
        print(f"{name:<16} {value:8.0f} ns/request")
    others = ["tracked (before)"] if args.before else []
    for name in [*others, "prom unlabelled", "prom labelled", "floor"]:
        print(f"tracked / {name:<16} {ns['tracked'] / ns[name]:6.2f}x")


if __name__ == "__main__":
    main()
