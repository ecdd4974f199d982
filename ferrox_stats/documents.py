"""The JSON documents the API serves and the dashboard renders first, from the live state.

Both ``api`` and ``web`` build their answers here, so the page's first paint and the
polls that follow say the same thing. Values nothing measured stay ``None``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .core.requests import Record, Summary, page_entries
from .core.ring import Page
from .live import LiveSnapshot


def ring_page(page: Page[Record]) -> dict[str, Any]:
    """A since-cursor page, FreeToken-shaped (``entries``, ``next_cursor``) plus the rest."""
    return {
        "instance": page.instance,
        "entries": page_entries(page),
        "next_cursor": page.next_cursor,
        "missed": page.missed,
        "recorded_total": page.recorded_total,
        "reset": page.reset,
    }


def summary(s: Summary) -> dict[str, Any]:
    """Percentiles and TTFT mean over what the ring retains, and the window they span."""
    return {
        "duration_ms": {
            "p50": s.duration_p50_ms,
            "p95": s.duration_p95_ms,
            "p99": s.duration_p99_ms,
        },
        "ttft_ms": {"p50": s.ttft_p50_ms, "p95": s.ttft_p95_ms, "p99": s.ttft_p99_ms},
        "ttft_mean_ms": s.ttft_mean_ms,
        "window": {"requests": s.window_requests, "seconds": s.window_seconds},
    }


def stats(snapshot: LiveSnapshot) -> dict[str, Any]:
    """The live ``/v1/stats`` document, ferrox/FreeToken-shaped."""
    serving = snapshot.serving
    decode, prefill = serving.decode, serving.prefill
    assert decode is not None and prefill is not None
    archive = snapshot.archive
    return {
        "instance": snapshot.instance,
        "replica": snapshot.replica,
        "uptime_s": snapshot.uptime_s,
        "throughput": {
            "decode_tps": decode.per_second,
            "prefill_tps": prefill.per_second,
            "window_s": decode.window_s,
            "decode_samples": decode.samples,
            "prefill_samples": prefill.samples,
        },
        "requests": {
            "active": serving.active,
            "completed": serving.completed,
            "aborts": dict(sorted(serving.aborts.items())),
            "prompt_tokens_total": serving.prompt_tokens_total,
            "completion_tokens_total": serving.completion_tokens_total,
            "recorded_total": snapshot.recorded_total,
            "p95_ms": snapshot.summary.duration_p95_ms,
            "ttft_mean_ms": snapshot.summary.ttft_mean_ms,
            "window": {
                "requests": snapshot.summary.window_requests,
                "seconds": snapshot.summary.window_seconds,
            },
        },
        "pool": {
            "occupancy": snapshot.pool_occupancy,
            "queue_depth": snapshot.queue_depth,
            "gauges_refused": snapshot.gauges_refused,
        },
        "archive": None if archive is None else _archive(asdict(archive)),
    }


def _archive(health: dict[str, Any]) -> dict[str, Any]:
    health["dropped"] = dict(sorted(health["dropped"].items()))
    return health


def admin_stats(page: Page[Record], snapshot: LiveSnapshot) -> dict[str, Any]:
    """What the dashboard polls: a ring page, the summaries and the live counters at once."""
    document = ring_page(page)
    document["summary"] = summary(snapshot.summary)
    document["live"] = stats(snapshot)
    return document
