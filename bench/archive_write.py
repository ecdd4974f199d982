"""Archive write throughput: the write-behind archiver beside raw COPY and bulk_create.

N realistic, distinct finished records (``--rows``, default 100k) are written into an
emptied ``FinishedRequest`` table three ways:

- ``archiver``: ``ArchiveWriter(autostart=False)`` with the default batch size;
  every record is ``submit()``-ed, then ``drain()`` writes the queue from this
  thread. Timed: submit + drain. The submit loop alone is also reported per record:
  it is what the request path pays.
- ``raw COPY`` (the baseline): a plain psycopg 3 connection, ``COPY ... FROM STDIN``
  of the same rows (``archive.rows.row_values``, built before the clock starts),
  one COPY and one commit per batch of the same size.
- ``bulk_create``: ``FinishedRequest.objects.bulk_create(batch_size=<batch>)`` of
  model instances (built before the clock starts).

Each variant starts from an empty table (TRUNCATE) and must leave exactly N rows.
Rounds interleave the variants (rotating their order); the median and the best round
are reported, each as rows/s and as a ratio to raw COPY.
The script creates (and finally drops) its own database on the local PostgreSQL.

Run from the repo root::

    PYTHONPATH=. python bench/archive_write.py [--rows N --rounds R]
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_write"

DESCRIPTION = "Archive write throughput: ArchiveWriter vs raw COPY vs bulk_create."


def make_records(n: int, seed: int = 1) -> list[Any]:
    """N plausible finished requests: varied models, routes, outcomes, sizes, times."""
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
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()

    url = create_database(args.server, DATABASE)
    try:
        run(args, url)
    finally:
        drop_database(args.server, DATABASE)


def run(args: argparse.Namespace, url: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from ferrox_stats.archive.rows import COLUMNS, Pending, row_values
    from ferrox_stats.archive.writer import ArchiveWriter
    from ferrox_stats.conf import conf
    from ferrox_stats.models import FinishedRequest

    call_command("migrate", verbosity=0)
    n, batch = args.rows, conf.ARCHIVE_BATCH_SIZE
    instance = "bench-instance"
    records = make_records(n)
    # Inputs are built once, untimed: each variant is timed from what it is handed.
    rows = [row_values(Pending(i, r, instance)) for i, r in enumerate(records)]
    table = FinishedRequest._meta.db_table
    copy_sql = f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN"
    submit_ns: list[float] = []

    def truncate() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {table} RESTART IDENTITY")

    def archiver() -> float:
        # The queue must hold the whole run: a drop would make the figure meaningless.
        writer = ArchiveWriter(
            instance=instance,
            batch_size=batch,
            queue_max=max(n, conf.ARCHIVE_QUEUE_MAX),
            autostart=False,
        )
        submit = writer.submit
        start = time.perf_counter()
        for i, record in enumerate(records):
            submit(i, record)
        submitted = time.perf_counter()
        # The default deadline is the shutdown one (10 s): give the drain all it needs.
        # drain() retries a failing batch silently, so failed attempts are checked too.
        emptied = writer.drain(deadline_s=600)
        end = time.perf_counter()
        health = writer.health()
        assert emptied and health.persisted == n and not health.failed_attempts, health
        assert not health.dropped and not health.dead_lettered, health
        submit_ns.append((submitted - start) * 1e9 / n)
        return end - start

    def raw_copy() -> float:
        with psycopg.connect(url) as conn:
            start = time.perf_counter()
            for lo in range(0, n, batch):
                with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                    for row in rows[lo : lo + batch]:
                        copy.write_row(row)
                conn.commit()
            return time.perf_counter() - start

    def bulk_create() -> float:
        # bulk_create sets pks on its instances, so every round gets fresh ones.
        objs = [FinishedRequest(**dict(zip(COLUMNS, row, strict=True))) for row in rows]
        start = time.perf_counter()
        FinishedRequest.objects.bulk_create(objs, batch_size=batch)
        return time.perf_counter() - start

    variants: dict[str, Callable[[], float]] = {
        "raw COPY": raw_copy,
        "archiver": archiver,
        "bulk_create": bulk_create,
    }
    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"PostgreSQL {pg_major}, {n} rows, batch {batch}, "
        f"{args.rounds} rounds, median round"
    )
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        # Rotate the order so no variant always follows the same neighbour.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            truncate()
            gc.collect()
            elapsed = variants[name]()
            got = FinishedRequest.objects.count()
            assert got == n, f"{name}: table holds {got} rows, expected {n}"
            seconds[name].append(elapsed)
            print(f"  round {r + 1} {name:<12} {elapsed:7.2f} s  {n / elapsed:9.0f} rows/s")

    # Median and best round: other work on the machine only ever adds time, so when it
    # is busy the best round is the steadier figure of the two.
    median = {name: n / statistics.median(values) for name, values in seconds.items()}
    best = {name: n / min(values) for name, values in seconds.items()}
    print(f"{'variant':<12} {'median rows/s':>14} {'ratio':>7} {'best rows/s':>12} {'ratio':>7}")
    for name in variants:
        print(
            f"{name:<12} {median[name]:14.0f} {median[name] / median['raw COPY']:6.2f}x "
            f"{best[name]:12.0f} {best[name] / best['raw COPY']:6.2f}x"
        )
    for other, goal in (("raw COPY", "  (goal >= 0.80x)"), ("bulk_create", "")):
        print(
            f"archiver / {other:<11} median {median['archiver'] / median[other]:5.2f}x, "
            f"best {best['archiver'] / best[other]:5.2f}x{goal}"
        )
    print(
        f"archiver submit() alone: median {statistics.median(submit_ns):.0f} ns/record, "
        f"best {min(submit_ns):.0f} ns/record (request path, queue growing to {n})"
    )


if __name__ == "__main__":
    main()
