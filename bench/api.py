"""The REST API through Django: ``/v1/requests`` beside a plain ``JsonResponse``; history pages.

Every request goes through Django's test ``Client`` in-process (no network), with the
test settings' full middleware stack, the same harness for every variant.

Part 1, the ring poll. The process recorder's ring (capacity 1024) is filled through
the tracker with realistic records (a stepped clock gives real-looking latencies;
some aborted, some errors), then ``GET /control/telemetry/v1/requests?since=<total-100>
&limit=100`` (exactly 100 rows) is timed as:

- ``a DRF public``: the endpoint opened to anyone, ``PUBLIC_ENDPOINTS = ["requests"]``:
  the framework's overhead only;
- ``b DRF token``: the endpoint closed, a read token sent as ``Authorization: Bearer``
  (one indexed lookup of the token per request);
- ``c JsonResponse`` (the baseline): a plain Django function view on this module's
  urlconf doing the same ring poll and returning ``JsonResponse(documents.ring_page(page))``
  (the same rows, the same document);
- ``floor``: a view returning a constant ``HttpResponse``: what the harness, URL
  resolution and middleware cost before any view does work.

Prototypes of faster variants (bench-only ``RequestsView`` subclasses; the library is
untouched): the token lookup cached for 10 s, a faster ``entry()``, an orjson renderer
(only when ``orjson`` is importable), fast ``entry()`` + orjson, per-seq cached wire
dicts + orjson, and the cached token + orjson. Every variant's document is checked to
parse to the same value as the baseline's before timing.

Each variant answers ``--requests`` polls per round; rounds interleave the variants,
rotating their order, with gc off while a round is timed; the median round is
reported as µs and requests/s with its ratio to the baseline, by wall time and by CPU
time: this process's plus that of the PostgreSQL backend serving Django's connection
(``/proc/<pid>/schedstat``). On a shared machine wall time includes waiting for a
core; CPU time does not. Both DRF variants
are then run under cProfile (top 15 by cumulative time for one, and a breakdown of
both), and the parts of a poll (ring ``since``, ``page_entries``, the renderers) are
timed alone.

Part 2, history. ``--rows`` (default 1M) rows are COPYed into ``FinishedRequest`` and
VACUUM ANALYZEd, by ``bench/archive_read.py``'s generator and loader. Then, with the
endpoint opened by ``PUBLIC_ENDPOINTS = ["history"]`` and its throttle off, the median
ms of ``GET /control/telemetry/v1/history?limit=100``: the first page (the baseline),
the page at row ~900,000 newest first (its cursor found untimed), ``model=X`` first
and deep pages, ``order=oldest`` first and deep pages; a prototype ``HistoryView``
that skips django-filter when no filter parameter is given (first and deep page);
and the library's ``newest_first()`` alone for the first and the deep page, to show
what HTTP + DRF + the filterset add on top of the query.

The script creates (and finally drops) its own database ``ferrox_bench_api`` on the
local PostgreSQL. Run from the repo root::

    PYTHONPATH=. python bench/api.py [--rows 1000000] [--rounds 30] [--requests 50]
        [--history-rounds 20] [--calls 8]

``--rows 0`` skips part 2.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive_read import MODELS, load
from host import runqueue_ns
from pgdb import create_database, drop_database

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

try:
    import orjson  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # the orjson prototypes are skipped
    orjson = None

SERVER = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "ferrox_bench_api"
PREFIX = "/control/telemetry"
HISTORY_FAST_PATH = "/bench/v1/history"
PAGE = 100

DESCRIPTION = "/v1/requests through DRF vs a plain JsonResponse; history pages at 1M rows."

# This module is ROOT_URLCONF; main() fills it once Django is set up.
urlpatterns: list[Any] = []

# ---------------------------------------------------------------------------------------
# The settings every part starts from (tests.settings' FERROX_STATS, plus these).

BASE_SETTINGS: dict[str, Any] = {
    "REPLICA": "bench",
    "ARCHIVE_SINK": None,
    "RING_CAPACITY": 1024,
    "PUBLIC_ENDPOINTS": [],
    # History is measured unthrottled: DRF's throttle keeps a timestamp list per
    # caller in the cache, which a benchmark's thousands of calls would fill.
    "THROTTLE_RATES": {"ferrox_stats_history": None, "ferrox_stats_ingest": None},
}


def configure(**overrides: Any) -> None:
    """Replace ``settings.FERROX_STATS`` (``conf`` reads it at access time)."""
    from django.conf import settings

    settings.FERROX_STATS = {**BASE_SETTINGS, **overrides}


# ---------------------------------------------------------------------------------------
# Part 1: filling the ring through the tracker, with realistic latencies.


class StepClock:
    """A clock the filler moves by hand, so records carry real-looking latencies."""

    def __init__(self, wall_ms: int) -> None:
        self.now = 10_000.0
        self.wall0 = wall_ms

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return self.wall0 + int((self.now - 10_000.0) * 1000)


ROUTES = ["/v1/chat/completions", "/v1/completions"]
KEYS = ["team-search", "team-chat", "batch-eval", None]


def fill_ring(count: int, seed: int = 11) -> Any:
    """Rebuild the process recorder on a stepped clock and track ``count`` requests."""
    from ferrox_stats import live

    rng = random.Random(seed)
    clock = StepClock(1_793_750_400_000 - 3_600_000)
    recorder = live.reset(clock=clock)
    clients = [f"10.0.{i}.{rng.randint(1, 254)}" for i in range(50)]
    for _ in range(count):
        clock.now += rng.expovariate(20.0)  # ~20 requests/s arrive
        with recorder.track(
            route=rng.choice(ROUTES),
            model=rng.choices(MODELS, [50, 25, 15, 9, 1])[0],
            stream=rng.random() < 0.7,
            request_id=f"chatcmpl-{rng.getrandbits(64):016x}",
            client=rng.choice(clients),
            via_api_key=rng.choice(KEYS),
        ) as t:
            clock.now += rng.uniform(0.0, 0.05)
            t.started()
            roll = rng.random()
            if roll < 0.03:  # a 429/503 before any token
                t.finish(status=rng.choice([429, 503]), error="upstream error")
                continue
            clock.now += rng.uniform(0.02, 0.9)
            completion = rng.randint(1, 1024)
            for _ in range(min(completion, 8)):  # streamed chunks
                t.tokens(completion=max(1, completion // 8))
                clock.now += completion / 8 * rng.uniform(0.008, 0.04)
            if roll < 0.06:
                t.abort("client_disconnect")
            t.finish(
                status=200,
                finish_reason=None if roll < 0.06 else rng.choice(["stop", "stop", "length"]),
                prompt_tokens=rng.randint(8, 8192),
                completion_tokens=completion,
                cached_tokens=rng.choice([0, 0, 256, 1024]),
            )
    return recorder


# ---------------------------------------------------------------------------------------
# Prototypes of a cheaper /v1/requests, built without touching the library.


def fast_page_entries(page: Any) -> list[dict[str, Any]]:
    """``page_entries`` in one ``dict(zip(...))`` per row, derived rates inline."""
    from ferrox_stats.core.requests import DERIVED_FIELDS, RECORD_FIELDS

    keys = ("seq", *RECORD_FIELDS, *DERIVED_FIELDS)
    out: list[dict[str, Any]] = []
    append = out.append
    for seq, r in page.rows:
        tokens, decode_ms = r[7], r[12]  # completion_tokens, decode_ms
        if tokens is None or tokens < 2 or decode_ms is None or decode_ms <= 0:
            append(dict(zip(keys, (seq, *r, None, None), strict=False)))
        else:
            n = tokens - 1
            append(dict(zip(keys, (seq, *r, n * 1000.0 / decode_ms, decode_ms / n), strict=False)))
    return out


_entry_cache: dict[str, dict[int, dict[str, Any]]] = {}


def cached_page_entries(page: Any) -> list[dict[str, Any]]:
    """Wire dicts memoised per (instance, seq): a ring row never changes once pushed."""
    from ferrox_stats.core.requests import entry

    cache = _entry_cache.setdefault(page.instance, {})
    out = []
    for seq, record in page.rows:
        wire = cache.get(seq)
        if wire is None:
            wire = cache[seq] = entry(record, seq)
        out.append(wire)
    if len(cache) > 4096:  # keep it bounded: forget rows older than this page
        oldest = page.rows[0][0] if page.rows else page.next_cursor
        for seq in [s for s in cache if s < oldest]:
            del cache[seq]
    return out


def prototype_views() -> dict[str, tuple[Any, bool]]:
    """Bench-only subclasses of ``RequestsView``, each changing one thing.

    Each maps to (view, whether it is measured with the endpoint public).
    """
    from rest_framework.authentication import SessionAuthentication, get_authorization_header
    from rest_framework.renderers import JSONRenderer
    from rest_framework.response import Response

    from ferrox_stats import documents, live
    from ferrox_stats.api.authentication import BearerTokenAuthentication
    from ferrox_stats.api.views import RequestsView, _ring_page

    def document(page: Any, entries: Any) -> dict[str, Any]:
        if entries is None:
            return documents.ring_page(page)
        return {
            "instance": page.instance,
            "entries": entries(page),
            "next_cursor": page.next_cursor,
            "missed": page.missed,
            "recorded_total": page.recorded_total,
            "reset": page.reset,
        }

    def view(entries: Any = None, renderer: Any = JSONRenderer, auth: Any = None) -> Any:
        class Prototype(RequestsView):
            renderer_classes = [renderer]
            if auth is not None:
                authentication_classes = [auth, SessionAuthentication]

            def get(self, request: Any) -> Response:
                return Response(document(_ring_page(request, live.get_recorder()), entries))

        return Prototype.as_view()

    class CachedBearer(BearerTokenAuthentication):
        """The token lookup remembered for 10 s per Authorization header (revocation
        then takes up to 10 s to bite in each process)."""

        ttl_s = 10.0
        cache: ClassVar[dict[bytes, tuple[float, Any]]] = {}

        def authenticate(self, request: Any) -> Any:
            header = get_authorization_header(request)
            now = time.monotonic()
            hit = self.cache.get(header)
            if hit is not None and hit[0] > now:
                return hit[1]
            result = super().authenticate(request)
            if result is not None:
                self.cache[header] = (now + self.ttl_s, result)
            return result

    views = {
        "token, cached lookup": (view(auth=CachedBearer), False),
        "fast entry()": (view(fast_page_entries), True),
    }
    if orjson is not None:

        class OrjsonRenderer(JSONRenderer):
            """orjson: NaN becomes null (DRF's strict JSON raises), ``?indent`` is ignored."""

            def render(
                self, data: Any, accepted_media_type: Any = None, context: Any = None
            ) -> Any:
                return b"" if data is None else orjson.dumps(data)

        views["orjson renderer"] = (view(renderer=OrjsonRenderer), True)
        views["fast entry() + orjson"] = (view(fast_page_entries, OrjsonRenderer), True)
        views["cached entries + orjson"] = (view(cached_page_entries, OrjsonRenderer), True)
        views["token cached + orjson"] = (view(None, OrjsonRenderer, CachedBearer), False)
    return views


def history_fast_path_view() -> Any:
    """``HistoryView`` that skips django-filter when no filter parameter is present."""
    from rest_framework.exceptions import ValidationError
    from rest_framework.response import Response

    from ferrox_stats.api import views
    from ferrox_stats.api.filters import HistoryFilter
    from ferrox_stats.api.params import clamped_limit
    from ferrox_stats.archive.queries import Cursor
    from ferrox_stats.conf import conf
    from ferrox_stats.models import FinishedRequest

    filter_names = frozenset(HistoryFilter.base_filters)

    class FastPathHistory(views.HistoryView):
        def get(self, request: Any) -> Response:  # HistoryView.get but for the filterset
            order = request.query_params.get("order", "newest")
            if order not in ("newest", "oldest"):
                raise ValidationError({"order": ["order must be 'newest' or 'oldest'."]})
            raw_cursor = request.query_params.get("cursor")
            try:
                cursor = Cursor.decode(raw_cursor) if raw_cursor else None
            except ValueError as exc:
                raise ValidationError({"cursor": [str(exc)]}) from None
            limit = clamped_limit(request, conf.HISTORY_DEFAULT_LIMIT, conf.HISTORY_MAX_PAGE)
            if filter_names.isdisjoint(request.query_params):
                queryset = FinishedRequest.objects.using(conf.ARCHIVE_DATABASE).all()
            else:
                queryset = views._filtered(request, self)
            page = (
                queryset.newest_first(cursor, limit)
                if order == "newest"
                else queryset.oldest_first(cursor, limit)
            )
            next_cursor = page.next_cursor.encode() if page.next_cursor else None
            # Priced as the library's view prices them (each entry's cost).
            entries = views._priced(page.entries)
            return Response({"entries": entries, "next_cursor": next_cursor})

    return FastPathHistory.as_view()


def build_urlconf() -> dict[str, str]:
    """Fill this module's ``urlpatterns``; return each bench-only variant's path."""
    from django.http import HttpResponse, JsonResponse
    from django.urls import include, path

    from ferrox_stats import documents, live

    def plain_requests(request: Any) -> JsonResponse:
        """The baseline: the same ring poll, the same document, no framework."""
        stats = live.get_recorder().stats
        since = int(request.GET.get("since") or 0)
        limit = max(1, min(int(request.GET.get("limit") or 100), stats.max_page))
        return JsonResponse(documents.ring_page(stats.since(since, limit)))

    def floor(request: Any) -> HttpResponse:
        return HttpResponse(b"{}", content_type="application/json")

    paths = {"c JsonResponse": "bench/v1/requests", "floor": "bench/floor"}
    patterns = [
        path("control/telemetry/", include("ferrox_stats.urls")),
        path(paths["c JsonResponse"], plain_requests),
        path(paths["floor"], floor),
    ]
    public = {}
    for i, (name, (view, is_public)) in enumerate(prototype_views().items()):
        paths[name] = f"bench/proto{i}/v1/requests"
        public[name] = is_public
        patterns.append(path(paths[name], view))
    patterns.append(path(HISTORY_FAST_PATH.lstrip("/"), history_fast_path_view()))
    urlpatterns[:] = patterns
    PUBLIC_PROTOTYPES.update(public)
    return {name: "/" + p for name, p in paths.items()}


# Prototype name -> measured with the endpoint public (else with the read token).
PUBLIC_PROTOTYPES: dict[str, bool] = {}


# ---------------------------------------------------------------------------------------
# The harness: interleaved rounds, rotating order, gc off while timed, median round.


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


class Timings:
    """Median ns per call of each variant: wall, this process's CPU, the DB server's CPU.

    On a shared machine the wall time includes waiting for a core; CPU time does not.
    ``server`` is the CPU of the PostgreSQL backend serving Django's connection.
    """

    def __init__(self, names: list[str]) -> None:
        self.wall: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}
        self.server: dict[str, list[float]] = {name: [] for name in names}

    def median(self, kind: str) -> dict[str, float]:
        values: dict[str, list[float]] = getattr(self, kind)
        return {name: statistics.median(v) for name, v in values.items()}


def interleave(
    variants: dict[str, Callable[[], Any]],
    per_round: int,
    rounds: int,
    before: dict[str, Callable[[], None]] | None = None,
    server_pid: int | None = None,
) -> Timings:
    names = list(variants)
    timings = Timings(names)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if before and name in before:
                before[name]()
            call = variants[name]
            gc.collect()
            gc.disable()
            try:
                start_server = oncpu_ns(server_pid)
                start_cpu = time.process_time_ns()
                start = time.perf_counter_ns()
                for _ in range(per_round):
                    call()
                elapsed = time.perf_counter_ns() - start
                elapsed_cpu = time.process_time_ns() - start_cpu
                elapsed_server = oncpu_ns(server_pid) - start_server
            finally:
                gc.enable()
            timings.wall[name].append(elapsed / per_round)
            timings.cpu[name].append(elapsed_cpu / per_round)
            timings.server[name].append(elapsed_server / per_round)
    return timings


def getter(client: Any, url: str, headers: dict[str, str] | None = None) -> Callable[[], Any]:
    def call() -> Any:
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            raise AssertionError(f"{url}: {response.status_code} {response.content[:200]!r}")
        return response

    return call


# ---------------------------------------------------------------------------------------
# Part 1.


def part_requests(args: argparse.Namespace) -> None:
    from django.test import Client

    from ferrox_stats import tokens

    configure()
    recorder = fill_ring(1024 + 300)  # wrapped: the ring holds its last 1024
    paths = build_urlconf()
    total = recorder.stats.recorded_total
    query = f"?since={total - PAGE}&limit={PAGE}"
    _, secret = tokens.issue("bench-reader", read=True)
    bearer = {"Authorization": f"Bearer {secret}"}

    client = Client()
    drf_url = f"{PREFIX}/v1/requests{query}"
    variants: dict[str, Callable[[], Any]] = {
        "a DRF public": getter(client, drf_url),
        "b DRF token": getter(client, drf_url, bearer),
        "c JsonResponse": getter(client, paths["c JsonResponse"] + query),
        "floor": getter(client, paths["floor"]),
    }

    def public() -> None:
        configure(PUBLIC_ENDPOINTS=["requests"])

    def closed() -> None:
        configure()

    before = {name: public for name in variants}
    before["b DRF token"] = closed
    prototypes = list(PUBLIC_PROTOTYPES)
    for name in prototypes:
        is_public = PUBLIC_PROTOTYPES[name]
        variants[name] = getter(client, paths[name] + query, None if is_public else bearer)
        before[name] = public if is_public else closed

    # Same rows, same document, before anything is timed; the closed endpoint refuses.
    closed()
    assert client.get(drf_url).status_code in (401, 403)
    expected = None
    sizes = {}
    for name, call in variants.items():
        before[name]()
        if name == "floor":
            call()
            continue
        body = call().content
        sizes[name] = len(body)
        doc = json.loads(body)
        assert len(doc["entries"]) == PAGE, (name, len(doc["entries"]))
        expected = expected or doc
        assert doc == expected, f"{name} serves a different document"
    # Warm up every path (imports, first queries, caches) untimed.
    for name, call in variants.items():
        before[name]()
        for _ in range(20):
            call()

    print(
        f"\n## Part 1: GET {PREFIX}/v1/requests{query} (100 rows of {total}, ring 1024)\n"
        f"document: {sizes['a DRF public']} bytes from DRF, {sizes['c JsonResponse']} bytes "
        f"from JsonResponse (its separators have spaces); "
        f"{args.requests} requests/round x {args.rounds} rounds"
    )
    pid = backend_pid()
    timings = interleave(variants, args.requests, args.rounds, before, pid)
    assert backend_pid() == pid, "Django's connection was reopened mid-run"
    ns, cpu, server = timings.median("wall"), timings.median("cpu"), timings.median("server")
    both = {name: cpu[name] + server[name] for name in ns}
    base, base_both = ns["c JsonResponse"], both["c JsonResponse"]
    print(
        "\n| variant | wall µs / request | requests/s | throughput ÷ JsonResponse "
        "| CPU µs: Python + PostgreSQL | ÷ JsonResponse, by CPU |"
        "\n|---|---:|---:|---:|---:|---:|"
    )
    for name in ["a DRF public", "b DRF token", "c JsonResponse", "floor", *prototypes]:
        value = ns[name]
        print(
            f"| {name} | {value / 1000:.0f} | {1e9 / value:.0f} | {base / value:.2f}x "
            f"| {cpu[name] / 1000:.0f} + {server[name] / 1000:.0f} "
            f"| {base_both / both[name]:.2f}x |"
        )
    for name in ("a DRF public", "b DRF token"):
        by_wall, by_cpu = base / ns[name], base_both / both[name]
        print(
            f"goal >= 0.8x, {name}: by wall time {by_wall:.2f}x "
            f"({'met' if by_wall >= 0.8 else 'NOT met'}), by CPU {by_cpu:.2f}x "
            f"({'met' if by_cpu >= 0.8 else 'NOT met'})"
        )

    profile_polls(args, variants, before)
    poll_parts(args, recorder, total)
    token_parts(args, secret)


def token_parts(args: argparse.Namespace, secret: str) -> None:
    """What one token check costs, and cheaper ways to run the same lookup."""
    from django.db import connection

    from ferrox_stats import tokens
    from ferrox_stats.models import ApiToken

    digest = tokens.hash_secret(secret)
    active = ApiToken.objects.active()

    def raw_sql() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, secret_hash, can_read, can_ingest, replica, last_used_at"
                " FROM ferrox_stats_apitoken WHERE secret_hash = %s AND revoked_at IS NULL",
                [digest],
            )
            return cursor.fetchone()

    def select_1() -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone()

    lookups: dict[str, Callable[[], Any]] = {
        "tokens.check (the library)": lambda: tokens.check(secret),
        "its query: .filter(secret_hash=).first()": lambda: active.filter(
            secret_hash=digest
        ).first(),
        "the same without Meta.ordering: .order_by()[:1]": lambda: list(
            active.filter(secret_hash=digest).order_by()[:1]
        ),
        "the same row by raw SQL (cursor.execute)": raw_sql,
        "SELECT 1 (a round trip, nothing else)": select_1,
    }
    assert tokens.check(secret) is not None and raw_sql() is not None
    pid = backend_pid()
    timings = interleave(lookups, 100, args.rounds, server_pid=pid)
    wall, cpu, server = timings.median("wall"), timings.median("cpu"), timings.median("server")
    print("\nOne token lookup, no HTTP:\n")
    print("| lookup | wall µs | CPU µs: Python + PostgreSQL |\n|---|---:|---:|")
    for name in lookups:
        print(
            f"| {name} | {wall[name] / 1000:.0f} "
            f"| {cpu[name] / 1000:.0f} + {server[name] / 1000:.0f} |"
        )


# Where a profiled poll spends its time: (label, path suffix, function name).
BREAKDOWN = [
    ("whole request (test Client included)", "bench/api.py", "call"),
    ("Django handler: middleware, view, rendering", "django/core/handlers/base.py", "get_response"),
    ("  DRF APIView.dispatch", "rest_framework/views.py", "dispatch"),
    ("    initialize_request", "rest_framework/views.py", "initialize_request"),
    ("    initial (negotiation, auth, permissions)", "rest_framework/views.py", "initial"),
    ("      token check (tokens.check)", "ferrox_stats/tokens.py", "check"),
    ("    RequestsView.get (ring poll + document)", "ferrox_stats/api/views.py", "get"),
    ("      page_entries (entry() x 100)", "ferrox_stats/core/requests.py", "page_entries"),
    ("    finalize_response", "rest_framework/views.py", "finalize_response"),
    (
        "  Response.rendered_content (JSONRenderer)",
        "rest_framework/response.py",
        "rendered_content",
    ),
    ("    json encoding (JSONEncoder.iterencode)", "json/encoder.py", "iterencode"),
]


def profile_polls(
    args: argparse.Namespace,
    variants: dict[str, Callable[[], Any]],
    before: dict[str, Callable[[], None]],
) -> None:
    """The DRF variants under cProfile: top 15 by cumulative time, and a breakdown."""
    found: dict[str, dict[str, float]] = {}
    for name in ("a DRF public", "b DRF token"):
        before[name]()
        profiler = cProfile.Profile()
        call = variants[name]
        profiler.enable()
        for _ in range(args.profile):
            call()
        profiler.disable()
        if name == "a DRF public":
            out = io.StringIO()
            top = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative")
            top.print_stats(15)
            print(f"\ncProfile, '{name}' x {args.profile}, top 15 by cumulative time:")
            lines = out.getvalue().splitlines()
            start = next(i for i, line in enumerate(lines) if "ncalls" in line)
            print("\n".join(line.rstrip() for line in lines[start:] if line.strip()))
        found[name] = {}
        raw = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        for label, suffix, function in BREAKDOWN:
            cumulative = sum(
                ct
                for (filename, _, fn), (_, _, _, ct, _) in raw.items()
                if fn == function and filename.replace(os.sep, "/").endswith(suffix)
            )
            found[name][label] = cumulative / args.profile * 1e6
    print(f"\nWhere a poll's time goes (cProfile, µs per request, {args.profile} requests each;")
    print("profiling inflates Python-heavy parts, so compare shares, not absolutes;")
    print("each · nests the row inside the nearest shallower row above it):\n")
    print("| part | a DRF public | share | b DRF token | share |\n|---|---:|---:|---:|---:|")
    for label, _, _ in BREAKDOWN:
        cells = []
        for name in ("a DRF public", "b DRF token"):
            value = found[name][label]
            whole = found[name][BREAKDOWN[0][0]]
            cells += [f"{value:.0f}", f"{100 * value / whole:.0f}%"]
        depth = (len(label) - len(label.lstrip())) // 2
        print(f"| {'· ' * depth}{label.strip()} | {' | '.join(cells)} |")


def rounded_floats(doc: Any) -> Any:
    """The document with every float rounded to 3 decimals (µs), for a size/speed contrast."""
    if isinstance(doc, dict):
        return {k: rounded_floats(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [rounded_floats(v) for v in doc]
    return round(doc, 3) if isinstance(doc, float) else doc


def poll_parts(args: argparse.Namespace, recorder: Any, total: int) -> None:
    """The parts of one poll timed alone (no HTTP): median µs per call."""
    from django.core.serializers.json import DjangoJSONEncoder
    from rest_framework.renderers import JSONRenderer

    from ferrox_stats import documents
    from ferrox_stats.core.requests import page_entries

    page = recorder.stats.since(total - PAGE, PAGE)
    doc = documents.ring_page(page)
    short = rounded_floats(doc)
    renderer = JSONRenderer()
    parts: dict[str, Callable[[], Any]] = {
        "Stats.since (100 rows)": lambda: recorder.stats.since(total - PAGE, PAGE),
        "page_entries (library entry())": lambda: page_entries(page),
        "fast_page_entries (prototype)": lambda: fast_page_entries(page),
        "DRF JSONRenderer.render": lambda: renderer.render(doc, "application/json", {}),
        "json.dumps, DjangoJSONEncoder (JsonResponse)": lambda: json.dumps(
            doc, cls=DjangoJSONEncoder
        ),
        "DRF JSONRenderer.render, floats rounded to 3 places": lambda: renderer.render(
            short, "application/json", {}
        ),
    }
    assert fast_page_entries(page) == page_entries(page)
    if orjson is not None:
        parts["orjson.dumps"] = lambda: orjson.dumps(doc)
    part_ns = interleave(parts, 60, args.rounds).median("wall")
    sizes = {
        "full floats": len(renderer.render(doc)),
        "3 places": len(renderer.render(short)),
    }
    print(f"\nThe parts of one 100-row poll, no HTTP (DRF document bytes: {sizes}):\n")
    print("| part | µs / call |\n|---|---:|")
    for name, value in part_ns.items():
        print(f"| {name} | {value / 1000:.0f} |")


# ---------------------------------------------------------------------------------------
# Part 2.


def part_history(args: argparse.Namespace, url: str) -> None:
    from django.test import Client

    from ferrox_stats.archive.queries import Cursor
    from ferrox_stats.archive.rows import datetime_to_at_ms
    from ferrox_stats.models import FinishedRequest

    n = args.rows
    print(f"\n## Part 2: history, {n} rows")
    print(f"loaded (COPY) + VACUUM ANALYZE in {load(url, n):.1f} s")
    configure(PUBLIC_ENDPOINTS=["history"])
    objects = FinishedRequest.objects
    depth = n * 9 // 10

    def cursor_at(qs: Any, row: int) -> str:
        """The cursor of the row-th row (1-based) of qs: found once, untimed."""
        finished_at, pk = qs.values_list("finished_at", "id")[row - 1]
        return Cursor(datetime_to_at_ms(finished_at), pk).encode()

    model = MODELS[1]  # 25% of rows
    of_model = objects.matching({"model": model})
    model_depth = of_model.count() * 9 // 10
    newest = cursor_at(objects.order_by("-finished_at", "-id"), depth)
    oldest = cursor_at(objects.order_by("finished_at", "id"), depth)
    model_deep = cursor_at(of_model.order_by("-finished_at", "-id"), model_depth)

    client = Client()
    base = f"{PREFIX}/v1/history?limit={PAGE}"
    http = {
        "first page": base,
        f"page at {depth}": f"{base}&cursor={newest}",
        f"model={model} first page": f"{base}&model={model}",
        f"model={model} at {model_depth}": f"{base}&model={model}&cursor={model_deep}",
        "order=oldest first page": f"{base}&order=oldest",
        f"order=oldest at {depth}": f"{base}&order=oldest&cursor={oldest}",
    }
    variants: dict[str, Callable[[], Any]] = {k: getter(client, v) for k, v in http.items()}
    fast = f"{HISTORY_FAST_PATH}?limit={PAGE}"
    variants["first page, no filterset (prototype)"] = getter(client, fast)
    variants[f"page at {depth}, no filterset (prototype)"] = getter(
        client, f"{fast}&cursor={newest}"
    )
    deep_cursor = Cursor.decode(newest)
    variants["newest_first() alone, first page"] = lambda: objects.newest_first(None, PAGE)
    variants[f"newest_first() alone, at {depth}"] = lambda: objects.newest_first(deep_cursor, PAGE)
    # Every page is a full one, and the deep one starts right after its cursor.
    for name, call in variants.items():
        result = call()
        got = result.json()["entries"] if hasattr(result, "json") else result.entries
        assert len(got) == PAGE, (name, len(got))
    assert (
        variants["first page"]().json() == variants["first page, no filterset (prototype)"]().json()
    )
    deep = variants[f"page at {depth}"]().json()["entries"]
    assert (deep[0]["at_ms"], deep[0]["id"]) < (deep_cursor.at_ms, deep_cursor.id)
    for call in variants.values():
        for _ in range(3):
            call()

    pid = backend_pid()
    timings = interleave(variants, args.calls, args.history_rounds, server_pid=pid)
    assert backend_pid() == pid, "Django's connection was reopened mid-run"
    ns, cpu, server = timings.median("wall"), timings.median("cpu"), timings.median("server")
    first = ns["first page"]
    print(f"{args.calls} calls/round x {args.history_rounds} rounds; ratios to the HTTP first page")
    print(
        "\n| GET /v1/history?limit=100 … | median ms | ÷ first page "
        "| CPU ms: Python + PostgreSQL |\n|---|---:|---:|---:|"
    )
    for name, value in ns.items():
        print(
            f"| {name} | {value / 1e6:.2f} | {value / first:.2f}x "
            f"| {cpu[name] / 1e6:.2f} + {server[name] / 1e6:.2f} |"
        )
    pairs = [
        ("newest first", "first page", f"page at {depth}"),
        (f"model={model}", f"model={model} first page", f"model={model} at {model_depth}"),
        ("order=oldest", "order=oldest first page", f"order=oldest at {depth}"),
    ]
    both = {name: cpu[name] + server[name] for name in ns}
    for label, shallow, deep_name in pairs:
        print(
            f"deep/first, {label}: {ns[deep_name] / ns[shallow]:.2f}x by wall time, "
            f"{both[deep_name] / both[shallow]:.2f}x by CPU"
        )
    overhead = (first - ns["newest_first() alone, first page"]) / 1e6
    print(f"HTTP + DRF + filterset on top of the query, first page: {overhead:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rows", type=int, default=1_000_000, help="archive rows; 0 skips")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=50, help="polls per variant per round")
    parser.add_argument("--calls", type=int, default=8, help="history calls per round")
    parser.add_argument("--history-rounds", type=int, default=20)
    parser.add_argument("--profile", type=int, default=500, help="polls under cProfile")
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()

    url = create_database(args.server, DATABASE)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connection

        settings.ROOT_URLCONF = __name__
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        waited_before = runqueue_ns()
        print(
            f"python {platform.python_version()}, PostgreSQL {connection.pg_version // 10000}, "  # type: ignore[attr-defined]
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
            f"orjson {'yes' if orjson is not None else 'not installed: prototypes skipped'}"
        )
        part_requests(args)
        if args.rows > 0:
            part_history(args, url)
        wall = time.perf_counter() - started
        waited = (runqueue_ns() - waited_before) / 1e9
        print(
            f"\ntotal {wall:.0f} s, load average now {os.getloadavg()[0]:.1f}; this process "
            f"waited {waited:.0f} s ({100 * waited / wall:.0f}% of the run) for a free core"
        )
    finally:
        drop_database(args.server, DATABASE)


if __name__ == "__main__":
    main()
