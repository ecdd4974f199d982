"""Archive read latency at 1M rows: keyset pages deep in the table vs the first page.

A ``FinishedRequest`` table of ``--rows`` (default 1M) realistic rows is loaded with
raw COPY and ANALYZEd: finish times spread over 30 days (some sharing a millisecond),
ids only roughly in finish order (replicas commit late), several models, routes,
statuses, outcomes, clients and replicas. Then, each call timed on its own and the
median reported in ms with its ratio to the baseline:

- ``first page`` (the baseline): ``FinishedRequest.objects.newest_first(None, 100)``.
- ``deep page``: ``newest_first(cursor, 100)`` where ``cursor`` is row #900,000 in
  newest-first order (found once, untimed); the same pair for ``oldest_first``.
- ``OFFSET 900k``: ``order_by("-finished_at", "-id").values(...)[900000:900100]``,
  the paging keyset replaces, for contrast.
- ``model=X`` first and deep (90% of X's rows) keyset pages via ``matching()``.

The deep newest-first query is EXPLAINed (ANALYZE, BUFFERS), and the script says
whether it uses the (finished_at, id) index. Finally, if ``ferrox_stats.admin``
registers ``FinishedRequest``, the admin changelist is rendered with Django's test
``Client`` as a superuser: time per render and every COUNT query it issued, flagging
any exact unbounded ``COUNT(*)`` over the table.

The script creates (and finally drops) its own database on the local PostgreSQL.
Run from the repo root::

    PYTHONPATH=. python bench/archive_read.py [--rows N --calls C]
"""

from __future__ import annotations

import argparse
import platform
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_read"
PAGE = 100
KEYSET_INDEX = "ferrox_fr_finished_id"
# The index names a plan reads rows through, plain, backward or bitmap.
INDEX_USED = re.compile(r"Index (?:Only )?Scan(?: Backward)? (?:using|on) (\w+)")

DESCRIPTION = "Archive keyset pages at depth vs the first page, and the admin changelist."


MODELS = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b", "mistral-7b", "phi-4"]
MODEL_WEIGHTS = [50, 25, 15, 9, 1]
ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
ROUTE_WEIGHTS = [80, 15, 5]


def generate_rows(n: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """``row_values`` tuples of n plausible records, in roughly (not exactly) finish order."""
    from ferrox_stats.archive.rows import Pending, row_values
    from ferrox_stats.core.requests import Record

    rng = random.Random(seed)
    replicas = [f"gpu-{i}" for i in range(8)]
    seqs = dict.fromkeys(replicas, 0)
    clients = [f"10.{i // 250}.{i % 250}.{rng.randint(1, 254)}" for i in range(1000)]
    keys = ["team-search", "team-chat", "batch-eval", "notebooks", None]
    span_ms = 30 * 86_400_000
    at_ms = 1_793_750_400_000 - span_ms  # the 30 days before 2026-11-29
    chunk: list[tuple[Any, ...]] = []
    for i in range(n):
        # Exponential gaps average out to the 30-day span; ~5% share a millisecond.
        if rng.random() >= 0.05:
            at_ms += int(rng.expovariate(n / span_ms)) + 1
        replica = rng.choice(replicas)
        prompt = rng.randint(8, 8192)
        completion = rng.randint(1, 2048)
        ttft, queue = rng.uniform(20.0, 900.0), rng.uniform(0.0, 50.0)
        decode = completion * rng.uniform(8.0, 40.0)
        roll = rng.random()
        status = 200
        aborted: str | None = None
        error: str | None = None
        finish: str | None = rng.choice(["stop", "stop", "length"])
        if roll < 0.03:
            aborted, finish = rng.choice(["client_disconnect", "timeout", "explicit"]), None
        elif roll < 0.06:
            status, error, finish = rng.choice([400, 429, 500, 503]), "upstream error", None
        record = Record(
            request_id=f"chatcmpl-{i:010d}",
            at_ms=at_ms,
            route=rng.choices(ROUTES, ROUTE_WEIGHTS)[0],
            model=rng.choices(MODELS, MODEL_WEIGHTS)[0],
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
            client=rng.choice(clients),
            via_api_key=rng.choice(keys),
            replica=replica,
        )
        chunk.append(row_values(Pending(seqs[replica], record, f"{replica}/1")))
        seqs[replica] += 1
        # Shuffle within small chunks: ids then follow finish order only roughly.
        if len(chunk) == 64:
            rng.shuffle(chunk)
            yield from chunk
            chunk.clear()
    rng.shuffle(chunk)
    yield from chunk


def load(url: str, n: int) -> float:
    from ferrox_stats.archive.rows import COLUMNS

    start = time.perf_counter()
    with psycopg.connect(url) as conn:
        with conn.cursor() as cursor:
            sql = f"COPY ferrox_stats_finishedrequest ({', '.join(COLUMNS)}) FROM STDIN"
            with cursor.copy(sql) as copy:
                for row in generate_rows(n):
                    copy.write_row(row)
        conn.commit()
        conn.autocommit = True
        # Fresh statistics, so the planner sees the table it will really query.
        conn.execute("VACUUM ANALYZE ferrox_stats_finishedrequest")
    return time.perf_counter() - start


def timed(fn: Callable[[], Any], calls: int) -> list[float]:
    """Per-call wall times in ms."""
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--depth", type=int, default=None, help="deep page row (0.9 x rows)")
    parser.add_argument("--calls", type=int, default=300, help="calls per keyset query")
    parser.add_argument("--offset-calls", type=int, default=7, help="calls of the OFFSET query")
    parser.add_argument("--renders", type=int, default=5, help="admin changelist renders")
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
    from django.test.utils import CaptureQueriesContext

    from ferrox_stats.archive.queries import ENTRY_COLUMNS, Cursor
    from ferrox_stats.archive.rows import datetime_to_at_ms
    from ferrox_stats.models import FinishedRequest

    call_command("migrate", verbosity=0)
    n = args.rows
    depth = args.depth or n * 9 // 10
    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    print(
        f"python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"PostgreSQL {pg_major}, {n} rows, page {PAGE}, depth {depth}"
    )
    print(f"loaded + VACUUM ANALYZE in {load(url, n):.1f} s")

    objects = FinishedRequest.objects

    def cursor_at(qs: Any, row: int) -> Cursor:
        """The keyset cursor of the row-th row (1-based) of qs: found once, untimed."""
        finished_at, pk = qs.values_list("finished_at", "id")[row - 1]
        return Cursor(datetime_to_at_ms(finished_at), pk)

    newest = cursor_at(objects.order_by("-finished_at", "-id"), depth)
    oldest = cursor_at(objects.order_by("finished_at", "id"), depth)
    # A common model (25% of rows) and a rare one (1%): the planner may pick
    # different indexes for them.
    model, rare = MODELS[1], MODELS[-1]
    of_model, of_rare = objects.matching({"model": model}), objects.matching({"model": rare})
    # 90% deep, but always with a full page after it (small --rows runs).
    model_depth = max(1, min(of_model.count() * 9 // 10, of_model.count() - PAGE - 1))
    model_deep = cursor_at(of_model.order_by("-finished_at", "-id"), model_depth)
    rare_depth = max(1, min(of_rare.count() * 9 // 10, of_rare.count() - PAGE - 1))
    rare_deep = cursor_at(of_rare.order_by("-finished_at", "-id"), rare_depth)

    def offset_page() -> list[dict[str, Any]]:
        qs = objects.order_by("-finished_at", "-id").values(*ENTRY_COLUMNS)
        return list(qs[depth : depth + PAGE])

    queries: dict[str, Callable[[], Any]] = {
        "first page, newest_first": lambda: objects.newest_first(None, PAGE),
        f"page at {depth}, newest_first": lambda: objects.newest_first(newest, PAGE),
        "first page, oldest_first": lambda: objects.oldest_first(None, PAGE),
        f"page at {depth}, oldest_first": lambda: objects.oldest_first(oldest, PAGE),
        f"model={model} first page": lambda: of_model.newest_first(None, PAGE),
        f"model={model} at {model_depth}": lambda: of_model.newest_first(model_deep, PAGE),
        f"model={rare} first page": lambda: of_rare.newest_first(None, PAGE),
        f"model={rare} at {rare_depth}": lambda: of_rare.newest_first(rare_deep, PAGE),
        f"OFFSET {depth} (contrast)": offset_page,
    }
    # Every keyset page must be a full one, or its timing means nothing.
    for name, fn in queries.items():
        page = fn()
        got = len(page.entries) if hasattr(page, "entries") else len(page)
        assert got == PAGE, f"{name}: {got} rows"

    names = list(queries)
    ms: dict[str, list[float]] = {name: [] for name in names}
    rounds = 10
    for r in range(rounds):
        # Interleave in rounds, rotating the order, so drift hits every query alike.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name.startswith("OFFSET"):
                if r < args.offset_calls:
                    ms[name] += timed(queries[name], 1)
            else:
                ms[name] += timed(queries[name], max(1, args.calls // rounds))
    base_name = names[0]
    base = statistics.median(ms[base_name])
    print(f"{'query (limit 100)':<40} {'median ms':>10} {'vs first page':>14} {'calls':>6}")
    for name in names:
        value = statistics.median(ms[name])
        print(f"{name:<40} {value:10.2f} {value / base:13.2f}x {len(ms[name]):>6}")
    deep = statistics.median(ms[names[1]]) / base
    print(f"deep newest_first / first page: {deep:.2f}x (goal <= 1.5x)")

    # EXPLAIN exactly the SQL the library ran for the deep page.
    plans = {}
    for name in names[:-1]:  # every keyset query
        with CaptureQueriesContext(connection) as captured:
            queries[name]()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + captured.captured_queries[-1]["sql"])
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
    print(f"\nEXPLAIN (ANALYZE, BUFFERS) {names[1]}:\n{plans[names[1]]}")
    # The server's share of each call: the rest of the median above is Python
    # (building the query, decoding rows, turning them into wire dicts).
    print(f"{'keyset query':<40} {'server ms':>9}  indexes used")
    for name, plan in plans.items():
        used = sorted(set(INDEX_USED.findall(plan)))
        server = re.search(r"Execution Time: ([\d.]+) ms", plan)
        server_ms = float(server.group(1)) if server else float("nan")
        print(f"{name:<40} {server_ms:9.3f}  {', '.join(used) or 'none'}")
    uses = KEYSET_INDEX in plans[names[1]]
    print(f"deep keyset page uses the (finished_at, id) index {KEYSET_INDEX}: {uses}")

    admin_changelist(model, args.renders)


def admin_changelist(model: str, renders: int) -> None:
    """Render the FinishedRequest changelist as a superuser; report time and COUNTs."""
    from django.contrib import admin
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from ferrox_stats.models import FinishedRequest

    if not admin.site.is_registered(FinishedRequest):
        print("\nadmin: FinishedRequest is not registered (no ferrox_stats/admin.py): skipped")
        return
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    changelist = reverse("admin:ferrox_stats_finishedrequest_changelist")
    table = FinishedRequest._meta.db_table
    # The plain changelist, and one filtered the way the admin's filter links do.
    for url in (changelist, f"{changelist}?model={model}"):
        client.get(url)  # warm up: templates, first-use imports
        ms, counts = [], []
        for _ in range(renders):
            with CaptureQueriesContext(connection) as captured:
                start = time.perf_counter()
                response = client.get(url)
                ms.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, (url, response.status_code)
            counts = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
            total = len(captured.captured_queries)
        print(
            f"\nadmin {url}: {statistics.median(ms):.1f} ms/render (median of {renders}), "
            f"{total} queries, {len(counts)} COUNT"
        )
        unbounded = 0
        for sql in counts:
            # A LIMIT inside bounds the count; without one it reads every matching row:
            # the whole table when nothing narrows it (WHERE).
            upper = sql.upper()
            if table not in sql or "LIMIT" in upper:
                kind = "bounded"
            elif "WHERE" in upper:
                kind = "EXACT, filtered"
            else:
                kind, unbounded = "EXACT, UNBOUNDED", unbounded + 1
            print(f"  [{kind}] {sql}")
        print(f"  exact unbounded COUNT(*) over {table}: {unbounded or 'none'}")


if __name__ == "__main__":
    main()
