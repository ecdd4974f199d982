"""Archive history pages deep in a 1M-row table vs the first page, for every filter.

A ``FinishedRequest`` table of ``--rows`` (default 1M; ``--quick``: 200k) realistic
rows is loaded with raw COPY and ANALYZEd: finish times spread over 30 days (some
sharing a millisecond), ids only roughly in finish order (replicas commit late),
several models, routes, statuses, outcomes, finish reasons, clients and replicas.

Then, for every filter the history page and ``/v1/history`` offer (``--filters all``:
none, a time range, model, route, status, outcome, finish reason, client, replica,
the API's abort reason, and two combinations), three calls of the shared query the
dashboard and API make (``window(...).matching(...)``):

- ``first``: ``newest_first(None, 100)``, the page the history view opens on (the
  baseline of that filter);
- ``older``: ``newest_first(cursor, 100)`` with ``cursor`` the row at 90% of the
  filter's rows in newest-first order (found once, untimed): the "older" link, deep;
- ``newer``: ``oldest_first(cursor, 100)`` from the same row: the "newer" link there.

Calls are interleaved in rounds (order rotating), each timed alone by ``--clock``:
``cpu`` (default) is this thread's CPU plus the PostgreSQL backend's
(``/proc/<pid>/schedstat``), which a shared machine does not inflate; ``wall`` is
elapsed time. Each ratio is the median over rounds of (median deep call ÷ median
first call) in that round. Every query is then EXPLAINed (ANALYZE, BUFFERS) as the
library ran it: server time, shared buffers, indexes used, and whether a Sort or a
bitmap scan crept in (``--plans`` prints every plan). Finally OFFSET paging for
contrast, and the admin changelist's COUNT queries (``--renders 0`` skips it).

The script creates (and finally drops) its own database on the local PostgreSQL.
Run from the repo root::

    PYTHONPATH=. python bench/archive_read.py --quick            # ~1.5 min, 200k rows
    PYTHONPATH=. python bench/archive_read.py [--rows 1000000 --filters all --rounds 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_read"
PAGE = 100
GOAL = 1.2  # issue 13: a deep page within 1.2x of the first, for every filter
# The index names a plan reads rows through, plain, backward or bitmap.
INDEX_USED = re.compile(r"Index (?:Only )?Scan(?: Backward)? (?:using|on) (\w+)")

SERVER_TIME = re.compile(r"Execution Time: ([\d.]+) ms")
BUFFERS = re.compile(r"Buffers: shared hit=(\d+)")
# Plan nodes that make a page's cost grow with its depth or the filter's rows.
NODES = re.compile(r"(Incremental Sort|Sort|Bitmap Heap Scan|Seq Scan)  \(")

DESCRIPTION = "Archive history pages at 90% depth vs the first page, for every filter."


MODELS = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b", "mistral-7b", "phi-4"]
MODEL_WEIGHTS = [50, 25, 15, 9, 1]
ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
ROUTE_WEIGHTS = [80, 15, 5]
FINISH_REASONS = ["stop", "length", "tool_calls"]
FINISH_WEIGHTS = [65, 34, 1]
CLIENTS = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(500)]
CLIENT = CLIENTS[0]
DAY_MS = 86_400_000
END_MS = 1_793_750_400_000  # 2026-11-29
START_MS = END_MS - 30 * DAY_MS


def generate_rows(n: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """``row_values`` tuples of n plausible records, in roughly (not exactly) finish order."""
    from ferrox_stats.archive.rows import Pending, row_values
    from ferrox_stats.core.requests import Record

    rng = random.Random(seed)
    replicas = [f"gpu-{i}" for i in range(8)]
    seqs = dict.fromkeys(replicas, 0)
    keys = ["team-search", "team-chat", "batch-eval", "notebooks", None]
    span_ms = END_MS - START_MS
    at_ms = START_MS  # the 30 days before 2026-11-29
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
        finish: str | None = rng.choices(FINISH_REASONS, FINISH_WEIGHTS)[0]
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
            client=rng.choice(CLIENTS),
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


def one_call_cost(fn: Callable[[], Any], clock: str, backend: int | None) -> float:
    """ms one call costs by ``clock``: elapsed, or this thread's + the backend's CPU."""
    if clock == "wall":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000
    server = oncpu_ns(backend)
    start = time.thread_time_ns()
    fn()
    client = time.thread_time_ns() - start
    return (client + oncpu_ns(backend) - server) / 1e6


def backend_pid() -> int | None:
    """The PostgreSQL server process behind Django's connection, if its CPU is readable."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    return pid if os.path.exists(f"/proc/{pid}/schedstat") else None


def oncpu_ns(pid: int | None) -> int:
    """ns that process ``pid`` has spent on a CPU (Linux schedstat); 0 if unknown."""
    if pid is None:
        return 0
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


@dataclass
class Case:
    """One filter of the history page: its queryset and the deep cursor in it."""

    name: str
    qs: Any
    matched: int = 0
    depth: int = 0
    cursor: Any = None

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {
            "first": lambda: self.qs.newest_first(None, PAGE),
            "older": lambda: self.qs.newest_first(self.cursor, PAGE),
            "newer": lambda: self.qs.oldest_first(self.cursor, PAGE),
        }


def filter_cases(objects: Any, wanted: str) -> list[Case]:
    """Every filter the history page (web/forms.py) and /v1/history (api/filters.py)
    offer, each with a common or a rare value, and two combinations."""
    from ferrox_stats.archive.rows import at_ms_to_datetime

    since, until = (
        at_ms_to_datetime(START_MS + 10 * DAY_MS),
        at_ms_to_datetime(END_MS - 10 * DAY_MS),
    )
    ten_days = objects.window(since, until)
    cases = {
        "none": objects,
        "since/until: 10 of 30 days": ten_days,
        f"model={MODELS[1]}": objects.matching({"model": MODELS[1]}),
        f"model={MODELS[-1]}": objects.matching({"model": MODELS[-1]}),
        f"route={ROUTES[-1]}": objects.matching({"route": ROUTES[-1]}),
        "status=200": objects.matching({"status": 200}),
        "status=429": objects.matching({"status": 429}),
        "outcome=ok": objects.matching({"outcome": "ok"}),
        "outcome=error": objects.matching({"outcome": "error"}),
        "finish_reason=length": objects.matching({"finish_reason": "length"}),
        "finish_reason=tool_calls": objects.matching({"finish_reason": "tool_calls"}),
        f"client={CLIENT}": objects.matching({"client": CLIENT}),
        "replica=gpu-3": objects.matching({"replica": "gpu-3"}),
        "aborted=timeout (API only)": objects.matching({"aborted": "timeout"}),
        f"model={MODELS[-1]} + since/until": ten_days.matching({"model": MODELS[-1]}),
        f"model={MODELS[1]} + outcome=error": objects.matching(
            {"model": MODELS[1], "outcome": "error"}
        ),
    }
    chosen = [
        Case(name, qs)
        for name, qs in cases.items()
        if wanted == "all" or any(word in name for word in wanted.split(","))
    ]
    if not chosen:
        raise SystemExit(f"--filters {wanted!r} names none of: {', '.join(cases)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="200k rows, fewer calls")
    parser.add_argument("--rows", type=int, default=None, help="1M (--quick: 200k)")
    parser.add_argument(
        "--filters", default="all", help="'all', or words naming cases, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=None, help="10 (--quick: 5)")
    parser.add_argument("--calls", type=int, default=None, help="per query a round: 5 (--quick: 3)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--plans", action="store_true", help="print every EXPLAIN plan")
    parser.add_argument("--offset-calls", type=int, default=None, help="3 (--quick: 1)")
    parser.add_argument("--renders", type=int, default=None, help="admin: 3 (--quick: 0)")
    parser.add_argument(
        "--index-cost",
        type=int,
        default=0,
        metavar="ROWS",
        help="finally, COPY ROWS rows with each index dropped in turn: its write cost",
    )
    parser.add_argument(
        "--time-migration",
        action="store_true",
        help="after the load, time migration 0011 back and forwards on the loaded table",
    )
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    parser.add_argument("--database", default=DATABASE, help="created, then dropped")
    args = parser.parse_args()
    quick = args.quick
    defaults = {
        "rows": 200_000 if quick else 1_000_000,
        "rounds": 5 if quick else 10,
        "calls": 3 if quick else 5,
        "offset_calls": 1 if quick else 3,
        "renders": 0 if quick else 3,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    url = create_database(args.server, args.database)
    try:
        run(args, url)
    finally:
        drop_database(args.server, args.database)


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
    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    print(f"{DESCRIPTION}\n{platform_line()}")
    print(
        f"PostgreSQL {pg_major}, {n} rows, page {PAGE}, clock {args.clock}, "
        f"rounds {args.rounds} x {args.calls} calls"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname",
            [FinishedRequest._meta.db_table],
        )
        print("indexes:", ", ".join(row[0] for row in cursor.fetchall()))
    print(f"loaded + VACUUM ANALYZE in {load(url, n):.1f} s")
    if args.time_migration:
        # How long the archive's writers would wait on a plain `migrate` (README,
        # "Upgrading a large archive"): each CREATE INDEX holds a SHARE lock.
        for target in ("0010", "0011"):
            start = time.perf_counter()
            call_command("migrate", "ferrox_stats", target, verbosity=0)
            print(f"migrate ferrox_stats {target}: {time.perf_counter() - start:.1f} s")

    objects = FinishedRequest.objects
    cases = filter_cases(objects, args.filters)
    for case in cases:
        case.matched = case.qs.count()
        # 90% deep, but always with a full page after it (and newer rows before it).
        case.depth = max(PAGE + 1, min(case.matched * 9 // 10, case.matched - PAGE - 1))
        finished_at, pk = case.qs.order_by("-finished_at", "-id").values_list("finished_at", "id")[
            case.depth - 1
        ]
        case.cursor = Cursor(datetime_to_at_ms(finished_at), pk)
        for what, fn in case.calls().items():
            got = len(fn().entries)
            # A short page would time less work, and mean nothing.
            assert got == PAGE, f"{case.name} {what}: {got} rows of {case.matched}"

    backend = backend_pid() if args.clock == "cpu" else None
    if args.clock == "cpu" and backend is None:
        raise SystemExit("--clock cpu needs the PostgreSQL server on this machine (/proc)")
    # per case, per query: every call's cost, and each round's median
    every: dict[str, dict[str, list[float]]] = {c.name: {} for c in cases}
    per_round: dict[str, dict[str, list[float]]] = {c.name: {} for c in cases}
    for r in range(args.rounds):
        for case in cases[r % len(cases) :] + cases[: r % len(cases)]:
            calls = case.calls()
            costs: dict[str, list[float]] = {what: [] for what in calls}
            # Interleave the three queries call by call, so drift hits them alike.
            for _ in range(args.calls):
                for what, fn in calls.items():
                    costs[what].append(one_call_cost(fn, args.clock, backend))
            for what, values in costs.items():
                every[case.name].setdefault(what, []).extend(values)
                per_round[case.name].setdefault(what, []).append(statistics.median(values))

    plans = explain_all(cases, CaptureQueriesContext, connection)
    print(
        f"\n{'filter (page of 100)':<46} {'share':>6} {'depth':>7} "
        f"{'first ms':>8} {'older':>6} {'newer':>6}  server ms first/older/newer"
    )
    worst = 0.0
    for case in cases:
        first = per_round[case.name]["first"]
        ratios = {
            what: statistics.median(
                d / f for d, f in zip(per_round[case.name][what], first, strict=True)
            )
            for what in ("older", "newer")
        }
        worst = max(worst, *ratios.values())
        server = "/".join(
            f"{plans[case.name][w].server_ms:.2f}" for w in ("first", "older", "newer")
        )
        print(
            f"{case.name:<46} {case.matched / n:6.2%} {case.depth:>7} "
            f"{statistics.median(every[case.name]['first']):8.2f} "
            f"{ratios['older']:5.2f}x {ratios['newer']:5.2f}x  {server}"
        )
    print(
        f"worst deep page / first page: {worst:.2f}x "
        f"(goal <= {GOAL}x for every filter: {'met' if worst <= GOAL else 'NOT met'})"
    )

    print(f"\n{'plan (EXPLAIN ANALYZE, BUFFERS)':<52} {'buffers':>7}  nodes and indexes")
    for case in cases:
        for what in ("first", "older", "newer"):
            plan = plans[case.name][what]
            print(f"{case.name + ' ' + what:<52} {plan.buffers:>7}  {plan.summary}")
            if args.plans:
                print("    " + plan.text.replace("\n", "\n    "))

    if args.offset_calls:
        depth = n * 9 // 10

        def offset_page() -> list[dict[str, Any]]:
            qs = objects.order_by("-finished_at", "-id").values(*ENTRY_COLUMNS)
            return list(qs[depth : depth + PAGE])

        cost = statistics.median(
            one_call_cost(offset_page, args.clock, backend) for _ in range(args.offset_calls)
        )
        first = statistics.median(every[cases[0].name]["first"])
        print(
            f"\nOFFSET {depth} (contrast, {cases[0].name}): {cost:.1f} ms = "
            f"{cost / first:.0f}x the first page"
        )
    if args.renders:
        admin_changelist(MODELS[1], args.renders)
    if args.index_cost:
        index_write_cost(url, args.index_cost, max(3, args.rounds // 2))


def index_write_cost(url: str, rows: int, rounds: int) -> None:
    """What each index costs the archive's writes: insert ``rows`` rows into the emptied
    table with every index, and with each ``ferrox_fr_*`` index dropped in turn.

    Each insert is one ``INSERT ... SELECT`` from an unlogged staging table of the
    rows, under ``EXPLAIN (ANALYZE, WAL)``: its WAL bytes are exact whatever else the
    server does (WAL volume is what an index's maintenance writes), and its execution
    time is the server's work. An index's cost is the median over rounds of (every
    index - without it). Runs last: it empties the table.
    """
    from ferrox_stats.archive.rows import COLUMNS
    from ferrox_stats.models import FinishedRequest

    table = FinishedRequest._meta.db_table
    columns = ", ".join(COLUMNS)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE UNLOGGED TABLE staging AS SELECT {columns} FROM {table} LIMIT 0")
        with conn.cursor() as cursor, cursor.copy("COPY staging FROM STDIN") as copy:
            for row in generate_rows(rows, seed=11):
                copy.write_row(row)
        found = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "AND indexname LIKE 'ferrox\\_fr\\_%%' ORDER BY indexname",
            [table],
        ).fetchall()
        definitions = dict(found)
        variants = [None, *definitions]
        wal: dict[str | None, list[float]] = {v: [] for v in variants}
        ms: dict[str | None, list[float]] = {v: [] for v in variants}
        for r in range(rounds):
            for dropped in variants[r % len(variants) :] + variants[: r % len(variants)]:
                if dropped:
                    conn.execute(f"DROP INDEX {dropped}")
                conn.execute(f"TRUNCATE {table}")
                conn.execute("CHECKPOINT")  # no variant inherits another's dirty pages
                result = conn.execute(
                    "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "
                    f"INSERT INTO {table} ({columns}) SELECT {columns} FROM staging"
                ).fetchone()
                plan = result[0][0]  # type: ignore[index]
                wal[dropped].append(plan["Plan"]["WAL Bytes"] / rows)
                ms[dropped].append(plan["Execution Time"])
                if dropped:
                    conn.execute(definitions[dropped])  # the table is empty: instant
        conn.execute(f"TRUNCATE {table}")
        conn.execute("DROP TABLE staging")
    every_wal, every_ms = statistics.median(wal[None]), statistics.median(ms[None])
    print(
        f"\nindex write cost, INSERT of {rows} rows, {rounds} rounds, every index: "
        f"{every_wal:.0f} WAL bytes/row, {every_ms * 1000 / rows:.1f} us/row on the server"
    )
    print(f"{'index':<28} {'WAL B/row':>9} {'share':>6} {'us/row':>7} {'share':>6}  columns")
    for name, definition in definitions.items():
        wal_cost = statistics.median(a - b for a, b in zip(wal[None], wal[name], strict=True))
        ms_cost = statistics.median(a - b for a, b in zip(ms[None], ms[name], strict=True))
        head, _, where = definition.partition(" WHERE ")
        shown = head[head.index("(") :] + (f" WHERE {where}" if where else "")
        print(
            f"{name:<28} {wal_cost:9.1f} {wal_cost / every_wal:6.1%} "
            f"{ms_cost * 1000 / rows:7.2f} {ms_cost / every_ms:6.1%}  {shown}"
        )


@dataclass
class Plan:
    text: str
    server_ms: float
    buffers: int
    summary: str


def explain_all(cases: list[Case], capture: Any, connection: Any) -> dict[str, dict[str, Plan]]:
    """EXPLAIN (ANALYZE, BUFFERS) the exact SQL each call ran (the fastest of 3)."""
    plans: dict[str, dict[str, Plan]] = {}
    for case in cases:
        plans[case.name] = {}
        for what, fn in case.calls().items():
            with capture(connection) as captured:
                fn()
            sql = captured.captured_queries[-1]["sql"]
            found = []
            for _ in range(3):
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                    found.append("\n".join(row[0] for row in cursor.fetchall()))
            timed = [(float(SERVER_TIME.search(t).group(1)), t) for t in found]  # type: ignore[union-attr]
            server_ms, text = min(timed)
            buffers = BUFFERS.search(text)
            nodes = sorted(set(NODES.findall(text)))
            used = sorted(set(INDEX_USED.findall(text)))
            plans[case.name][what] = Plan(
                text,
                server_ms,
                int(buffers.group(1)) if buffers else 0,
                ", ".join(nodes + used),
            )
    return plans


def platform_line() -> str:
    import django

    with open("/proc/loadavg") as f:
        load_average = " ".join(f.read().split()[:3])
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "ferrox_stats", "bench"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", ""
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit}{'+dirty' if dirty else ''}, "
        f"python {platform.python_version()}, Django {django.get_version()}, "
        f"psycopg {psycopg.__version__}, load average {load_average}, {os.cpu_count()} cores"
    )


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
