"""The fleet document (``GET v1/fleet``): every instance's last heartbeat, merged.

Computed from the ``Instance`` rows only (``heartbeat.py`` writes them), so whichever
worker answers, the answer is the same until the next heartbeat lands. An instance's
state comes from the age of its last heartbeat (``last_seen``, its own clock) at the
reader's ``now`` and the interval it promised (``heartbeat_s``):

- ``stopped``: its last heartbeat carries the clean-shutdown mark;
- ``live``: last seen at most 3 heartbeats ago: summed into ``totals``;
- ``stale``: older, up to ``INSTANCE_LOST_S``: named in ``stale``, never summed;
- ``lost``: older than that without the mark (killed, crashed, cut off): named in
  ``lost`` with ``not_archived``, the records its archive still queued at its last
  heartbeat ("up to N records not archived", plus what finished after it).

Totals merge by kind, as ``state.merge_states`` does, over rows of state version 1 (the
previous release's) or 2: counters summed, rate windows as amounts over the longest
span, percentiles from the distributions merged bucket by bucket (never averaged). A
row stores its latency distributions merged across its breakdown's cells, their counts
packed so that merging 64 rows is a few big-integer additions (``fleet_rows``). Each
row is checked before it is summed: one this release cannot read is skipped and
counted in ``unreadable``, never an error. A read still costs a few ms at 64
instances (``bench/fleet.py``), so each process keeps the document it computed for a
quarter of the heartbeat interval (``CACHE_FRACTION``): within that, repeated calls
answer the same document; ``reset()`` empties the cache (tests).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterable, Mapping
from operator import add
from typing import Any, NamedTuple

from .fleet_rows import LATENCY, Part, merge_parts, read_latency, row_state, summary

logger = logging.getLogger(__name__)

__all__ = [
    "CACHE_FRACTION",
    "LIVE",
    "LOST",
    "MAX_INSTANCES",
    "STALE",
    "STATES",
    "STOPPED",
    "UnknownInstance",
    "fleet_document",
    "instance_state",
    "reset",
]

LIVE = "live"
STALE = "stale"
LOST = "lost"
STOPPED = "stopped"
STATES = (LIVE, STALE, LOST, STOPPED)
# Heartbeats an instance may miss before it reads stale (network jitter, a GC pause).
LIVE_HEARTBEATS = 3
# Rows read at most, newest first: a fleet whose workers are recycled often keeps many
# stopped rows until INSTANCE_KEEP_S prunes them; the document stays bounded.
MAX_INSTANCES = 256
# The share of the heartbeat interval a computed document is reused for.
CACHE_FRACTION = 0.25

# The columns read. ``last_seen`` and ``started_at`` are the document's ``at_ms`` and
# ``started_ms`` (``heartbeat.instance_row`` writes them in one statement): the fleet
# reads those integers from the document, which spares 128 timestamps parsed in Python
# (Django's time-zone loader) per read at 64 rows.
FIELDS = (
    "instance",
    "replica",
    "host",
    "pid",
    "heartbeat_s",
    "stopped",
    "state",
    "latency_counts",
)


class UnknownInstance(LookupError):
    """``?instance=`` names no instance with a heartbeat row."""


def instance_state(
    last_seen_ms: int, heartbeat_s: float, stopped: bool, now_ms: int, lost_s: float
) -> str:
    """``live``, ``stale``, ``lost`` or ``stopped``; see the module docstring.

    A heartbeat from the future (another host's clock ahead of ours) reads as age 0.
    """
    if stopped:
        return STOPPED
    age_s = (now_ms - last_seen_ms) / 1000
    if age_s <= LIVE_HEARTBEATS * heartbeat_s:
        return LIVE
    if age_s <= lost_s:
        return STALE
    return LOST


# The largest number a row may carry where the fleet adds floats: the sum over
# MAX_INSTANCES rows stays finite (the JSON answer has no Infinity).
LARGEST = sys.float_info.max / MAX_INSTANCES


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError(f"a count must be an integer >= 0, got {value!r}")
    return value


def _amount(value: Any) -> float:
    if type(value) not in (int, float) or not 0 <= value <= LARGEST:
        raise TypeError(f"an amount must be a number from 0 to {LARGEST}, got {value!r}")
    return float(value)


def _bounded(value: float) -> float:
    # A quotient of two amounts may still overflow (a hand-edited span of 1e-300).
    return min(value, LARGEST)


def _per_second(window: Mapping[str, Any]) -> float:
    """A rate window's rate: its amount over its span (0.0 with no samples)."""
    amount, span = _amount(window["amount"]), _amount(window["span_s"])
    if not _count(window["samples"]) or not span:
        return 0.0
    return _bounded(amount / span)


def _ms(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**53:
        raise TypeError(f"a time in epoch ms must be an integer, got {value!r}")
    return value


def _entry(
    row: tuple[Any, ...], state: Mapping[str, Any], now_ms: int, lost_s: float
) -> dict[str, Any]:
    instance, replica, host, pid, heartbeat_s, stopped = row[:6]
    last_seen_ms = _ms(state["at_ms"])
    kind = instance_state(last_seen_ms, heartbeat_s, stopped, now_ms, lost_s)
    serving, rates, archive = state["serving"], state["rates"], state["archive"]
    pending = None if archive is None else _count(archive["pending"])
    return {
        "instance": instance,
        "replica": replica,
        "host": host,
        "pid": pid,
        "started_ms": _ms(state["started_ms"]),
        "uptime_s": _amount(state["uptime_s"]),
        "last_seen_ms": last_seen_ms,
        "age_s": max(0.0, (now_ms - last_seen_ms) / 1000),
        "state": kind,
        "active": _count(serving["active"]),
        "completed": _count(serving["completed"]),
        "decode_tps": _per_second(rates["decode"]),
        "prefill_tps": _per_second(rates["prefill"]),
        "pending": pending,
        "dropped": {} if archive is None else dict(sorted(_reasons(archive["dropped"]).items())),
        "not_archived": pending if kind == LOST else None,
    }


# State document versions whose rows are summed: 1 (the previous release's, its counts
# as lists) and 2 (``fleet_rows.pack``'s).
VERSIONS = (1, 2)
SERVING_COUNTS = ("active", "completed", "prompt_tokens_total", "completion_tokens_total")
ARCHIVE_COUNTS = ("accepted", "persisted", "pending", "dead_lettered")
RATES = ("decode", "prefill")


class Counters(NamedTuple):
    """One row's counters, checked to add up: ``SERVING_COUNTS``, aborts by reason,
    ``(amount, span_s, samples, window_s)`` per ``RATES``, ``ARCHIVE_COUNTS`` and
    drops by reason (``None`` without an archive)."""

    serving: list[Any]
    aborts: dict[str, Any]
    windows: list[tuple[float, float, Any, float]]
    archive: list[Any] | None
    dropped: dict[str, Any] | None


class Summand(NamedTuple):
    """A row to sum: its counters and its latency distributions, checked."""

    counters: Counters
    latency: list[Part]


def _reasons(counts: Any) -> dict[str, int]:
    if not isinstance(counts, dict):
        raise TypeError(f"counts by reason must be an object, got {counts!r}")
    for n in counts.values():
        _count(n)
    return counts


def _counters(state: Mapping[str, Any]) -> Counters:
    serving, rates, archive = state["serving"], state["rates"], state["archive"]
    return Counters(
        [_count(serving[name]) for name in SERVING_COUNTS],
        _reasons(serving["aborts"]),
        [
            (
                _amount(rates[n]["amount"]),
                _amount(rates[n]["span_s"]),
                _count(rates[n]["samples"]),
                _amount(rates[n]["window_s"]),
            )
            for n in RATES
        ],
        None if archive is None else [_count(archive[name]) for name in ARCHIVE_COUNTS],
        None if archive is None else _reasons(archive["dropped"]),
    )


def summand(state: Any, latency_counts: bytes | memoryview | None = None) -> Summand:
    """A row's state (and packed counts) ready to sum; ``ValueError`` if it is not one
    ``fleet_rows.pack`` (or the previous release) wrote. A state document that still
    has its breakdown is taken as ``row_state`` would store it."""
    try:
        version = state["version"]
        if type(version) is not int or version not in VERSIONS:
            raise ValueError(f"state version {version!r} is not one of {VERSIONS}")
        if latency_counts is None and "latency" not in state:
            state = row_state(state)
        return Summand(_counters(state), read_latency(state, latency_counts))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a state document: {exc!r}") from None


def latency(summands: Iterable[Summand]) -> dict[str, dict[str, Any]]:
    """Count and p50/p95/p99 of duration, TTFT and TPOT (seconds) over the rows, from
    their distributions merged bucket by bucket (never averaged percentiles)."""
    parts = [item.latency for item in summands]
    return {name: summary(*merge_parts(row[i] for row in parts)) for i, name in enumerate(LATENCY)}


def _add_reasons(into: dict[str, Any], counts: Mapping[str, Any]) -> None:
    for reason, n in counts.items():
        into[reason] = into.get(reason, 0) + n


def totals(summands: Iterable[Summand]) -> dict[str, Any]:
    """The fleet's numbers from the rows of the instances summed (``summand``):
    counters added, rates as amounts over the longest span, percentiles from the
    merged distributions."""
    summands = list(summands)
    serving: list[Any] = [0] * len(SERVING_COUNTS)
    aborts: dict[str, Any] = {}
    windows: list[list[Any]] = [[0.0, 0.0, 0, 0.0] for _ in RATES]
    archive: list[Any] | None = None
    dropped: dict[str, Any] = {}
    for item in summands:
        counters = item.counters
        serving = list(map(add, serving, counters.serving))
        _add_reasons(aborts, counters.aborts)
        for mine, (amount, span, samples, window) in zip(windows, counters.windows, strict=True):
            mine[0] += amount
            mine[1] = max(mine[1], span)
            mine[2] += samples
            mine[3] = max(mine[3], window)
        if counters.archive is not None and counters.dropped is not None:
            archive = list(map(add, archive or [0] * len(ARCHIVE_COUNTS), counters.archive))
            _add_reasons(dropped, counters.dropped)
    rates = {
        name: _bounded(amount / span) if samples and span else 0.0
        for name, (amount, span, samples, _) in zip(RATES, windows, strict=True)
    }
    archived = None if archive is None else dict(zip(ARCHIVE_COUNTS, archive, strict=True))
    active, completed, prompt_tokens, completion_tokens = serving
    return {
        "instances": len(summands),
        "active": active,
        "completed": completed,
        "aborts": dict(sorted(aborts.items())),
        "prompt_tokens_total": prompt_tokens,
        "completion_tokens_total": completion_tokens,
        "decode_tps": float(rates["decode"]),
        "prefill_tps": float(rates["prefill"]),
        "window_s": float(windows[0][3]),
        "latency": latency(summands),
        "archive": None
        if archived is None
        else {
            "accepted": archived["accepted"],
            "persisted": archived["persisted"],
            "pending": archived["pending"],
            "dropped": dict(sorted(dropped.items())),
            "dead_lettered": archived["dead_lettered"],
        },
    }


def _loads(text: Any) -> Any:
    # ``state`` is JSON text (fleet_rows); anything else in it is not a state document.
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None


# alias -> (SQL, params) of the newest MAX_INSTANCES rows' FIELDS, compiled once: the
# ORM compiled the same query on every read, a tenth of a read's time.
_newest_sql: dict[str, tuple[str, tuple[Any, ...]]] = {}


def _newest_rows(using: str) -> list[tuple[Any, ...]]:
    """The newest ``MAX_INSTANCES`` rows' ``FIELDS``, newest first. No converters run
    (none of these columns needs one; SQLite's ``stopped`` is 0 or 1)."""
    from django.db import connections

    from .models import Instance

    compiled = _newest_sql.get(using)
    if compiled is None:
        rows = Instance.objects.using(using).order_by("-last_seen", "instance")
        query = rows.values_list(*FIELDS)[:MAX_INSTANCES].query
        sql, params = query.get_compiler(using).as_sql()
        compiled = _newest_sql[using] = (sql, tuple(params))
    with connections[using].cursor() as cursor:
        cursor.execute(*compiled)
        found: list[tuple[Any, ...]] = cursor.fetchall()
    return found


def compute(
    *, now_ms: int, using: str, lost_s: float, heartbeat_s: float, instance: str | None = None
) -> dict[str, Any]:
    """The fleet document at ``now_ms``, read from the database (no cache)."""
    from .core.distribution import RELATIVE_ERROR
    from .models import Instance

    rows: list[tuple[Any, ...]] = []
    entries: list[dict[str, Any]] = []
    unreadable = 0
    seen = set()
    for row in _newest_rows(using):
        seen.add(row[0])
        try:
            state = _loads(row[-2])
            entries.append(_entry(row, state, now_ms, lost_s))
        except (KeyError, TypeError, ValueError, AttributeError):
            unreadable += 1  # not a state document this release can read: skipped
            continue
        rows.append((row[0], state, row[-1]))
    if instance is None:
        summed = [
            (state, counts)
            for (_, state, counts), entry in zip(rows, entries, strict=True)
            if entry["state"] == LIVE
        ]
    else:
        summed = [(state, counts) for name, state, counts in rows if name == instance]
        if instance not in seen:
            # Beyond the newest MAX_INSTANCES, or never seen: ask for it alone.
            one = Instance.objects.using(using).filter(instance=instance)
            found = list(one.values_list("state", "latency_counts"))
            if not found:
                raise UnknownInstance(instance)
            for text, counts in found:
                try:
                    summed.append((_loads(text), counts))
                except ValueError:
                    unreadable += 1
    summands = []
    for state, counts in summed:
        try:
            summands.append(summand(state, counts))
        except ValueError:
            # Another release's document, a hand-edited row: the others are summed
            # without it.
            unreadable += 1
    summed_totals = totals(summands)
    if unreadable:
        logger.warning("ferrox_stats: %d heartbeat rows could not be read", unreadable)
    return {
        "scope": "fleet",
        "instance": instance,
        "at_ms": now_ms,
        "heartbeat_s": heartbeat_s,
        "relative_error": RELATIVE_ERROR,
        "totals": summed_totals,
        "instances": entries,
        "stale": [e["instance"] for e in entries if e["state"] == STALE],
        "lost": [
            {
                "instance": e["instance"],
                "last_seen_ms": e["last_seen_ms"],
                "not_archived": e["not_archived"],
            }
            for e in entries
            if e["state"] == LOST
        ],
        "unreadable": unreadable,
    }


# -- the per-process cache -----------------------------------------------------------

_cache_lock = threading.Lock()
# (alias, lost_s, heartbeat_s, instance) -> (monotonic expiry, document)
_cache: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}


def fleet_document(
    *,
    now_ms: int,
    monotonic: float,
    using: str,
    lost_s: float,
    heartbeat_s: float,
    instance: str | None = None,
) -> dict[str, Any]:
    """The fleet document, computed at most once per ``CACHE_FRACTION * heartbeat_s``
    per process and query (``monotonic`` is the reader's clock, ``now_ms`` its wall
    time). Raises ``UnknownInstance``, or what the database raised."""
    key = (using, lost_s, heartbeat_s, instance)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and monotonic < hit[0]:
        return hit[1]
    # Computed outside the lock: two requests at a miss may both compute (a few ms
    # each); neither waits on the other's database round trip.
    document = compute(
        now_ms=now_ms, using=using, lost_s=lost_s, heartbeat_s=heartbeat_s, instance=instance
    )
    with _cache_lock:
        if len(_cache) >= 64:  # one key per ?instance= asked: bounded
            _cache.clear()
        _cache[key] = (monotonic + CACHE_FRACTION * heartbeat_s, document)
    return document


def current(instance: str | None = None) -> dict[str, Any]:
    """What ``v1/fleet`` answers now, by the settings and this process's clock (the
    API's view and the dashboard's first paint share it, and its cache). Raises
    ``UnknownInstance`` for an ``instance`` with no row, or what the database raised."""
    from . import live
    from .conf import DEFAULTS, conf
    from .models import Instance

    longest = Instance._meta.get_field("instance").max_length or 0
    if instance is not None and (len(instance) > longest or "\x00" in instance):
        # No row can hold it (and PostgreSQL refuses NUL in a parameter): no query.
        raise UnknownInstance(instance)
    clock = live.get_recorder().clock
    return fleet_document(
        now_ms=clock.wall_ms(),
        monotonic=clock.monotonic(),
        using=conf.ARCHIVE_DATABASE,
        lost_s=conf.INSTANCE_LOST_S,
        heartbeat_s=conf.HEARTBEAT_S or DEFAULTS["HEARTBEAT_S"],
        instance=instance,
    )


def reset() -> None:
    """Forget the cached documents (tests)."""
    with _cache_lock:
        _cache.clear()
