"""A ``/metrics`` scrape at a realistic host: 4 workers, 20 models x 3 routes x 3 outcomes.

Each of ``--workers`` state documents (``ferrox_stats.state.process_state``'s shape, of
version 2: the breakdown in the octave form, ``latency`` dense) holds a breakdown fed
with ``--records`` finished records spread over 20 models, 3 routes and the 3
outcomes (most ok, some errors, a few aborted), with lognormal latencies and token
counts, so every cell's distributions fill a realistic number of buckets. One
document is the scraping worker's own (passed in, as the view does); the others are
files in a temporary ``METRICS_DIR``.

Timed, median of ``--rounds`` (gc off while timed), in milliseconds of wall time and of
this thread's CPU time (on a shared machine wall time includes waiting for a core):

- ``own state``: ``process_state`` of the scraping worker, a real recorder fed the same
  way (its breakdown exported in the octave form: after the first export a cell's
  octaves are kept up to date as records are folded, so this is what a scrape pays
  between two heartbeats, not the fold, which the heartbeat pays: ``bench/hot_path.py``);
- ``publish``: this worker's document written (its breakdown transposed to columns,
  JSON, atomic replace);
- ``host_totals``: every other file read, checked and merged with the own document.
  Nothing of a process file is kept from one scrape to the next (a real scrape, 15 to
  60 s after the last, finds every file rewritten by its worker's heartbeat), so the
  files need not be rewritten between rounds: each round reads, decodes and checks
  them all (only ``retired.json`` is kept by identity, and there is none here);
- ``exposition``: the text over the merged totals;
- ``scrape (view)``: ``GET /control/telemetry/metrics`` through Django's test client and
  the full middleware stack (the endpoint public, so no token lookup), which builds its
  own document (``process_state``), publishes, reads, merges and exposes; with the
  vLLM family too; and once more with the garbage collector on (every other line has
  it off while timed). ``reader`` is the view less the producer's two steps.

Goal (issue 10): a scrape <= 20 ms. Run from the repo root::

    PYTHONPATH=. python bench/metrics.py [--workers 4] [--records 20000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

from ferrox_stats import host_state, live, metrics, octave  # noqa: E402
from ferrox_stats.core.breakdown import Breakdown  # noqa: E402
from ferrox_stats.core.requests import Record  # noqa: E402
from ferrox_stats.state import LATENCIES, process_state  # noqa: E402

ALL_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
MODELS: list[str] = []
ROUTES: list[str] = []


def record(rng: random.Random, n: int) -> Record:
    outcome = rng.random()
    completion = max(1, int(rng.lognormvariate(5, 1)))
    ttft_ms = rng.lognormvariate(5, 0.8)
    decode_ms = completion * rng.lognormvariate(3, 0.4)
    return Record(
        request_id=f"bench-{n}",
        at_ms=1_767_225_600_000 + n,
        route=rng.choice(ROUTES),
        model=rng.choice(MODELS),
        status=200 if outcome > 0.05 else 500,
        stream=True,
        prompt_tokens=max(1, int(rng.lognormvariate(6, 1.2))),
        completion_tokens=completion,
        ttft_ms=ttft_ms,
        duration_ms=ttft_ms + decode_ms,
        decode_ms=decode_ms,
        error="EngineOverloaded" if outcome <= 0.05 else None,
        aborted="client_disconnect" if 0.05 < outcome <= 0.08 else None,
    )


def worker_doc(index: int, records: int) -> tuple[dict[str, Any], Breakdown]:
    rng = random.Random(index)
    breakdown = Breakdown()
    for n in range(records):
        breakdown.observe(record(rng, n))
    rate = {"amount": 1000.0, "span_s": 5.0, "samples": 100, "window_s": 5.0, "per_second": 200.0}
    cells, times = breakdown.export()
    latency = {name: times[field] for name, field in LATENCIES.items()}
    return {
        "version": octave.VERSION,
        "resolution": "octave",
        "instance": f"bench/{os.getpid()}/{index:012d}",
        "replica": "bench",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_ms": int(time.time() * 1000) - 60_000,
        "at_ms": int(time.time() * 1000),
        "uptime_s": 60.0,
        "stopped": False,
        "serving": {
            "active": 3,
            "completed": records,
            "aborts": {"client_disconnect": records // 30},
            "prompt_tokens_total": records * 400,
            "completion_tokens_total": records * 150,
        },
        "rates": {"decode": dict(rate), "prefill": dict(rate)},
        "breakdown": cells,
        "latency": latency,
        "gauges": {"pool_occupancy": {"value": 0.4, "age_s": 1.0}, "queue_depth": None},
        "recorded_total": records,
        "sink_errors": 0,
        "archive": {
            "accepted": records,
            "persisted": records - 10,
            "duplicates": 0,
            "pending": 10,
            "dropped": {},
            "dead_lettered": 0,
        },
    }, breakdown


def median_ms(fn: Callable[[], Any], rounds: int, *, gc_off: bool = True) -> tuple[float, float]:
    """Median wall and CPU (this thread's) milliseconds of ``fn`` (the garbage collector
    off while timed, unless ``gc_off`` is False)."""
    walls, cpus = [], []
    for _ in range(rounds):
        if gc_off:
            gc.disable()
        cpu = time.thread_time_ns()
        start = time.perf_counter_ns()
        fn()
        walls.append(time.perf_counter_ns() - start)
        cpus.append(time.thread_time_ns() - cpu)
        gc.enable()
    return statistics.median(walls) / 1e6, statistics.median(cpus) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--routes", type=int, default=3, choices=[1, 2, 3])
    args = parser.parse_args()
    MODELS[:] = [f"model-{i:02d}" for i in range(args.models)]
    ROUTES[:] = ALL_ROUTES[: args.routes]

    built = [worker_doc(i, args.records) for i in range(args.workers)]
    docs = [doc for doc, _ in built]
    # The scraping worker is a real recorder, its document the real process_state's.
    recorder = live.Recorder(replica="bench", max_models=args.models)
    rng = random.Random(0)
    for n in range(args.records):
        recorder.ingested(record(rng, n))
    own = process_state(recorder)
    where = tempfile.mkdtemp(prefix="ferrox-bench-metrics-")
    fs = {**settings.FERROX_STATS, "METRICS_DIR": where, "PUBLIC_ENDPOINTS": ["metrics"]}
    with override_settings(FERROX_STATS=fs):
        for doc in docs[1:]:
            host_state.publish(doc)
        cells = len(own["breakdown"])
        sizes = [os.path.getsize(os.path.join(where, n)) for n in os.listdir(where)]
        with open(os.path.join(where, os.listdir(where)[0]), "rb") as handle:
            written = json.load(handle)["breakdown"]
        form = "breakdown by column" if isinstance(written, dict) else "breakdown as cells"
        totals = host_state.host_totals(own)
        body = metrics.exposition(totals)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))

        def publish() -> None:
            own["at_ms"] += 1
            host_state.publish(own)

        results = {
            "own state": median_ms(lambda: process_state(recorder), args.rounds),
            "publish": median_ms(publish, args.rounds),
            "host_totals": median_ms(lambda: host_state.host_totals(own), args.rounds),
            "exposition": median_ms(lambda: metrics.exposition(totals), args.rounds),
        }

        live.get_recorder = lambda: recorder  # the view's process_state reads this one
        client = Client()
        url = "/control/telemetry/metrics"
        assert client.get(url).status_code == 200
        results["scrape (view)"] = median_ms(lambda: client.get(url), args.rounds)
        # What a server pays, its collector running (on this small heap; a project's
        # is larger, and a full collection costs more there).
        results["scrape (view, gc on)"] = median_ms(
            lambda: client.get(url), args.rounds, gc_off=False
        )
        with override_settings(FERROX_STATS={**fs, "METRICS_FAMILIES": ["otel", "vllm"]}):
            both = client.get(url).content
            results["scrape (view, +vllm)"] = median_ms(lambda: client.get(url), args.rounds)
    for name in os.listdir(where):
        os.unlink(os.path.join(where, name))
    os.rmdir(where)

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"prometheus_client {importlib.metadata.version('prometheus-client')}, library at {commit}"
    )
    print(
        f"host: {args.workers} workers x {args.records} records, {cells} cells per worker "
        f"({len(MODELS)} models x {len(ROUTES)} routes x 3 outcomes)"
    )
    print(
        f"state files: {len(sizes)} of {statistics.mean(sizes) / 1024:.0f} KiB on average "
        f"({form}); "
        f"scrape: {len(body) / 1024:.0f} KiB, {series} samples (otel); "
        f"{len(both) / 1024:.0f} KiB with vllm"
    )
    print(f"load average while it ran: {os.getloadavg()[0]:.1f} (1 min)")
    print(f"{'step':24} {'wall ms':>9} {'CPU ms':>9}")
    for name, (wall, cpu) in results.items():
        print(f"{name:24} {wall:9.2f} {cpu:9.2f}")
    producer = results["own state"][1] + results["publish"][1]
    print(f"{'reader (view - producer)':24} {'':9} {results['scrape (view)'][1] - producer:9.2f}")
    wall, cpu = results["scrape (view)"]
    verdict = "met" if cpu <= 20 else "NOT met"
    print(f"goal: a scrape <= 20 ms: {verdict} ({cpu:.2f} ms CPU, {wall:.2f} ms wall)")


if __name__ == "__main__":
    sys.exit(main())
