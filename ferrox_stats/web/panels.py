"""The dashboard's counters and charts: what each shows, and where its values are.

The template renders each counter with its ``path`` and ``fmt`` as data attributes;
the page's script reads the same paths out of every poll and formats them by the
same names, so adding a counter here is the whole change. A chart's lines are named
by ``static/ferrox_stats/charts.js``, keyed by the chart's ``key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import display


@dataclass(frozen=True)
class Counter:
    label: str
    path: str
    fmt: str
    unit: str = ""
    # A second, smaller line: the window a value spans, or its breakdown by reason.
    note_path: str = ""
    note_fmt: str = ""


@dataclass(frozen=True)
class Group:
    title: str
    counters: tuple[Counter, ...]


# Ordered so that on a laptop the groups fill two rows of nine counters each.
GROUPS = (
    Group(
        "Requests",
        (
            Counter("In flight", "live.requests.active", "count"),
            Counter("Completed", "live.requests.completed", "count"),
            Counter(
                "Aborts",
                "live.requests.aborts",
                "total",
                note_path="live.requests.aborts",
                note_fmt="reasons",
            ),
        ),
    ),
    Group(
        "Throughput",
        (
            Counter(
                "Decode",
                "live.throughput.decode_tps",
                "decimal",
                "tok/s",
                note_path="live.throughput",
                note_fmt="rate_window",
            ),
            Counter("Prefill", "live.throughput.prefill_tps", "decimal", "tok/s"),
            Counter("Prompt tokens", "live.requests.prompt_tokens_total", "count"),
            Counter("Completion tokens", "live.requests.completion_tokens_total", "count"),
        ),
    ),
    Group(
        "Pool",
        (
            Counter("Occupancy", "live.pool.occupancy", "percent", "%"),
            Counter("Queue depth", "live.pool.queue_depth", "decimal"),
        ),
    ),
    Group(
        "Latency",
        (
            Counter(
                "Duration p50",
                "summary.duration_ms.p50",
                "decimal",
                "ms",
                note_path="summary.window",
                note_fmt="latency_window",
            ),
            Counter("Duration p95", "summary.duration_ms.p95", "decimal", "ms"),
            Counter("TTFT p50", "summary.ttft_ms.p50", "decimal", "ms"),
            Counter("TTFT p95", "summary.ttft_ms.p95", "decimal", "ms"),
            Counter("TTFT mean", "summary.ttft_mean_ms", "decimal", "ms"),
        ),
    ),
    Group(
        "Archive",
        (
            Counter(
                "Persisted",
                "live.archive.persisted",
                "count",
                note_path="live.archive",
                note_fmt="archive_state",
            ),
            Counter("Pending", "live.archive.pending", "count"),
            Counter(
                "Dropped",
                "live.archive.dropped",
                "total",
                note_path="live.archive.dropped",
                note_fmt="reasons",
            ),
            Counter("Dead-lettered", "live.archive.dead_lettered", "count"),
        ),
    ),
)


@dataclass(frozen=True)
class Chart:
    key: str  # the element is "fx-chart-<key>"; charts.js draws the lines it names
    title: str
    unit: str
    description: str  # what a screen reader hears in place of the picture


CHARTS = (
    Chart("throughput", "Throughput", "tok/s", "Decode and prefill tokens per second"),
    Chart("duration", "Duration", "ms, p50 and p95", "Request duration percentiles"),
    Chart("ttft", "Time to first token", "ms, p50 and p95", "Time-to-first-token percentiles"),
)


@dataclass(frozen=True)
class Shown:
    """A counter with its value and note as the first paint reads them."""

    counter: Counter
    value: str
    note: str


def render(document: Mapping[str, Any]) -> list[tuple[Group, list[Shown]]]:
    """Every group's counters, formatted from an admin-stats document."""
    return [(group, [_shown(counter, document) for counter in group.counters]) for group in GROUPS]


def _shown(counter: Counter, document: Mapping[str, Any]) -> Shown:
    value = display.FORMATS[counter.fmt](display.lookup(document, counter.path))
    note = ""
    if counter.note_fmt:
        note = display.FORMATS[counter.note_fmt](display.lookup(document, counter.note_path))
    return Shown(counter, value, note)
