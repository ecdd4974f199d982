"""This process's state as one JSON document, and the sum of several such documents.

``process_state(recorder)`` is what a heartbeat publishes (to the database and to the
host's metrics directory): counters, rate windows as amounts over spans, the breakdown's
mergeable distributions, gauges with their age, archive accounting, and a clean-shutdown
mark. ``merge_states`` adds documents of several processes: counters summed, rates
recombined from amounts and spans (never averaged), distributions merged bucket-wise, so
percentiles of merged distributions are true ones (within ``RELATIVE_ERROR``), never
averaged ones.

Version 2 (``STATE_VERSION``): the breakdown's cells carry their distributions at
power-of-two resolution (``Distribution.octaves``, marked ``"resolution": "octave"``:
all ``/metrics`` exposes), and ``"latency"`` the duration, TTFT and TPOT distributions
merged over every cell at full resolution (``Distribution.dense``: what the fleet's
percentiles come from). Version 1 (before) had every cell at full resolution
(``Distribution.to_wire``) and no ``"latency"``; readers take both.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from operator import add
from typing import Any

from . import octave
from .core.breakdown import Breakdown, Cell
from .core.distribution import MAX_INDEX, MIN_INDEX, RELATIVE_ERROR, Distribution
from .core.rate import LastKnown, RateReading
from .live import Recorder

__all__ = [
    "RELATIVE_ERROR",
    "STATE_VERSION",
    "latency",
    "latency_of",
    "merge_states",
    "merged_cells",
    "process_state",
]

STATE_VERSION = 2
# What merge_states reads: version 1 (breakdown in Cell.to_wire's keyed form) and this
# one (breakdown in the octave form, "latency" dense: octave.VERSION).
READABLE_VERSIONS = (1, STATE_VERSION)
OCTAVE = "octave"

ARCHIVE_COUNTS = ("accepted", "persisted", "duplicates", "pending", "dead_lettered")
SERVING_COUNTS = ("active", "completed", "prompt_tokens_total", "completion_tokens_total")
RATES = ("decode", "prefill")
PERCENTILES = (50, 95, 99)

# latency()'s names for the breakdown's time distributions.
LATENCIES = {"duration_s": "duration", "ttft_s": "ttft", "tpot_s": "tpot"}


def process_state(recorder: Recorder, *, stopped: bool = False) -> dict[str, Any]:
    """The recorder's state at one instant, JSON-able; ``stopped`` marks a clean shutdown."""
    clock = recorder.clock
    now = clock.monotonic()
    at_ms = clock.wall_ms()
    serving = recorder.serving.snapshot(now)
    health = getattr(recorder.sink, "health", None)
    archive = health() if callable(health) else None
    assert serving.decode is not None and serving.prefill is not None
    cells, times = recorder.breakdown.export()
    return {
        "version": STATE_VERSION,
        "instance": recorder.instance,
        "replica": recorder.replica,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_ms": recorder.started_ms,
        "at_ms": at_ms,
        "uptime_s": now - recorder.started_at,
        "stopped": stopped,
        "serving": {
            "active": serving.active,
            "completed": serving.completed,
            "aborts": dict(sorted(serving.aborts.items())),
            "prompt_tokens_total": serving.prompt_tokens_total,
            "completion_tokens_total": serving.completion_tokens_total,
        },
        "rates": {"decode": _rate(serving.decode), "prefill": _rate(serving.prefill)},
        "resolution": OCTAVE,
        "breakdown": cells,
        "latency": {name: times[field] for name, field in LATENCIES.items()},
        "gauges": {
            "pool_occupancy": _gauge(recorder.pool_occupancy, now),
            "queue_depth": _gauge(recorder.queue_depth, now),
            "refused": recorder.gauges_refused,
        },
        "recorded_total": recorder.stats.recorded_total,
        "sink_errors": recorder.sink_errors,
        # Records left out of the breakdown: an impossible value, or a bug of ours.
        "breakdown_refused": recorder.breakdown.refused + recorder.breakdown_errors,
        "archive": None
        if archive is None
        else {
            **{name: getattr(archive, name) for name in ARCHIVE_COUNTS},
            "dropped": dict(sorted(archive.dropped.items())),
        },
    }


def _rate(reading: RateReading) -> dict[str, Any]:
    return {
        "amount": float(reading.amount),
        "span_s": reading.span_s,
        "samples": reading.samples,
        "window_s": reading.window_s,
        "per_second": reading.per_second,
    }


def _gauge(gauge: LastKnown[float], now: float) -> dict[str, float] | None:
    value = gauge.get(now)
    age = gauge.age_s(now)
    if value is None or age is None:
        return None
    return {"value": value, "age_s": age}


def merge_states(states: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of several ``process_state`` documents (or of merged ones), of version 1
    or ``octave.VERSION``.

    Counters and archive accounting are summed (``archive`` is ``None`` when no part has
    one), rates recombined as ``Σ amount / max span_s``, breakdown cells merged
    bucket-wise: at full resolution when every part is of version 1 (a version 1 sum),
    else in the octave form (a version 2 sum); ``latency`` summed bucket-wise when every
    part carries one. Per-process identity and gauges are left out; ``instances`` says
    how many processes the sum covers. ``ValueError`` for a part that is not such a
    document.
    """
    instances = 0
    at_ms: int | None = None
    serving: dict[str, Any] = dict.fromkeys(SERVING_COUNTS, 0)
    aborts: dict[str, int] = {}
    rates = {name: {"amount": 0.0, "span_s": 0.0, "samples": 0, "window_s": 0.0} for name in RATES}
    breakdowns: list[Any] = []
    versions: set[int] = set()
    latencies: list[Mapping[str, Any] | None] = []
    archive: dict[str, Any] | None = None
    recorded_total = sink_errors = breakdown_refused = 0
    for state in states:
        try:
            if state["version"] not in READABLE_VERSIONS:
                raise ValueError(
                    f"state version {state['version']!r} is not one of {READABLE_VERSIONS}"
                )
            versions.add(state["version"])
            instances += state.get("instances", 1)
            if state.get("at_ms") is not None:
                at_ms = state["at_ms"] if at_ms is None else max(at_ms, state["at_ms"])
            part_serving = state["serving"]
            for name in SERVING_COUNTS:
                serving[name] += part_serving[name]
            _add_counts(aborts, part_serving["aborts"])
            for name in RATES:
                mine, part = rates[name], state["rates"][name]
                mine["amount"] += part["amount"]
                mine["span_s"] = max(mine["span_s"], part["span_s"])
                mine["samples"] += part["samples"]
                mine["window_s"] = max(mine["window_s"], part["window_s"])
            breakdowns.append(state)
            latencies.append(state.get("latency"))
            recorded_total += state["recorded_total"]
            sink_errors += state["sink_errors"]
            breakdown_refused += state.get("breakdown_refused", 0)
            if (part_archive := state["archive"]) is not None:
                if archive is None:
                    archive = {**dict.fromkeys(ARCHIVE_COUNTS, 0), "dropped": {}}
                for name in ARCHIVE_COUNTS:
                    archive[name] += part_archive[name]
                _add_counts(archive["dropped"], part_archive["dropped"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a state document: {exc!r}") from None
    for reading in rates.values():
        span = reading["span_s"]
        reading["per_second"] = reading["amount"] / span if reading["samples"] and span else 0.0
    serving["aborts"] = dict(sorted(aborts.items()))
    if archive is not None:
        archive["dropped"] = dict(sorted(archive["dropped"].items()))
    version = 1 if versions == {1} else octave.VERSION
    try:
        if version == 1:
            cells = Breakdown.merge_wire(state["breakdown"] for state in breakdowns)
            breakdown = [cell.to_wire(key) for key, cell in sorted(cells.items())]
        else:
            breakdown = octave.summed(octave.of_document(state) for state in breakdowns)
        merged = {
            "version": version,
            "instances": instances,
            "at_ms": at_ms,
            "serving": serving,
            "rates": rates,
            "breakdown": breakdown,
            "recorded_total": recorded_total,
            "sink_errors": sink_errors,
            "breakdown_refused": breakdown_refused,
            "archive": archive,
        }
        if latencies and None not in latencies:
            merged["latency"] = {
                name: _merge_dense(part[name] for part in latencies if part is not None)
                for name in LATENCIES
            }
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a state document: {exc!r}") from None
    return merged


def _merge_dense(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Distributions in the dense form (``{"zeros", "sum", "offset", "counts": [...]}``,
    ``counts[i]`` the count of bucket ``offset + i``) summed bucket by bucket."""
    zeros = 0
    total = 0.0
    spans: list[tuple[int, list[int]]] = []
    for part in parts:
        zeros += part["zeros"]
        total += part["sum"]
        if part["counts"]:
            spans.append((int(part["offset"]), part["counts"]))
    if not spans:
        return {"zeros": zeros, "sum": total, "offset": 0, "counts": []}
    low = min(offset for offset, _ in spans)
    high = max(offset + len(values) for offset, values in spans)
    if high - low > MAX_INDEX - MIN_INDEX + 1:
        raise ValueError(f"bucket indexes span {high - low}, more than any distribution")
    summed = [0] * (high - low)
    for offset, values in spans:
        start = offset - low
        summed[start : start + len(values)] = map(add, summed[start : start + len(values)], values)
    return {"zeros": zeros, "sum": total, "offset": low, "counts": summed}


def _add_counts(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for reason, n in counts.items():
        into[reason] = into.get(reason, 0) + n


def latency(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Percentiles of duration, TTFT and TPOT (seconds) over every cell of a state
    document: from its ``"latency"`` (full resolution) where it has one, else (version
    1, or merged) from its cells' distributions merged."""
    if "latency" in state:
        return {
            name: _percentiles(Distribution.from_dense(state["latency"][name]))
            for name in LATENCIES
        }
    return latency_of(Breakdown.merge_wire([state["breakdown"]]))


def latency_of(cells: Mapping[tuple[str, str, str], Cell]) -> dict[str, dict[str, Any]]:
    """``latency`` of cells already parsed (``merged_cells``, ``Breakdown.cells()``);
    reading a wire breakdown costs more than this."""
    return {
        name: _percentiles(Distribution.merged(getattr(cell, field) for cell in cells.values()))
        for name, field in LATENCIES.items()
    }


def _percentiles(distribution: Distribution) -> dict[str, Any]:
    return {
        "count": distribution.count,
        **{f"p{p}": distribution.quantile(p) for p in PERCENTILES},
    }


def merged_cells(states: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Cell]:
    """The breakdown cells of several state documents, summed key by key: a version 1
    breakdown at its resolution, an octave-form one with each power of two's values in
    its last bucket (every ``count_at_most(2**e)`` exact)."""
    merged: dict[tuple[str, str, str], Cell] = {}
    for state in states:
        if state.get("version") == octave.VERSION:
            cells = octave.cells(octave.of_document(state))
        else:
            cells = Breakdown.merge_wire([state["breakdown"]])
        for key, cell in cells.items():
            if (mine := merged.get(key)) is None:
                merged[key] = cell
            else:
                mine.merge(cell)
    return merged
