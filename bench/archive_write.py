"""Archive write throughput: the write-behind archiver beside raw psycopg COPY of the same rows.

N realistic, distinct finished records (``--rows``, default 100k) are written into the
emptied, migrated ``FinishedRequest`` table (its columns, indexes, constraints and the
commit-order trigger and sequence of migration 0006), in batches of
``ARCHIVE_BATCH_SIZE``, one transaction per batch, by each variant:

- ``archiver``: ``ArchiveWriter(autostart=False)``; every record is ``submit()``-ed, then
  ``drain()`` writes the queue from this thread. Timed: submit + drain (the drain alone
  and the submit loop alone are printed too).
- ``copy text`` (the anchor): a plain psycopg 3 connection; per batch ``COPY … FROM
  STDIN`` with ``write_row`` of the ``archive.rows.row_values`` tuples (built before
  the clock starts), then a commit.
- ``copy binary``: the same rows, ``COPY … FROM STDIN (FORMAT BINARY)`` with
  ``set_types`` (the table's column types, read from the catalog).
- ``copy text -trigger``: ``copy text`` with the commit-order trigger disabled;
  ``copy text -0006``: and with ``commit_seq``'s default (a ``nextval`` per row)
  dropped too. Both are restored after the variant. They price migration 0006.
- ``archiver +rollups``: ``archiver`` with the usage rollups (``archive/rollups.py``,
  deltas in each batch's transaction, folded as the writer's thread folds them and all
  at the end, timed; ``FERROX_STATS["ROLLUPS"]``) switched on: what they cost the
  writer (``rollups: archiver ...`` line: rows/s with ÷ without).
- ``bulk_create`` (``--bulk-create``): ``FinishedRequest.objects.bulk_create``.

Untimed before each variant: ``TRUNCATE`` (of the rollups too), ``CHECKPOINT`` (so no
variant inherits another's dirty buffers), ``gc.collect()``; autovacuum is off for the
table (it would wake at a random moment of a later variant). A warm-up round is
discarded. Rounds rotate the order of the variants. Each variant must leave exactly N
rows.

Per variant and round the script prints the wall time, the CPU time of this process
(the client: Python, psycopg) and of the server backend that did the writing (from
``/proc/<pid>/stat``, 10 ms resolution), and the 1-minute load average. Ratios are
``copy text``'s time ÷ the variant's, per round (above 1: faster than the anchor); the
median over rounds is reported, with the lowest and highest. The wall ratio is the
goal's figure; the CPU ratio (client + server) is steadier on a shared machine.
The script creates (and finally drops) its own database on the local PostgreSQL.

Run from the repo root::

    PYTHONPATH=. python bench/archive_write.py [--rows N --rounds R --groups G --bulk-create]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import itertools
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_write"
ANCHOR = "copy text"
GOAL = 0.9  # archiver >= 0.9x copy text (issue 13)

DESCRIPTION = "Archive write throughput: ArchiveWriter vs raw psycopg COPY of the same rows."


def make_records(n: int, seed: int = 1, groups: int | None = None) -> list[Any]:
    """N plausible finished requests: varied models, routes, outcomes, sizes, times.

    Their labels spread over about 540 rollup groups (model x route x replica x key x
    outcome); with ``groups``, over that many at most (``--groups``): each outcome's
    records take their labels from a few fixed combinations (most of them ok ones).
    """
    from ferrox_stats.core.requests import Record

    rng = random.Random(seed)
    models = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b", "mistral-7b", None]
    routes = ["/v1/chat/completions"] * 6 + ["/v1/completions"] * 2 + ["/v1/embeddings"]
    replicas = ["gpu-a-0", "gpu-a-1", "gpu-b-0"]
    keys = ["team-search", "team-chat", "batch-eval", None]
    at_ms = 1_780_000_000_000  # late 2026, epoch ms
    records = []
    for i in range(n):
        at_ms += rng.randint(0, 40)  # ~50 finished requests/s, some in the same ms
        prompt = rng.randint(8, 8192)
        completion = rng.randint(1, 2048)
        ttft = rng.uniform(20.0, 900.0)
        decode = completion * rng.uniform(8.0, 40.0)
        queue = rng.uniform(0.0, 50.0)
        roll = rng.random()
        status = 200
        aborted: str | None = None
        error: str | None = None
        finish: str | None = rng.choice(["stop", "stop", "length"])
        if roll < 0.03:  # client went away mid-stream
            aborted, finish = "client_disconnect", None
        elif roll < 0.05:
            status, error, finish = rng.choice([429, 500, 503]), "upstream error", None
        elif roll < 0.06:
            status, error, finish = 400, "invalid request", None
        records.append(
            Record(
                request_id=f"chatcmpl-{i:010d}-{rng.getrandbits(32):08x}",
                at_ms=at_ms,
                route=rng.choice(routes),
                model=rng.choice(models),
                status=status,
                stream=rng.random() < 0.7,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached_tokens=rng.randint(0, prompt) if rng.random() < 0.3 else 0,
                ttft_ms=round(ttft, 3),
                duration_ms=round(queue + ttft + decode, 3),
                queue_ms=round(queue, 3),
                decode_ms=round(decode, 3),
                finish_reason=finish,
                aborted=aborted,
                error=error,
                client=f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 254)}",
                via_api_key=rng.choice(keys),
                replica=rng.choice(replicas),
            )
        )
    if groups is None:
        return records
    from ferrox_stats.archive.rows import outcome

    if groups < 3:
        raise ValueError("--groups must be at least 3 (one per outcome)")
    labels = list(itertools.product(models, sorted(set(routes)), replicas, keys))
    random.Random(seed).shuffle(labels)
    few = max(1, groups // 10)
    sizes = {"ok": groups - 2 * few, "error": few, "aborted": few}
    pools, start = {}, 0
    for kind, size in sizes.items():
        pools[kind], start = labels[start : start + size], start + size
    spread = []
    for record in records:
        model, route, replica, key = rng.choice(pools[outcome(record)])
        spread.append(record._replace(model=model, route=route, replica=replica, via_api_key=key))
    return spread


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--groups",
        type=int,
        default=None,
        help="rollup groups the records spread over (default: about 540)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and discarded")
    parser.add_argument("--bulk-create", action="store_true", help="also time bulk_create")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()

    url = create_database(args.server, DATABASE)
    try:
        run(args, url)
    finally:
        drop_database(args.server, DATABASE)


def backend_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a PostgreSQL backend on this machine has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def spread(values: list[float]) -> str:
    """Median, lowest and highest of some shares, as signed percentages."""
    return f"{statistics.median(values):+.1%} ({min(values):+.1%} to {max(values):+.1%})"


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace, url: str) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from ferrox_stats.archive import partitions
    from ferrox_stats.archive.fold import fold
    from ferrox_stats.archive.rows import COLUMNS, Pending, at_ms_to_datetime, row_values
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.conf import conf
    from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta

    call_command("migrate", verbosity=0)
    # ``archiver`` is the archive alone (rollups are on by default): ``archiver
    # +rollups`` turns them on for its own rounds.
    settings.FERROX_STATS = {**getattr(settings, "FERROX_STATS", {}), "ROLLUPS": False}
    n, batch = args.rows, conf.ARCHIVE_BATCH_SIZE
    instance = "bench-instance"
    records = make_records(n, groups=args.groups)
    # Inputs are built once, untimed: each variant is timed from what it is handed.
    rows = [row_values(Pending(i, r, instance)) for i, r in enumerate(records)]
    table = FinishedRequest._meta.db_table
    rollups = Rollup._meta.db_table
    columns = ", ".join(COLUMNS)

    def sql(statement: str) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else None

    types = dict(
        sql(
            "SELECT attname, atttypid::regtype::text FROM pg_attribute "
            f"WHERE attrelid = '{table}'::regclass AND attnum > 0 AND NOT attisdropped"
        )
    )
    copy_types = [types[c] for c in COLUMNS]
    [(seq_default,)] = sql(
        "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef JOIN pg_attribute "
        "ON attrelid = adrelid AND attnum = adnum "
        f"WHERE adrelid = '{table}'::regclass AND attname = 'commit_seq'"
    )
    # The records' days get partitions, as the writer makes them for today's (on
    # PostgreSQL the archive is partitioned by day: migration 0013).
    days = {at_ms_to_datetime(r.at_ms).date() for r in records}
    partitions.make_days(days)
    # Autovacuum would wake on the filled table at a random moment of a later variant.
    for name in [p.name for p in partitions.partitions()] or [table]:
        sql(f"ALTER TABLE {name} SET (autovacuum_enabled = false)")
    submit_ns: list[float] = []
    rollup_rows: list[int] = []
    drain_s: list[float] = []

    def archiver(timings: bool = True, folds: bool = False) -> tuple[float, int]:
        # The queue must hold the whole run: a drop would make the figure meaningless.
        writer = ArchiveWriter(
            instance=instance,
            batch_size=batch,
            queue_max=max(n, conf.ARCHIVE_QUEUE_MAX),
            fold_s=conf.ROLLUP_FOLD_S,
            autostart=False,
        )
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid
        submit = writer.submit
        server0 = backend_cpu_s(pid)
        start = time.perf_counter()
        for i, record in enumerate(records):
            submit(i, record)
        submitted = time.perf_counter()
        if folds:
            # With the rollups, as the writer's thread: a batch, then a fold of the
            # deltas when one is due; and at the end every delta folded (timed).
            while writer.flush_once():  # each batch, then its fold when one is due
                pass
            fold(writer.using)
        # drain() retries a failing batch silently, so failed attempts are checked too.
        emptied = writer.drain(deadline_s=600)
        end = time.perf_counter()
        server = backend_cpu_s(pid) - server0
        health = writer.health()
        assert emptied and health.persisted == n and not health.failed_attempts, health
        assert not health.dropped and not health.dead_lettered, health
        assert not health.duplicates, health
        if timings:
            submit_ns.append((submitted - start) * 1e9 / n)
            drain_s.append(end - submitted)
        return end - start, server

    def archiver_with_rollups() -> tuple[float, float]:
        from django.conf import settings

        saved = getattr(settings, "FERROX_STATS", {})
        settings.FERROX_STATS = {**saved, "ROLLUPS": True}
        try:
            timed = archiver(timings=False, folds=True)
            assert not RollupDelta.objects.exists()
        finally:
            settings.FERROX_STATS = saved
        rollup_rows.append(Rollup.objects.count())
        return timed

    def raw_copy(binary: bool) -> Callable[[], tuple[float, float]]:
        statement = f"COPY {table} ({columns}) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")

        def variant() -> tuple[float, float]:
            with psycopg.connect(url) as conn:
                pid = conn.info.backend_pid
                server0 = backend_cpu_s(pid)
                start = time.perf_counter()
                for lo in range(0, n, batch):
                    with conn.cursor() as cursor, cursor.copy(statement) as copy:
                        if binary:
                            copy.set_types(copy_types)
                        for row in rows[lo : lo + batch]:
                            copy.write_row(row)
                    conn.commit()
                return time.perf_counter() - start, backend_cpu_s(pid) - server0

        return variant

    def without(trigger: bool, default: bool) -> Callable[[], tuple[float, float]]:
        copy_text = raw_copy(binary=False)

        def variant() -> tuple[float, float]:
            if trigger:
                sql(f"ALTER TABLE {table} DISABLE TRIGGER ferrox_stats_commit_order")
            if default:
                sql(f"ALTER TABLE {table} ALTER COLUMN commit_seq DROP DEFAULT")
            try:
                return copy_text()
            finally:
                sql(f"ALTER TABLE {table} ENABLE TRIGGER ferrox_stats_commit_order")
                sql(f"ALTER TABLE {table} ALTER COLUMN commit_seq SET DEFAULT {seq_default}")

        return variant

    def bulk_create() -> tuple[float, float]:
        # bulk_create sets pks on its instances, so every round gets fresh ones.
        objs = [FinishedRequest(**dict(zip(COLUMNS, row, strict=True))) for row in rows]
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid
        server0 = backend_cpu_s(pid)
        start = time.perf_counter()
        FinishedRequest.objects.bulk_create(objs, batch_size=batch)
        return time.perf_counter() - start, backend_cpu_s(pid) - server0

    variants: dict[str, Callable[[], tuple[float, float]]] = {
        ANCHOR: raw_copy(binary=False),
        "archiver": archiver,
        "archiver +rollups": archiver_with_rollups,
        "copy binary": raw_copy(binary=True),
        "copy text -trigger": without(trigger=True, default=False),
        "copy text -0006": without(trigger=True, default=True),
    }
    if args.bulk_create:
        variants["bulk_create"] = bulk_create

    pg_version = connection.pg_version  # type: ignore[attr-defined]
    print(f"date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}")
    print(f"command: {shlex.join(['python', *sys.argv])}")
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__} "
        f"({psycopg.pq.__impl__}), PostgreSQL {pg_version // 10000}.{pg_version % 100}, "
        f"{os.cpu_count()} CPUs, load average {loadavg()}"
    )
    print(
        f"{n} rows, batch {batch}, {args.rounds} rounds (+{args.warmup} warm-up), "
        "per round: wall s, client and server CPU us/row, 1-min load"
    )
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    client_us: dict[str, list[float]] = {name: [] for name in variants}
    server_us: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.warmup + args.rounds):
        counted = r >= args.warmup
        # Rotate the order so no variant always follows the same neighbour.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sql(f"TRUNCATE {table} RESTART IDENTITY")
            sql(f"TRUNCATE {rollups}, {RollupDelta._meta.db_table} RESTART IDENTITY")
            sql("CHECKPOINT")
            gc.collect()
            client0 = time.process_time()
            elapsed, server = variants[name]()
            client = time.process_time() - client0
            got = FinishedRequest.objects.count()
            assert got == n, f"{name}: table holds {got} rows, expected {n}"
            label = f"round {r + 1 - args.warmup}" if counted else "warm-up"
            print(
                f"  {label:<8} {name:<19} {elapsed:6.2f} s {n / elapsed:8.0f} rows/s  "
                f"client {client * 1e6 / n:5.2f}  server {server * 1e6 / n:5.2f}  "
                f"load {os.getloadavg()[0]:.2f}"
            )
            if counted:
                wall[name].append(elapsed)
                cpu[name].append(client + server)
                client_us[name].append(client * 1e6 / n)
                server_us[name].append(server * 1e6 / n)

    def ratios(values: dict[str, list[float]], name: str) -> list[float]:
        return [a / v for a, v in zip(values[ANCHOR], values[name], strict=True)]

    print(
        f"{'variant':<19} {'rows/s':>8} {'client':>7} {'server':>7}   "
        f"{'wall ratio (min-max)':<22} {'CPU ratio (min-max)':<20}"
    )
    for name in variants:
        w, c = ratios(wall, name), ratios(cpu, name)
        print(
            f"{name:<19} {n / statistics.median(wall[name]):8.0f} "
            f"{statistics.median(client_us[name]):7.2f} {statistics.median(server_us[name]):7.2f}"
            f"   {statistics.median(w):5.2f}x ({min(w):.2f}-{max(w):.2f})"
            f"     {statistics.median(c):5.2f}x ({min(c):.2f}-{max(c):.2f})"
        )
    print("(rows/s: median round; client, server: median CPU us/row; ratios: copy text's")
    print(" time / the variant's, median of the per-round ratios)")
    for anchor in ("copy text", "copy binary"):
        w = [a / v for a, v in zip(wall[anchor], wall["archiver"], strict=True)]
        c = [a / v for a, v in zip(cpu[anchor], cpu["archiver"], strict=True)]
        goal = f"  goal >= {GOAL}x: {'met' if statistics.median(w) >= GOAL else 'NOT met'}"
        print(
            f"archiver vs {anchor:<11}: wall {statistics.median(w):.2f}x "
            f"({min(w):.2f}-{max(w):.2f}), CPU {statistics.median(c):.2f}x"
            + (goal if anchor == ANCHOR else "")
        )
    with_rollups = [a / w for a, w in zip(wall["archiver"], wall["archiver +rollups"], strict=True)]
    print(
        f"rollups: archiver with / without (rows/s ratio): {statistics.median(with_rollups):.2f}x "
        f"({min(with_rollups):.2f}-{max(with_rollups):.2f}); rollup rows written per run: "
        f"{max(rollup_rows)}"
    )
    drained = [a / d for a, d in zip(wall[ANCHOR], drain_s[args.warmup :], strict=True)]
    print(f"archiver drain() alone vs copy text: wall {statistics.median(drained):.2f}x")
    for name, label in (
        ("copy text -trigger", "the trigger"),
        ("copy text -0006", "0006 (trigger + sequence)"),
    ):
        shares = [1 - v / a for a, v in zip(wall[ANCHOR], wall[name], strict=True)]
        server = [1 - v / a for a, v in zip(server_us[ANCHOR], server_us[name], strict=True)]
        print(
            f"share of copy text's time that {label} costs: "
            f"wall {spread(shares)}, server CPU {spread(server)}"
        )
    counted_submit = submit_ns[args.warmup :]
    print(
        f"archiver submit() alone: median {statistics.median(counted_submit):.0f} ns/record "
        f"(request path, queue growing to {n})"
    )
    print(f"load average at the end {loadavg()}")


if __name__ == "__main__":
    main()
