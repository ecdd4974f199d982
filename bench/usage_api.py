"""The usage API over 30 days at hour buckets, with a short and a 10x longer rollup history.

Issue 14: a usage answer for a 30-day range at hour buckets within 100 ms however much
is archived, and growing with buckets, not with the archive (goal: the answer over a
10x larger history within 1.2x). The usage API reads only ``ferrox_stats_rollup``
(``tests/api/test_usage.py`` pins that it never touches the archive's table), so what
grows with the archive is the rollup table's history: the rollups outlive the archive's
retention. This bench loads, with COPY, rollups as an archive of ``--cells`` full groups
(model x route x replica x key x outcome) per hour and ``--minute-cells`` per minute
would leave them, over ``--days`` (the short history, the archive's 30 days of about
1M requests) and over 10x as many days (about 10M requests), with realistic latency
distributions (``core.distribution`` texts of a few hundred synthetic requests each).
Each bucket also gets the merged rows the writer keeps (``Rollup.level``): one per value
present of each label (model, key, replica, route, outcome), one in total, and one per
pair of a label and the model present (counters only, as the writer keeps them), their
counters the sums of the bucket's groups, their distributions drawn from a pool of
texts each merged from as many group texts (20 per model, 100 in total, 5 per key...)
as a real merged row holds: the size a read parses, not the exact merge of that
bucket's groups (merging each bucket's would make the load hours long).
The merged rows also get their day rows (a pool of texts each merged from 24 merged
hour texts) and every merged row its stored percentiles, as the writer keeps them.

Every answer is priced by ``PRICES``: 50 models with two prices each, the five served
ones changing price within the range asked.

Each history is loaded into a database of its own; then the last 30 days are asked
of both, interleaved in rounds (order rotating; each call asked of the two histories
back to back, which first alternating by round), each call timed alone (wall clock,
the database on this machine), so that the growth is a ratio within a round, not the
drift of the machine between two phases:

- ``usage()`` ungrouped, by model, by key, by key and model (``archive.usage.usage``,
  what the views call), and ``top`` keys by tokens (``per_bucket=False``), with and
  without latency percentiles;
- whole requests through Django's test client with a read token (parsing, the
  query, JSON or CSV rendering): ``v1/usage`` by model (JSON, with latency, CSV),
  ungrouped with all three latencies, by key at day buckets (with latency too), by
  replica with latency, and ``v1/usage/top``.

``--gc-freeze`` freezes the process's objects (``gc.freeze()``) before the rounds, as a
host's workers may (README's "Serving"); without it the collector is Python's default.
Printed: each call's median ms on each history, the 10x / 1x ratio (median of
per-round ratios), rows answered, and how many of its timed calls on each history a
full garbage collection fell in (left on, as in a server: tens of ms each, the count
says when one moved a median; an answer's cells are columns, not an object each, since
the eighth pass, so they no longer bring them on); an answer of
more rows than ``USAGE_MAX_ROWS`` is one the API refuses (a 400), so the headline is
the slowest answer the API gives, beside the slowest ``usage()`` of any size. Creates
and drops its two databases (about 5 and 50 GB at the full size; ``--keep`` leaves
them for a later ``--loaded`` run). Run from the repo root::

    PYTHONPATH=.:bench python bench/usage_api.py --quick     # ~15 min
    PYTHONPATH=.:bench python bench/usage_api.py [--cells 100 --days 30 --rounds 11]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pgdb import SERVER, create_database, drop_database

DATABASE = "ferrox_bench_usage"
GOAL_MS = 100.0
GOAL_GROWTH = 1.2
END = datetime(2026, 11, 29, tzinfo=UTC)
MODELS = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-32b", "mistral-7b", "phi-4"]
ROUTES = ["/v1/chat/completions", "/v1/completions"]
REPLICAS = [f"gpu-{i}" for i in range(4)]
KEYS = [f"team-{i:02d}" for i in range(20)]
OUTCOMES = ["ok", "ok", "ok", "error", "aborted"]
# A platform's price table, not five lines: each served model's price changed once in
# the range asked (mid-month, on a whole hour), and 45 catalogue models priced that
# serve nothing here (a price lookup must not cost per price: the CASE it replaced did).
PRICES = {
    **{
        f"catalogue-model-{i:02d}": [
            {"from": "2026-01-01", "input": 0.1, "output": 0.3},
            {"from": "2026-06-01", "input": 0.08, "output": 0.25, "cached": 0.02},
        ]
        for i in range(45)
    },
    **{
        model: [
            {"from": "2026-01-01", "input": 0.25, "output": 0.75},
            {"from": "2026-11-15T13:00Z", "input": 0.2, "output": 0.6, "cached": 0.05},
        ]
        for model in MODELS
    },
}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--days", type=int, default=30, help="the short history (days)")
    parser.add_argument("--cells", type=int, default=None, help="groups per hour (100)")
    parser.add_argument("--minute-cells", type=int, default=None, help="groups per minute (10)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (11; quick 3)")
    parser.add_argument("--quick", action="store_true", help="fewer cells and rounds")
    parser.add_argument(
        "--keep", action="store_true", help="leave the two databases loaded, for --loaded"
    )
    parser.add_argument(
        "--loaded",
        action="store_true",
        help="ask the databases an earlier --keep run left (same --days and --cells)",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() the process before the rounds, as a host's worker may",
    )
    args = parser.parse_args()
    defaults = {
        "cells": 40 if args.quick else 100,
        "minute_cells": 4 if args.quick else 10,
        "rounds": 3 if args.quick else 11,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def distribution_texts(rng: random.Random, n: int) -> list[tuple[str, str, str, str]]:
    """``n`` different (aborts, duration, ttft, tpot) texts, each of a few hundred requests."""
    from ferrox_stats.core.requests import Record
    from ferrox_stats.core.rollup import Tally

    texts = []
    for _ in range(n):
        tally = Tally()
        for _ in range(rng.randint(50, 400)):
            completion = rng.randint(1, 800)
            tally.add(
                Record(
                    at_ms=0,
                    prompt_tokens=rng.randint(10, 4000),
                    completion_tokens=completion,
                    ttft_ms=rng.lognormvariate(5, 0.6),
                    duration_ms=rng.lognormvariate(8, 0.8),
                    decode_ms=completion * rng.uniform(15, 40),
                    aborted=rng.choice([None] * 20 + ["client_disconnect", "timeout"]),
                )
            )
        texts.append(tally.texts())
    return texts


def counters(requests: int) -> tuple[int, int, int, int, int]:
    """requests, prompt, completion and cached tokens, out_of_range of a loaded row."""
    return requests, requests * 900, requests * 200, requests * 100, 0


def merged_texts(
    rng: random.Random, texts: list[tuple[str, str, str, str]], parts: int, n: int
) -> list[tuple[str, str, str, str]]:
    """``n`` texts, each the merge of ``parts`` of ``texts``: a merged row's size."""
    from ferrox_stats.core.rollup import Tally

    pool = []
    for _ in range(n):
        tally = Tally()
        for part in rng.sample(texts, parts):
            tally.merge_texts(*part)
        pool.append(tally.texts())
    return pool


NO_ABORTS = (0, 0, 0)


def stored_form(texts: tuple[str, str, str, str], level: int = 0) -> tuple[Any, ...]:
    """``texts`` as a row of ``level`` stores them: the known abort reasons' counts
    (their columns), the other reasons' JSON, the distributions (and at a merged level
    their percentiles)."""
    from ferrox_stats.archive.rollups import percentiles_text
    from ferrox_stats.core.rollup import Tally

    tally = Tally()
    tally.merge_texts(*texts)
    form = (tally.known_aborts(), *tally.texts(known_aborts=False))
    return form if level == 0 else (*form, percentiles_text(tally, level, 3600))


def row_of(
    span: int,
    at: datetime,
    digest: str,
    group: tuple[Any, ...],
    level: int,
    requests: int,
    errors: int,
    aborted: int,
    stored: tuple[Any, ...],
) -> tuple[Any, ...]:
    """A rollup row in ``load``'s COPY column order; ``stored`` is ``stored_form``'s
    (with the percentiles text last), its abort reasons kept only if any aborted."""
    known, aborts, duration, ttft, tpot, percentiles = stored
    return (
        span, at, digest, *group, level, *counters(requests), errors, aborted,
        *(known if aborted else NO_ABORTS), aborts if aborted else "",
        duration, ttft, tpot, percentiles,
    )  # fmt: skip


def load(url: str, days: int, cells: int, minute_cells: int, seed: int = 3) -> int:
    """COPY the rollups of ``days`` days before END; return the rows loaded."""
    from ferrox_stats.archive.rollups import COUNTED_LEVELS, DAY, LEVELS, collapsed, group_key

    rng = random.Random(seed)
    texts = distribution_texts(rng, 200)
    groups = [
        (m, r, rep, k, o)
        for m in MODELS
        for r in ROUTES
        for rep in REPLICAS
        for k in KEYS
        for o in ("ok", "error", "aborted")
    ]
    rng.shuffle(groups)
    digests = {group: group_key(group) for group in groups}
    merged_digests: dict[tuple[int, tuple[Any, ...]], str] = {}
    # Each merged level's texts merge as many group texts as its row holds: 100 groups
    # an hour over 5 models, in total, over 20 keys, 4 replicas, 2 routes, 3 outcomes.
    merged_sizes = {1: 20, 2: 100, 3: 5, 4: 25, 5: 50, 6: 33}
    pools = {level: merged_texts(rng, texts, size, 40) for level, size in merged_sizes.items()}
    # A day row's distributions merge 24 hour rows' (a pool of that size too).
    day_pools = {level: merged_texts(rng, pool * 2, 24, 10) for level, pool in pools.items()}
    stored = [stored_form(part) for part in texts]
    stored_pools = {
        level: [stored_form(part, level) for part in pool] for level, pool in pools.items()
    }
    stored_days = {
        level: [stored_form(part, level) for part in pool] for level, pool in day_pools.items()
    }
    # The (label, model) levels keep counters only: no distributions, no percentiles.
    for level in COUNTED_LEVELS:
        stored_pools[level] = stored_days[level] = [(NO_ABORTS, "", "", "", "", "")]
    columns = (
        "span_s, bucket, group_key, model, route, replica, via_api_key, outcome, level, "
        "requests, prompt_tokens, completion_tokens, cached_tokens, out_of_range, errors, "
        "aborted, aborts_client_disconnect, aborts_explicit, aborts_timeout, aborts, "
        "duration, ttft, tpot, percentiles"
    )
    merged_levels = [level for level in LEVELS if level]
    kept_of: dict[tuple[Any, ...], list[tuple[int, tuple[Any, ...]]]] = {}

    def kept_keys(group: tuple[Any, ...]) -> list[tuple[int, tuple[Any, ...]]]:
        """The merged rows a group's requests count in: one per merged level."""
        keys = kept_of.get(group)
        if keys is None:
            keys = kept_of[group] = [
                (level, collapsed(group, level))  # type: ignore[arg-type]
                for level in merged_levels
            ]
        return keys

    rows = 0
    start = END - timedelta(days=days)
    with psycopg.connect(url) as conn, conn.cursor() as cursor:
        with cursor.copy(f"COPY ferrox_stats_rollup ({columns}) FROM STDIN") as copy:
            for span, per_bucket in ((3600, cells), (60, minute_cells)):
                moment = start
                # (level, kept group) -> requests, errors, aborted of the day's merged rows.
                day: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
                step = timedelta(seconds=span)
                while moment < END:
                    # (level, kept group) -> requests, errors, aborted of the merged row.
                    merged: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
                    for group in rng.sample(groups, per_bucket):
                        known, aborts, duration, ttft, tpot = rng.choice(stored)
                        requests = rng.randint(1, 400)
                        errors = requests if group[4] == "error" else 0
                        aborted = requests if group[4] == "aborted" else 0
                        copy.write_row(
                            row_of(span, moment, digests[group], group, 0, requests, errors,
                                   aborted, (known, aborts, duration, ttft, tpot, ""))
                        )  # fmt: skip
                        rows += 1
                        for key in kept_keys(group):
                            sums = merged.setdefault(key, [0, 0, 0])
                            sums[0] += requests
                            sums[1] += errors
                            sums[2] += aborted
                    if span == 3600:
                        for key, sums in merged.items():
                            into = day.setdefault(key, [0, 0, 0])
                            for k in range(3):
                                into[k] += sums[k]
                    merged_rows = [(span, moment, merged, stored_pools)]
                    moment += step
                    if span == 3600 and (moment - start) % timedelta(days=1) == timedelta(0):
                        merged_rows.append((DAY, moment - timedelta(days=1), day, stored_days))
                        day = {}
                    for at_span, at, sums_of, pool_of in merged_rows:
                        for (level, kept_group), (requests, errors, aborted) in sums_of.items():
                            known, aborts, duration, ttft, tpot, percentiles = rng.choice(
                                pool_of[level]
                            )
                            kept = percentiles if at_span >= 3600 else ""  # minutes keep none
                            digest = merged_digests.get((level, kept_group))
                            if digest is None:
                                digest = merged_digests[(level, kept_group)] = group_key(
                                    kept_group,
                                    level,  # type: ignore[arg-type]
                                )
                            copy.write_row(
                                row_of(at_span, at, digest, kept_group, level, requests,
                                       errors, aborted,
                                       (known, aborts, duration, ttft, tpot, kept))
                            )  # fmt: skip
                            rows += 1
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE ferrox_stats_rollup")
        # The load's and the vacuum's pages written out now, not by the checkpointer
        # while the calls are timed (gigabytes at 300 days: it slowed whole rounds).
        conn.execute("CHECKPOINT")
    return rows


def main() -> None:
    args = arguments()
    names = {history: f"{args.database}_{history}d" for history in (args.days, 10 * args.days)}
    try:
        run(args, names)
    finally:
        if not args.keep:
            for name in names.values():
                drop_database(args.server, name)


def run(args: argparse.Namespace, names: dict[int, str]) -> None:
    short_days, long_days = names
    urls = {
        history: f"{args.server}/{name}" if args.loaded else create_database(args.server, name)
        for history, name in names.items()
    }
    # Django's default database is the short history's; the long one is a second alias.
    os.environ["DATABASE_URL"] = urls[short_days]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from django.test import Client

    from ferrox_stats import tokens
    from ferrox_stats.archive import usage as rollups
    from ferrox_stats.conf import conf

    aliases = {short_days: "default", long_days: "long_history"}
    connections.settings["long_history"] = {
        **connections.settings["default"],
        "NAME": names[long_days],
    }
    settings.ALLOWED_HOSTS = ["*"]
    # The app reads its tables from ARCHIVE_DATABASE: one settings dict per history.
    settings_of = {
        history: {
            **settings.FERROX_STATS,
            "PRICES": PRICES,
            "ROLLUPS": True,
            "ARCHIVE_DATABASE": alias,
        }
        for history, alias in aliases.items()
    }
    pg_major = connection.pg_version // 10000  # type: ignore[attr-defined]
    print(f"{__doc__.splitlines()[0]}\n{platform.python_version()}, PostgreSQL {pg_major}")
    print(
        f"{args.cells} groups per hour, {args.minute_cells} per minute; histories of "
        f"{short_days} and {long_days} days, each in its own database; the last 30 days "
        f"asked at hour buckets; {args.rounds} rounds, each call asked of both in turn"
    )
    clients: dict[int, Client] = {}
    loaded: dict[str, int] = {}
    for history, alias in aliases.items():
        settings.FERROX_STATS = settings_of[history]
        call_command("migrate", database=alias, verbosity=0)
        if args.loaded:
            print(f"{history} d: loaded by an earlier run ({names[history]})")
        else:
            started = time.perf_counter()
            loaded[f"{history} d"] = load(urls[history], history, args.cells, args.minute_cells)
            print(
                f"{history} d: {loaded[f'{history} d']} rollup rows loaded in "
                f"{time.perf_counter() - started:.1f} s"
            )
        _, secret = tokens.issue(f"bench-{os.getpid()}")
        clients[history] = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    since, until = END - timedelta(days=30), END
    prices = conf.PRICE_BOOK

    def call(**kwargs: Any) -> Callable[[int], int]:
        def run_once(history: int) -> int:
            answer = rollups.usage(since, until, prices=prices, using=aliases[history], **kwargs)
            return len(answer.cells)

        return run_once

    def http(path: str = "v1/usage", **params: str) -> Callable[[int], int]:
        def get(history: int) -> int:
            response = clients[history].get(
                f"/control/telemetry/{path}",
                {"since": since.isoformat(), "until": until.isoformat(), **params},
            )
            assert response.status_code == 200, response.content[:300]
            if params.get("format") == "csv":
                return response.content.count(b"\n") - 1
            return len(response.json()["rows"])

        return get

    calls: dict[str, Callable[[int], int]] = {
        "usage()": call(),
        "usage() by model": call(group_by=["model"]),
        "usage() by key": call(group_by=["key"]),
        "usage() by key, model": call(group_by=["key", "model"]),
        "top keys (per_bucket=False)": call(group_by=["key"], per_bucket=False),
        "usage() by model, latency=duration": call(group_by=["model"], latency=["duration"]),
        "usage(), latency=all three": call(latency=["duration", "ttft", "tpot"]),
        "GET v1/usage?group_by=model": http(group_by="model"),
        "GET ...&latency=duration": http(group_by="model", latency="duration"),
        "GET v1/usage?latency=all three": http(latency="duration,ttft,tpot"),
        "GET ...?group_by=model&format=csv": http(group_by="model", format="csv"),
        "GET ...?group_by=key&bucket=day": http(group_by="key", bucket="day"),
        "GET ...key&bucket=day&latency=duration": http(
            group_by="key", bucket="day", latency="duration"
        ),
        "GET ...?group_by=replica&latency=duration": http(group_by="replica", latency="duration"),
        "GET v1/usage/top?by=key": http("v1/usage/top", by="key"),
        "GET v1/usage/top?by=model&metric=cost": http("v1/usage/top", by="model", metric="cost"),
    }
    answered: dict[str, int] = {}
    for history in aliases:
        settings.FERROX_STATS = settings_of[history]
        for name, function in calls.items():
            answered[name] = function(history)  # warm, and the size of the answer
    if args.gc_freeze:
        # What a host's worker may do once it has loaded the app (README's "Serving"):
        # the objects alive now are left out of every later collection.
        gc.collect()
        gc.freeze()
        print(f"gc.freeze(): {gc.get_freeze_count()} objects left out of collections")
    names_in_order = list(calls)
    # Python's full (generation 2) garbage collections, each timed: one falls in an
    # answer every few answers of thousands of rows and costs it tens of ms. Left on,
    # as in a server (its cost is the answers' too), and counted per call and history,
    # so that a median a collection moved says so.
    collections: list[float] = []

    def timed_collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            now = time.perf_counter()
            if phase == "start":
                collections.append(now)
            else:
                collections[-1] = now - collections[-1]

    gc.callbacks.append(timed_collection)
    # Per call and history, each timed call's ms and the ms of the collections in it.
    timings: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for round_ in range(args.rounds):
        order = names_in_order[round_ % len(calls) :] + names_in_order[: round_ % len(calls)]
        # Each call asked of both histories back to back, which first alternating by
        # round: their ratio is not the machine's drift between two phases (a run
        # that loaded and then asked the long history after the short one once gave
        # 1.38-1.46x for answers that had not changed).
        sides = list(aliases) if round_ % 2 == 0 else list(reversed(aliases))
        for name in order:
            for history in sides:
                settings.FERROX_STATS = settings_of[history]
                before = len(collections)
                started = time.perf_counter()
                calls[name](history)
                elapsed = (time.perf_counter() - started) * 1000
                in_it = sum(collections[before:]) * 1000
                timings.setdefault(name, {}).setdefault(f"{history} d", []).append((elapsed, in_it))
    gc.callbacks.remove(timed_collection)
    report(timings, answered, short_days, long_days, args.rounds, conf.USAGE_MAX_ROWS)


def report(
    timings: dict[str, dict[str, list[tuple[float, float]]]],
    answered: dict[str, int],
    short_days: int,
    long_days: int,
    rounds: int,
    cap: int,
) -> None:
    """Each call's medians, with and without the calls a full collection fell in.

    Where the collections fall is the loop's: the same calls in the same order every
    round, so one can land on the same call's same history round after round (a run
    gave 134.5 ms for an answer of 92.5 ms on the other history, 6 of its 11 calls
    collected in). A server's fall on whichever request is running. So each call's
    figure is the median of the calls none fell in, beside the median of every call,
    and the growth the median ratio of the rounds in which neither history's call had
    one; the headline's verdict is "met" only when both medians are."""
    short, long = f"{short_days} d", f"{long_days} d"
    print(
        "\nmedian ms of the calls no full garbage collection fell in (of every call); "
        "growth: of the rounds neither history's call had one; GCs: calls one fell in"
    )
    print(
        f"{'call':42} {'rows':>6} {short:>16} {long:>16}  growth (<= {GOAL_GROWTH}x)"
        f"  GCs ({short} / {long})"
    )
    worst, worst_given, worst_every, worst_growth = 0.0, 0.0, 0.0, 0.0
    collected: list[float] = []
    for name, by_history in timings.items():
        a, b = by_history[short], by_history[long]
        medians = {}
        for history, calls in by_history.items():
            clean = [ms for ms, in_it in calls if not in_it] or [ms for ms, _ in calls]
            medians[history] = (statistics.median(clean), statistics.median(ms for ms, _ in calls))
            collected += [in_it for _, in_it in calls if in_it]
        both_clean = [y / x for (x, gx), (y, gy) in zip(a, b, strict=True) if not (gx or gy)]
        every_round = [y / x for (x, _), (y, _) in zip(a, b, strict=True)]
        growth = statistics.median(both_clean or every_round)
        worst = max(worst, medians[short][0], medians[long][0])
        worst_growth = max(worst_growth, growth)
        given = answered[name] <= cap
        if given:
            worst_given = max(worst_given, medians[short][0], medians[long][0])
            worst_every = max(worst_every, medians[short][1], medians[long][1])
        gcs = "/".join(str(sum(1 for _, in_it in calls if in_it)) for calls in (a, b))
        cells = [f"{medians[h][0]:>6.1f} ({medians[h][1]:>6.1f})" for h in (short, long)]
        print(
            f"{name:42} {answered[name]:>6} {cells[0]:>16} {cells[1]:>16}  "
            f"{growth:.2f}x{'' if both_clean else '*'}  {gcs:>5}"
            + ("" if given else f"  (over USAGE_MAX_ROWS={cap}: the API refuses it)")
        )
    if collected:
        print(
            f"{len(collected)} of the {rounds * 2 * len(timings)} timed calls had a full "
            f"garbage collection in them, {statistics.median(collected):.1f} ms each "
            f"(median; {min(collected):.1f}-{max(collected):.1f})"
        )
    # Met when every call's median is, collections in; "without the collections" names
    # the host that freezes its workers (README's "Serving"), not a goal met.
    if worst_every <= GOAL_MS:
        verdict = "met"
    elif worst_given <= GOAL_MS:
        verdict = "met without the collections only, NOT met"
    else:
        verdict = "NOT met"
    print(
        f"HEADLINE slowest answer the API gives over 30 days at hour buckets: "
        f"{worst_given:.1f} ms (goal <= {GOAL_MS:.0f} ms): {verdict}; "
        f"{worst_every:.1f} ms as the median of every call, collections in; "
        f"slowest usage() answer of any size: {worst:.1f} ms"
    )
    grown = "met" if worst_growth <= GOAL_GROWTH else "NOT met"
    print(
        f"HEADLINE most growth at 10x the history: {worst_growth:.2f}x "
        f"(goal <= {GOAL_GROWTH}x): {grown}"
    )


if __name__ == "__main__":
    main()
