"""Memory per retained ring record: records kept as objects (main's ring) vs packed.

Each storage is filled with realistic records until it has wrapped (capacity, then a
quarter as many again), and ``tracemalloc`` counts what it then holds: the bytes
traced after the fill minus before it, divided by the rows retained.

- ``objects``: what main's ring (9e02609) holds: a list of ``capacity`` slots, each a
  ``Record`` with its own field objects.
- ``packed``: ``Stats(capacity).ring`` of this tree, which keeps its newest
  ``RECORD_PACKING.hot`` records as objects and packs the older ones a block at a time.

Realistic records: a unique ``chatcmpl-<24 random chars>`` id, an epoch-ms finish time,
4 models (Hugging Face ids), 3 routes, 8 statuses, 60 % streamed, token counts, float
latencies, and ``None`` where a request would have none (no TTFT unless streamed, no
cached tokens, no finish reason on an error, no API key...), 50 client addresses, 3 API
key labels, one replica. The strings a request path parses per request (model, route,
finish reason, client) are fresh objects per record, as parsing gives them; the others
are shared, as a server's constants are.

Run: ``PYTHONPATH=. python bench/ring_memory.py [--quick | --capacity N]``
(``--quick``: capacity 100 000, about 30 s; default 1 000 000).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import random
import string
import subprocess
import tracemalloc
from collections.abc import Callable, Iterator

from ferrox_stats.core import Record, Stats
from ferrox_stats.core.requests import RECORD_PACKING

MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
)
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
STATUSES = (200,) * 90 + (400, 401, 404, 413, 429, 499, 500, 502) + (200,) * 2
CLIENTS = tuple(f"10.{n // 16}.{n % 16}.{17 + n}" for n in range(40)) + tuple(
    f"2001:db8:4::{n:x}" for n in range(10)
)
API_KEYS = ("search-backend", "chat-frontend", "eval-batch", None, None)
ID_CHARS = string.ascii_letters + string.digits


def fresh(text: str | None) -> str | None:
    """A new string object equal to ``text``, as parsing a request body gives."""
    return None if text is None else text.encode().decode()


def realistic_records(n: int, seed: int = 13) -> Iterator[Record]:
    rnd = random.Random(seed)
    at_ms = 1_764_000_000_000
    for _ in range(n):
        at_ms += rnd.randint(0, 40)
        status = rnd.choice(STATUSES)
        ok = status == 200
        stream = rnd.random() < 0.6
        completion = rnd.randint(1, 2000) if ok else None
        duration = rnd.uniform(40.0, 30_000.0)
        ttft = rnd.uniform(15.0, 900.0) if ok and stream else None
        aborted = "client_disconnect" if status == 499 else None
        yield Record(
            request_id="chatcmpl-" + "".join(rnd.choices(ID_CHARS, k=24)),
            at_ms=at_ms,
            route=fresh(rnd.choice(ROUTES)),
            model=fresh(rnd.choice(MODELS)),
            status=status,
            stream=stream,
            prompt_tokens=rnd.randint(8, 8000),
            completion_tokens=completion,
            cached_tokens=rnd.choice((None, None, 0, rnd.randint(16, 4000))),
            ttft_ms=ttft,
            duration_ms=duration,
            queue_ms=rnd.uniform(0.0, 80.0) if ok else None,
            decode_ms=duration - (ttft or 0.0) if ok else None,
            finish_reason=fresh(rnd.choice(("stop", "stop", "length"))) if ok else None,
            aborted=aborted,
            error="UpstreamError" if status >= 500 else None,
            client=fresh(rnd.choice(CLIENTS)),
            via_api_key=rnd.choice(API_KEYS),
            replica="gpu-node-07",
        )


def objects(capacity: int) -> tuple[object, Callable[[Record], object]]:
    """Main's storage: one slot per retained record, each a Record of objects."""
    slots: list[Record | None] = [None] * capacity
    total = 0

    def push(record: Record) -> None:
        nonlocal total
        slots[total % capacity] = record
        total += 1

    return slots, push


def packed(capacity: int) -> tuple[object, Callable[[Record], object]]:
    stats = Stats(capacity)
    return stats, stats.record


def bytes_per_record(
    make: Callable[[int], tuple[object, Callable[[Record], object]]], capacity: int
) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        storage, push = make(capacity)
        for record in realistic_records(capacity + capacity // 4):
            push(record)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del storage
    return (after - before) / capacity


def header() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return (
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit or '?'}, "
        f"python {platform.python_version()}, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Bytes per retained ring record.")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="capacity 100 000")
    args = parser.parse_args()
    capacity = 100_000 if args.quick else args.capacity

    print(header())
    print(
        f"capacity {capacity}, filled with {capacity + capacity // 4} realistic records; "
        f"packed: newest {RECORD_PACKING.hot} as objects, blocks of {RECORD_PACKING.block}"
    )
    old = bytes_per_record(objects, capacity)
    new = bytes_per_record(packed, capacity)
    print(f"objects (main's ring) {old:7.1f} B per retained record")
    print(f"packed                {new:7.1f} B per retained record  ({new / old:.2f}x)")
    print(f"1M records: {old * 1e6 / 2**20:.0f} MiB as objects, {new * 1e6 / 2**20:.0f} MiB packed")


if __name__ == "__main__":
    main()
