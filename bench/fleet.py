"""Heartbeat cost per process, and the fleet document at 64 instances, on PostgreSQL.

A recorder is fed ``--records`` realistic finished requests (5 models, 3 routes, every
outcome, latencies spread over four decades) so its state document carries a breakdown
like a busy worker's. Then, each call timed on its own, the median reported:

- ``heartbeat tick``: ``Heartbeat.publish_once()``, as the thread does every
  HEARTBEAT_S on its kept connection, and its parts, each timed on its own: the state
  document (``process_state``), the host's file for ``/metrics`` (``host_state.publish``:
  JSON and an atomic replace), the row (its encoding and one INSERT … ON CONFLICT).
  CPU time (``time.process_time``, this process only: the PostgreSQL backend's share is
  not in it) and wall time. Then the tick with the records of ``--rate`` requests/s
  over one HEARTBEAT_S queued before it (``Breakdown.observe`` only queues them; the
  tick's ``process_state`` folds them): the tick at that rate, fold included. From the
  CPU per tick, the share of one core at HEARTBEAT_S = 2 s for one worker and for 4.
- ``fleet compute``: ``fleet.compute()`` over ``--instances`` rows of such documents
  (read, JSON decode, merge, percentiles): the cost of a cache miss, wall and this
  process's CPU. Then its steps one by one: the query (the ORM fetching the rows'
  columns: PostgreSQL's output, the transfer, psycopg's loaders), decoding (the state
  JSON, each row checked, its packed counts sliced), the merge of the three latency
  distributions, their percentiles, the counters summed.
- ``fleet cached``: ``fleet.fleet_document()`` within its cache window: what every
  other call within a quarter heartbeat pays.
- ``GET v1/fleet``: the view through Django's test client with a read token, cached.

The script creates (and finally drops) its own database on the local PostgreSQL.
Run from the repo root::

    PYTHONPATH=.:bench python bench/fleet.py [--labels 5x3 --rate 500 --instances 64
        --records 20000 --calls 50 --database ferrox_bench_fleet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_fleet"
DESCRIPTION = "Heartbeat cost per tick and the v1/fleet document at N instances."
HEARTBEAT_S = 2.0

MODELS = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b", "mistral-7b", "phi-4"]
ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]


def feed(recorder: Any, n: int, models: list[str], routes: list[str], seed: int = 11) -> None:
    """``n`` plausible finished records through ``recorder.finished``."""
    from ferrox_stats.core.requests import Record

    rng = random.Random(seed)
    for i in range(n):
        completion = rng.randint(1, 2048)
        roll = rng.random()
        recorder.finished(
            Record(
                request_id=f"chatcmpl-{i:08d}",
                at_ms=1_793_750_400_000 + i,
                route=rng.choice(routes),
                model=rng.choice(models),
                status=500 if roll < 0.02 else 200,
                stream=True,
                prompt_tokens=rng.randint(8, 8192),
                completion_tokens=completion,
                cached_tokens=0,
                ttft_ms=rng.lognormvariate(5.0, 1.0),
                duration_ms=rng.lognormvariate(8.0, 1.2),
                queue_ms=rng.uniform(0.0, 50.0),
                decode_ms=completion * rng.uniform(8.0, 40.0),
                finish_reason="stop",
                aborted="client_disconnect" if 0.02 <= roll < 0.05 else None,
                error="EngineOverloaded" if roll < 0.02 else None,
                client="10.0.0.7",
                via_api_key=None,
                replica="bench",
            )
        )


def timed(fn: Callable[[], object], calls: int) -> tuple[list[float], list[float]]:
    """(wall ms, CPU ms) per call."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(calls):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    return walls, cpus


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--records", type=int, default=20_000, help="records fed to the recorder")
    parser.add_argument("--calls", type=int, default=50, help="calls per measurement")
    parser.add_argument(
        "--labels",
        default="1x2",
        help="models x routes fed: 1x2 (one model behind chat and completions), 5x3 (busy)",
    )
    parser.add_argument(
        "--rate", type=int, default=500, help="requests/s per worker whose records a tick folds"
    )
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    parser.add_argument("--database", default=DATABASE, help="created, and dropped at the end")
    args = parser.parse_args()

    create_database(args.server, args.database)
    try:
        run(args)
    finally:
        drop_database(args.server, args.database)


def load() -> str:
    return "load average " + ", ".join(f"{n:.2f}" for n in os.getloadavg())


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from ferrox_stats import fleet, fleet_rows, live, tokens
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.state import process_state

    call_command("migrate", verbosity=0)
    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"PostgreSQL {pg_major}, commit {commit}, {args.records} records fed, "
        f"{args.instances} instances, {args.calls} calls each (median), {load()}"
    )

    n_models, n_routes = (int(n) for n in args.labels.split("x"))
    sink = ArchiveWriter(instance="bench", autostart=False)  # counts; never writes
    recorder = live.Recorder(replica="bench-0", sink=sink)
    feed(recorder, args.records, MODELS[:n_models], ROUTES[:n_routes])
    doc = process_state(recorder)
    size = len(json.dumps(doc))
    row_size = len(json.dumps(fleet_rows.row_state(doc)))
    cells = len(doc["breakdown"])
    print(
        f"state document: {size / 1024:.1f} KiB of JSON, {cells} breakdown cells "
        f"({n_models} models x {n_routes} routes x outcomes); the row's: {row_size / 1024:.1f} KiB"
    )

    heartbeat_tick(args, recorder)

    now_ms = fleet_compute(args, doc, recorder)
    fleet.reset()
    clock = time.monotonic

    def cached() -> dict[str, Any]:
        return fleet.fleet_document(
            now_ms=now_ms, monotonic=clock(), using="default", lost_s=30.0, heartbeat_s=HEARTBEAT_S
        )

    cached()
    walls, _ = timed(cached, args.calls)
    print(f"fleet document, cached:          {median(walls):7.3f} ms wall")

    _, secret = tokens.issue("bench-reader")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/control/telemetry/v1/fleet").status_code == 200
    walls, _ = timed(lambda: client.get("/control/telemetry/v1/fleet"), args.calls)
    print(f"GET v1/fleet, cached:            {median(walls):7.3f} ms wall")
    # Every request within a cache window is a hit; one per window per worker misses.
    window_s = fleet.CACHE_FRACTION * HEARTBEAT_S
    print(f"cache window: {window_s:.2f} s ({fleet.CACHE_FRACTION} x HEARTBEAT_S)")
    print(f"at the end: {load()}")


def heartbeat_tick(args: argparse.Namespace, recorder: Any) -> None:
    """The heartbeat's CPU per tick, whole and in parts, idle and at ``--rate``."""
    from ferrox_stats import host_state
    from ferrox_stats.heartbeat import Heartbeat
    from ferrox_stats.state import process_state

    def line(what: str, cpus: list[float], walls: list[float]) -> float:
        print(f"{what:<42}{median(cpus):7.3f} ms CPU  {median(walls):7.3f} ms wall")
        return median(cpus)

    publisher = Heartbeat(recorder, interval_s=HEARTBEAT_S, using="default")
    publisher.publish_once()  # the first one creates the row and prunes
    doc = process_state(recorder)
    alone = line("process_state", *reversed(timed(lambda: process_state(recorder), args.calls)))
    line(
        "host file (host_state.publish)",
        *reversed(timed(lambda: host_state.publish(doc), args.calls)),
    )
    line(
        "row: encode + upsert (Heartbeat._upsert)",
        *reversed(timed(lambda: publisher._upsert(doc), args.calls)),
    )
    idle = line(
        "heartbeat tick, nothing queued", *reversed(timed(publisher.publish_once, args.calls))
    )

    def reconnecting_tick() -> None:
        publisher.publish_once()
        publisher._close_connection()

    line("  a reconnect per tick would be", *reversed(timed(reconnecting_tick, args.calls)))

    # The tick at a request rate: the records of one interval queued (as the request
    # path leaves them, Breakdown.observe), then what folds them: process_state alone
    # (the fold is the difference from the idle one), and the whole tick.
    queued = int(args.rate * HEARTBEAT_S)
    n_models, n_routes = (int(n) for n in args.labels.split("x"))
    shim = type("Shim", (), {"finished": staticmethod(recorder.breakdown.observe)})()
    seeds = iter(range(1000, 1000 + 2 * args.calls))

    def after_queueing(fn: Callable[[], object]) -> tuple[list[float], list[float]]:
        walls, cpus = [], []
        for _ in range(args.calls):
            feed(shim, queued, MODELS[:n_models], ROUTES[:n_routes], seed=next(seeds))
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            cpus.append((time.process_time() - cpu) * 1000)
            walls.append((time.perf_counter() - wall) * 1000)
        return walls, cpus

    folding = line(
        f"process_state, {queued} records queued",
        *reversed(after_queueing(lambda: process_state(recorder))),
    )
    print(f"  so the fold of {queued} records:{folding - alone:>17.3f} ms CPU (the difference)")
    busy = line(
        f"heartbeat tick, {queued} records queued",
        *reversed(after_queueing(publisher.publish_once)),
    )
    assert publisher.failures == 0 and publisher.host_failures == 0, publisher.last_error
    for what, tick in (("nothing queued", idle), (f"at {args.rate} requests/s", busy)):
        share = tick / (HEARTBEAT_S * 1000) * 100
        print(
            f"heartbeat CPU at HEARTBEAT_S={HEARTBEAT_S}, {what}: {share:.3f} % of one core "
            f"per worker, {4 * share:.3f} % for 4 workers"
        )
    # 1 % of one core over 4 workers: a tick of 5 ms at most every 2 s. What each queued
    # record adds to the whole tick (more than the fold alone: caches, the row's latency).
    per_record = (busy - idle) / queued
    budget = HEARTBEAT_S * 1000 * 0.01 / 4
    rate = (budget - idle) / per_record / HEARTBEAT_S if per_record > 0 else 0.0
    print(
        f"within 1 % of one core at 4 workers: up to {max(rate, 0.0):.0f} requests/s per "
        f"worker (the tick: {idle:.2f} ms + {per_record * 1000:.2f} us per record queued)"
    )


def fleet_compute(args: argparse.Namespace, doc: dict[str, Any], recorder: Any) -> int:
    """The v1/fleet cache miss over ``args.instances`` rows of ``doc``, split into its
    steps; returns the ``now_ms`` the rows were written at."""
    from ferrox_stats import fleet, fleet_rows
    from ferrox_stats.heartbeat import instance_row
    from ferrox_stats.models import Instance

    # The fleet: the same document under N instance ids, each last seen just now.
    Instance.objects.all().delete()
    now_ms = int(recorder.clock.wall_ms())
    for n in range(args.instances):
        instance = f"bench-{n}/{1000 + n}/{n:012x}"
        copy = {
            **doc,
            "instance": instance,
            "replica": f"bench-{n}",
            "pid": 1000 + n,
            "at_ms": now_ms,
        }
        instance_row(copy, HEARTBEAT_S).save()  # what the heartbeat upserts

    def compute() -> dict[str, Any]:
        return fleet.compute(now_ms=now_ms, using="default", lost_s=30.0, heartbeat_s=HEARTBEAT_S)

    document = compute()
    assert document["totals"]["instances"] == args.instances, document["totals"]["instances"]
    assert document["totals"]["completed"] == args.instances * doc["serving"]["completed"]
    assert document["unreadable"] == 0
    text, blob = fleet_rows.pack(doc)
    print(
        f"rows: {args.instances} x ({len(text) / 1024:.1f} KiB of state JSON + "
        f"{len(blob or b'') / 1024:.1f} KiB of packed latency counts)"
    )
    walls, cpus = timed(compute, args.calls)
    print(
        f"fleet compute ({args.instances} instances):   {median(walls):7.3f} ms wall "
        f"{median(cpus):7.3f} ms CPU (a cache miss; CPU: this process, not PostgreSQL's)"
    )

    # The same steps one by one (each the median of its own calls).
    def query() -> list[Any]:
        return fleet._newest_rows("default")

    rows = query()

    def decode() -> list[Any]:
        summands = []
        for row in rows:
            state = fleet._loads(row[-2])
            fleet._entry(row, state, now_ms, 30.0)
            summands.append(fleet.summand(state, row[-1]))
        return summands

    summands = decode()
    parts = [item.latency for item in summands]

    def merge() -> list[Any]:
        return [fleet_rows.merge_parts(row[i] for row in parts) for i in range(3)]

    merged = merge()

    def percentiles() -> list[Any]:
        return [fleet_rows.summary(*one) for one in merged]

    nothing = [fleet_rows.Part(0, 0, 0, 4, b"")] * 3
    only_counters = [item._replace(latency=nothing) for item in summands]

    def counters() -> dict[str, Any]:
        return fleet.totals(only_counters)

    steps = [
        ("query (rows fetched)", query),
        ("decode (JSON + rows checked)", decode),
        ("merge (3 distributions)", merge),
        ("percentiles", percentiles),
        ("counters summed (totals)", counters),
    ]
    for name, step in steps:
        walls, cpus = timed(step, args.calls)
        print(f"  {name:30} {median(walls):7.3f} ms wall {median(cpus):7.3f} ms CPU")
    return now_ms


if __name__ == "__main__":
    main()
