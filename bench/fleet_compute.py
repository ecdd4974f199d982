"""The v1/fleet cache miss alone (``fleet.compute()`` at N instances), for comparisons.

Whichever ``ferrox_stats`` comes first on ``PYTHONPATH`` is measured, so the same
script times two trees (before and after a change) one after the other, interleaved::

    B=/path/to/after/bench
    for i in 1 2 3; do
      (cd /path/to/before && PYTHONPATH=.:$B python $B/fleet_compute.py)
      (cd /path/to/after && PYTHONPATH=.:bench python bench/fleet_compute.py)
    done

It uses only what both releases have (``process_state``, ``heartbeat.instance_row``,
``fleet.compute``). Rows: ``bench/fleet.py``'s busy worker (20 000 records over
``--labels`` models x routes) under ``--instances`` ids, all live. Prints the merged
duration percentiles (the two trees must agree) and the median and best wall and CPU
(this process's only, ``time.process_time``; PostgreSQL's backend is not in it) of
``--calls`` calls. Creates and drops its own database (named with the pid).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

from fleet import MODELS, ROUTES, feed
from pgdb import SERVER, create_database, drop_database


def main() -> None:
    parser = argparse.ArgumentParser(description="The v1/fleet cache miss at N instances.")
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--labels", default="5x3", help="models x routes fed")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()
    name = f"ferrox_bench_fleet_compute_{os.getpid()}"
    create_database(args.server, name)
    try:
        run(args)
    finally:
        drop_database(args.server, name)


def run(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    import ferrox_stats
    from ferrox_stats import fleet, live
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.heartbeat import instance_row
    from ferrox_stats.state import process_state

    call_command("migrate", verbosity=0)
    tree = os.path.dirname(os.path.dirname(os.path.abspath(ferrox_stats.__file__)))
    commit = subprocess.run(
        ["git", "-C", tree, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    print(f"{tree} (commit {commit or '?'}), load average {load}")

    n_models, n_routes = (int(n) for n in args.labels.split("x"))
    sink = ArchiveWriter(instance="bench", autostart=False)  # counts; never writes
    recorder = live.Recorder(replica="bench-0", sink=sink)
    feed(recorder, args.records, MODELS[:n_models], ROUTES[:n_routes])
    doc = process_state(recorder)
    now_ms = recorder.clock.wall_ms()
    for n in range(args.instances):
        copy = {**doc, "instance": f"bench-{n}/{n}/x", "replica": f"bench-{n}", "at_ms": now_ms}
        instance_row(copy, 2.0).save()

    def compute() -> dict[str, object]:
        return fleet.compute(now_ms=now_ms, using="default", lost_s=30.0, heartbeat_s=2.0)

    document = compute()
    totals = document["totals"]
    assert isinstance(totals, dict) and totals["instances"] == args.instances
    print(f"  duration_s: {json.dumps(totals['latency']['duration_s'])}")
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(args.calls):
        wall, cpu = time.perf_counter(), time.process_time()
        compute()
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    print(
        f"  fleet compute ({args.instances} instances): "
        f"{statistics.median(walls):7.3f} ms wall (best {min(walls):.3f}) "
        f"{statistics.median(cpus):7.3f} ms CPU (best {min(cpus):.3f})"
    )


if __name__ == "__main__":
    main()
