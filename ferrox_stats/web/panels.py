"""The per-process page's counters and charts: what each shows, and where its values are.

The template renders each counter with its ``path`` and ``fmt`` as data attributes;
the page's script reads the same paths out of every poll and formats them by the
same names, so adding a counter here is the whole change. A chart's lines are named
by ``static/ferrox_stats/charts.js``, keyed by the chart's ``key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from . import display


@dataclass(frozen=True)
class Counter:
    label: str | Promise
    path: str
    fmt: str
    unit: str = ""
    # A second, smaller line: the window a value spans, or its breakdown by reason.
    note_path: str = ""
    note_fmt: str = ""


@dataclass(frozen=True)
class Group:
    title: str | Promise
    counters: tuple[Counter, ...]


# Ordered so that on a laptop the groups fill two rows of nine counters each.
GROUPS = (
    Group(
        _("Requests"),
        (
            Counter(_("In flight"), "live.requests.active", "count"),
            Counter(_("Completed"), "live.requests.completed", "count"),
            Counter(
                _("Aborts"),
                "live.requests.aborts",
                "total",
                note_path="live.requests.aborts",
                note_fmt="reasons",
            ),
        ),
    ),
    Group(
        _("Throughput"),
        (
            Counter(
                _("Decode"),
                "live.throughput.decode_tps",
                "decimal",
                "tok/s",
                note_path="live.throughput",
                note_fmt="rate_window",
            ),
            Counter(_("Prefill"), "live.throughput.prefill_tps", "decimal", "tok/s"),
            Counter(_("Prompt tokens"), "live.requests.prompt_tokens_total", "count"),
            Counter(_("Completion tokens"), "live.requests.completion_tokens_total", "count"),
        ),
    ),
    Group(
        _("Pool"),
        (
            Counter(_("Occupancy"), "live.pool.occupancy", "percent", "%"),
            Counter(_("Queue depth"), "live.pool.queue_depth", "decimal"),
        ),
    ),
    Group(
        _("Latency"),
        (
            Counter(
                _("Duration p50"),
                "summary.duration_ms.p50",
                "decimal",
                "ms",
                note_path="summary.window",
                note_fmt="latency_window",
            ),
            Counter(_("Duration p95"), "summary.duration_ms.p95", "decimal", "ms"),
            Counter(_("TTFT p50"), "summary.ttft_ms.p50", "decimal", "ms"),
            Counter(_("TTFT p95"), "summary.ttft_ms.p95", "decimal", "ms"),
            Counter(_("TTFT mean"), "summary.ttft_mean_ms", "decimal", "ms"),
        ),
    ),
    Group(
        _("Archive"),
        (
            Counter(
                _("Persisted"),
                "live.archive.persisted",
                "count",
                note_path="live.archive",
                note_fmt="archive_state",
            ),
            Counter(_("Pending"), "live.archive.pending", "count"),
            Counter(
                _("Dropped"),
                "live.archive.dropped",
                "total",
                note_path="live.archive.dropped",
                note_fmt="reasons",
            ),
            Counter(_("Dead-lettered"), "live.archive.dead_lettered", "count"),
        ),
    ),
)


@dataclass(frozen=True)
class Chart:
    key: str  # the element is "fx-chart-<key>"; charts.js draws the lines it names
    title: str | Promise
    unit: str | Promise
    description: str | Promise  # what a screen reader hears in place of the picture


CHARTS = (
    Chart("throughput", _("Throughput"), "tok/s", _("Decode and prefill tokens per second")),
    Chart("duration", _("Duration"), _("ms, p50 and p95"), _("Request duration percentiles")),
    Chart(
        "ttft", _("Time to first token"), _("ms, p50 and p95"), _("Time-to-first-token percentiles")
    ),
)


@dataclass(frozen=True)
class Shown:
    """A counter with its value and note as the first paint reads them."""

    counter: Counter
    value: str
    note: str


def render(
    document: Mapping[str, Any], groups: tuple[Group, ...] = GROUPS
) -> list[tuple[Group, list[Shown]]]:
    """Every group's counters, formatted from the document they are read from (an
    admin-stats document for ``GROUPS``; the fleet page passes its own)."""
    return [(group, [_shown(counter, document) for counter in group.counters]) for group in groups]


def _shown(counter: Counter, document: Mapping[str, Any]) -> Shown:
    value = display.FORMATS[counter.fmt](display.lookup(document, counter.path))
    note = ""
    if counter.note_fmt:
        note = display.FORMATS[counter.note_fmt](display.lookup(document, counter.note_path))
    return Shown(counter, value, note)
