"""How values read on the dashboard's pages: a value nothing measured is "—", never 0.

``static/ferrox_stats/format.js`` mirrors each format by name (``FORMATS``), so
the server's first paint and the polled updates read alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ..archive.rows import at_ms_to_datetime, outcome
from ..core.requests import RECORD_FIELDS, Record

EMPTY = "—"


def count(value: int | None) -> str:
    return EMPTY if value is None else f"{value:,}"


# From here on a tenth is noise on a dashboard (4,962 ms, 10,881 tok/s).
WHOLE_FROM = 999.95


def decimal(value: float | None) -> str:
    """Rates and milliseconds: one decimal place, none from a thousand up."""
    if value is None or not math.isfinite(value):
        return EMPTY
    # Half away from zero on the float's exact value, as the script's toLocaleString
    # rounds, so both paint 120.25 as "120.3" (``:.1f`` would give "120.2").
    step = Decimal("1") if abs(value) >= WHOLE_FROM else Decimal("0.1")
    return f"{Decimal(value).quantize(step, rounding=ROUND_HALF_UP):,}"


def percent(fraction: float | None) -> str:
    return EMPTY if fraction is None else decimal(fraction * 100)


def total(counts: Mapping[str, int] | None) -> str:
    """The sum of counts by reason; ``None`` (nothing reports them) stays unmeasured."""
    return EMPTY if counts is None else count(sum(counts.values()))


def reasons(counts: Mapping[str, int] | None) -> str:
    """``"timeout 2 · explicit 1"``: each reason with its count, largest first."""
    if not counts:
        return ""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return " · ".join(f"{reason} {n:,}" for reason, n in ranked)


def rate_window(throughput: Mapping[str, Any] | None) -> str:
    """What the decode/prefill rates span: ``"5 s window · 12 samples"``."""
    if not throughput:
        return ""
    window = throughput.get("window_s")
    samples = throughput.get("decode_samples")
    text = f"{window:g} s window"
    return text if samples is None else f"{text} · {samples:,} samples"


def latency_window(window: Mapping[str, Any] | None) -> str:
    """What the percentiles span: the ring's retained requests and their time range."""
    if not window or not window.get("requests"):
        return "no finished requests in the ring"
    seconds = window.get("seconds")
    text = f"last {window['requests']:,} requests"
    return text if seconds is None else f"{text} · {decimal(seconds)} s"


def text(value: Any) -> str:
    return EMPTY if value is None or value == "" else str(value)


def archive_state(health: Mapping[str, Any] | None) -> str:
    """Why the archive counters read "—", or the writer's last error."""
    if health is None:
        return "no archive sink in this process"
    error = health.get("last_error")
    return f"last error: {error}" if error else ""


def uptime(seconds: float | None) -> str:
    """``"42 s"``, ``"12 min"``, ``"3 h 20 min"``, ``"2 d 3 h"``."""
    if seconds is None:
        return EMPTY
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


FORMATS: dict[str, Callable[[Any], str]] = {
    "count": count,
    "decimal": decimal,
    "percent": percent,
    "total": total,
    "reasons": reasons,
    "rate_window": rate_window,
    "latency_window": latency_window,
    "archive_state": archive_state,
    "uptime": uptime,
    "text": text,
}


def lookup(document: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path; ``None`` where any step is missing or null."""
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def utc_time(at_ms: int | None) -> tuple[str, str]:
    """``("HH:MM:SS", ISO 8601)`` in UTC, so every viewer reads the same clock."""
    if at_ms is None:
        return EMPTY, ""
    moment = at_ms_to_datetime(at_ms)
    # The ISO form the script's ``toISOString()`` writes.
    return moment.strftime("%H:%M:%S"), moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def utc_datetime(at_ms: int | None) -> str:
    if at_ms is None:
        return EMPTY
    return at_ms_to_datetime(at_ms).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def row(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The cells of one finished request in a table (dashboard and history alike)."""
    record = Record(**{name: wire.get(name) for name in RECORD_FIELDS})
    time, iso = utc_time(record.at_ms)
    kind = outcome(record)
    return {
        "seq": wire.get("seq"),
        "id": wire.get("id"),
        "request_id": record.request_id,
        "time": time,
        "datetime": utc_datetime(record.at_ms)[:19],
        "iso": iso,
        "model": text(record.model),
        "route": text(record.route),
        "status": text(record.status),
        "outcome": kind,
        "outcome_text": f"aborted: {record.aborted}" if kind == "aborted" else kind,
        "tokens": f"{count(record.prompt_tokens)} → {count(record.completion_tokens)}",
        "ttft": decimal(record.ttft_ms),
        "duration": decimal(record.duration_ms),
        "decode_tps": decimal(wire.get("decode_tps")),
        "replica": text(record.replica),
    }


def _flag(value: bool | None) -> str:
    return EMPTY if value is None else ("yes" if value else "no")


def detail(wire: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every field of one finished request, in sections, as its detail page reads them."""
    cells = row(wire)
    return [
        (
            "Request",
            [
                ("Request id", text(wire.get("request_id"))),
                ("Finished (UTC)", utc_datetime(wire.get("at_ms"))),
                ("Outcome", cells["outcome_text"]),
                ("HTTP status", cells["status"]),
                ("Finish reason", text(wire.get("finish_reason"))),
                ("Error", text(wire.get("error"))),
            ],
        ),
        (
            "Served",
            [
                ("Route", cells["route"]),
                ("Model", cells["model"]),
                ("Stream", _flag(wire.get("stream"))),
                ("Replica", cells["replica"]),
                ("Client", text(wire.get("client"))),
                ("Via API key", text(wire.get("via_api_key"))),
            ],
        ),
        (
            "Tokens",
            [
                ("Prompt", count(wire.get("prompt_tokens"))),
                ("Completion", count(wire.get("completion_tokens"))),
                ("Cached", count(wire.get("cached_tokens"))),
            ],
        ),
        (
            "Latency",
            [
                ("Queue (ms)", decimal(wire.get("queue_ms"))),
                ("TTFT (ms)", cells["ttft"]),
                ("Duration (ms)", cells["duration"]),
                ("Decode (ms)", decimal(wire.get("decode_ms"))),
                ("Decode tok/s", cells["decode_tps"]),
                ("ITL (ms)", decimal(wire.get("itl_ms"))),
            ],
        ),
    ]
