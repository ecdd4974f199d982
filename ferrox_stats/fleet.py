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

Totals merge by kind (``state.merge_states``): counters summed, rate windows as
amounts over the longest span, percentiles from the distributions merged bucket by
bucket (never averaged). A row stores its latency distributions merged across its
breakdown's cells (``row_state``), which keeps it a few KiB; reading and merging 64 of
them still costs more than a request should pay each time (``bench/fleet.py``), so each
process keeps the document it computed for a quarter of the heartbeat interval
(``CACHE_FRACTION``): within that, repeated calls answer the same document;
``reset()`` empties the cache (tests).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from operator import add
from typing import Any

from .archive.rows import datetime_to_at_ms
from .core.distribution import MAX_INDEX, MIN_INDEX

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

FIELDS = (
    "instance",
    "replica",
    "host",
    "pid",
    "started_at",
    "last_seen",
    "heartbeat_s",
    "stopped",
    "state",
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


def _per_second(window: Mapping[str, Any]) -> float:
    """A rate window's rate: its amount over its span (0.0 with no samples)."""
    if not window["samples"] or not window["span_s"]:
        return 0.0
    return float(window["amount"]) / float(window["span_s"])


def _entry(row: tuple[Any, ...], now_ms: int, lost_s: float) -> dict[str, Any]:
    instance, replica, host, pid, started_at, last_seen, heartbeat_s, stopped, state = row
    last_seen_ms = datetime_to_at_ms(last_seen)
    kind = instance_state(last_seen_ms, heartbeat_s, stopped, now_ms, lost_s)
    serving, rates, archive = state["serving"], state["rates"], state["archive"]
    pending = None if archive is None else int(archive["pending"])
    return {
        "instance": instance,
        "replica": replica,
        "host": host,
        "pid": pid,
        "started_ms": datetime_to_at_ms(started_at),
        "uptime_s": float(state["uptime_s"]),
        "last_seen_ms": last_seen_ms,
        "age_s": max(0.0, (now_ms - last_seen_ms) / 1000),
        "state": kind,
        "active": int(serving["active"]),
        "completed": int(serving["completed"]),
        "decode_tps": _per_second(rates["decode"]),
        "prefill_tps": _per_second(rates["prefill"]),
        "pending": pending,
        "dropped": {} if archive is None else dict(sorted(archive["dropped"].items())),
        "not_archived": pending if kind == LOST else None,
    }


# The row's latency distributions (``row_state``) and the breakdown fields they sum.
LATENCY_FIELDS = {"duration_s": "duration", "ttft_s": "ttft", "tpot_s": "tpot"}
PERCENTILES = (50, 95, 99)
# Bucket indexes one distribution can span (every positive float): a row claiming more
# is not a distribution.
MAX_SPAN = MAX_INDEX - MIN_INDEX + 1


def merge_wires(wires: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Distribution wires (``Distribution.to_wire``) summed bucket by bucket, on the
    wire: no ``Distribution`` is built per part. The result is checked once, when read
    (``Distribution.from_wire``)."""
    zeros = 0
    total = 0.0
    counts: dict[str, int] = {}
    get = counts.get
    for wire in wires:
        zeros += wire["zeros"]
        total += wire["sum"]
        for index, n in wire["counts"].items():
            counts[index] = get(index, 0) + n
    return {"zeros": zeros, "sum": total, "counts": counts}


def dense(wire: Mapping[str, Any]) -> dict[str, Any]:
    """A distribution wire in the row's form: the counts as one list from the lowest
    bucket index (``offset``) up. JSON arrays of numbers decode about 4 times faster
    than objects keyed by index, and take a third of the bytes (bench/fleet.py)."""
    counts = {int(index): n for index, n in wire["counts"].items() if n}
    if not counts:
        return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": 0, "counts": []}
    low, high = min(counts), max(counts)
    values = [0] * (high - low + 1)
    for index, n in counts.items():
        values[index - low] = n
    return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": low, "counts": values}


def merge_dense(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Distributions in the row's form summed, as a ``Distribution`` wire (unchecked:
    ``Distribution.from_wire`` checks it once)."""
    zeros = 0
    total = 0.0
    spans: list[tuple[int, list[int]]] = []
    for part in parts:
        zeros += part["zeros"]
        total += part["sum"]
        values = part["counts"]
        if values:
            spans.append((int(part["offset"]), values))
    if not spans:
        return {"zeros": zeros, "sum": total, "counts": {}}
    low = min(offset for offset, _ in spans)
    high = max(offset + len(values) for offset, values in spans)
    if high - low > MAX_SPAN:
        raise ValueError(f"bucket indexes span {high - low}, more than any distribution")
    summed = [0] * (high - low)
    for offset, values in spans:
        start = offset - low
        end = start + len(values)
        summed[start:end] = map(add, summed[start:end], values)
    return {
        "zeros": zeros,
        "sum": total,
        "counts": {str(low + i): n for i, n in enumerate(summed) if n},
    }


def row_state(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document a heartbeat row stores: ``process_state``'s, with its per-label
    breakdown replaced by the three latency distributions merged across its cells, in
    the dense form (``dense``).

    The fleet sums nothing per label, and a busy worker's breakdown is ~200 KiB of
    JSON (45 cells: bench/fleet.py) that 64 rows would make a multi-second read; the
    per-label breakdown goes to the host file (``/metrics``) instead.
    """
    if "latency" in doc:  # a version 2 document carries them already
        return {**doc, "breakdown": []}
    cells = doc["breakdown"]
    latency = {
        name: dense(merge_wires(cell[field] for cell in cells))
        for name, field in LATENCY_FIELDS.items()
    }
    return {**doc, "breakdown": [], "latency": latency}


def _latency_parts(state: Mapping[str, Any]) -> Mapping[str, Any]:
    # A row_state document carries them; a full process_state document has its cells.
    parts: Mapping[str, Any] = (
        state["latency"] if "latency" in state else row_state(state)["latency"]
    )
    return parts


def distribution(part: Mapping[str, Any]) -> Any:
    """One distribution of a row (``row_state``), as a ``Distribution``."""
    from .core.distribution import Distribution

    return Distribution.from_wire(merge_dense([part]))


def latency(states: list[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Count and p50/p95/p99 of duration, TTFT and TPOT (seconds) over the states,
    from their distributions merged bucket by bucket (never averaged percentiles)."""
    from .core.distribution import Distribution

    parts = [_latency_parts(state) for state in states]
    result: dict[str, dict[str, Any]] = {}
    for name in LATENCY_FIELDS:
        merged = Distribution.from_wire(merge_dense(part[name] for part in parts))
        result[name] = {
            "count": merged.count,
            **{f"p{p}": merged.quantile(p) for p in PERCENTILES},
        }
    return result


def totals(states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet's numbers from the state documents of the instances summed.
    ``ValueError`` if one is not a state document."""
    from .state import merge_states

    states = list(states)
    try:
        percentiles = latency(states)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a state document: {exc!r}") from None
    # The counters; the rows' breakdowns are empty, so this sums no distribution.
    merged = merge_states({**state, "breakdown": []} for state in states)
    serving = merged["serving"]
    rates = merged["rates"]
    archive = merged.get("archive")
    return {
        "instances": int(merged["instances"]),
        "active": serving["active"],
        "completed": serving["completed"],
        "aborts": dict(sorted(serving["aborts"].items())),
        "prompt_tokens_total": serving["prompt_tokens_total"],
        "completion_tokens_total": serving["completion_tokens_total"],
        "decode_tps": float(rates["decode"]["per_second"]),
        "prefill_tps": float(rates["prefill"]["per_second"]),
        "window_s": float(rates["decode"]["window_s"]),
        "latency": percentiles,
        "archive": None
        if archive is None
        else {
            "accepted": archive["accepted"],
            "persisted": archive["persisted"],
            "pending": archive["pending"],
            "dropped": dict(sorted(archive["dropped"].items())),
            "dead_lettered": archive["dead_lettered"],
        },
    }


def compute(
    *, now_ms: int, using: str, lost_s: float, heartbeat_s: float, instance: str | None = None
) -> dict[str, Any]:
    """The fleet document at ``now_ms``, read from the database (no cache)."""
    from .core.distribution import RELATIVE_ERROR
    from .models import Instance

    rows: list[tuple[Any, ...]] = []
    entries: list[dict[str, Any]] = []
    unreadable = 0
    for row in (
        Instance.objects.using(using)
        .order_by("-last_seen", "instance")
        .values_list(*FIELDS)[:MAX_INSTANCES]
    ):
        try:
            entries.append(_entry(row, now_ms, lost_s))
        except (KeyError, TypeError, ValueError, AttributeError):
            unreadable += 1  # not a state document this release can read: skipped
            continue
        rows.append(row)
    if instance is None:
        summed = [
            row[-1] for row, entry in zip(rows, entries, strict=True) if entry["state"] == LIVE
        ]
    else:
        summed = [row[-1] for row in rows if row[0] == instance]
        if not summed:
            # Beyond the newest MAX_INSTANCES, or never seen: ask for it alone.
            one = (
                Instance.objects.using(using)
                .filter(instance=instance)
                .values_list("state", flat=True)
            )
            summed = list(one)
        if not summed:
            raise UnknownInstance(instance)
    try:
        summed_totals = totals(summed)
    except ValueError:
        # A document merge_states refuses (another release's, a hand-edited row): the
        # others are summed without it.
        readable = [state for state in summed if _mergeable(state)]
        unreadable += len(summed) - len(readable)
        summed_totals = totals(readable)
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


def _mergeable(state: Any) -> bool:
    try:
        totals([state])
    except ValueError:
        return False
    return True


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
