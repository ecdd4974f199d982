"""How values read on the dashboard's pages: a value nothing measured is "—", never 0.

``static/ferrox_stats/format.js`` mirrors each format by name (``FORMATS``), so
the server's first paint and the polled updates read alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext

from ..archive.rows import MAX_AT_MS, MIN_AT_MS, at_ms_to_datetime, outcome
from ..core.requests import RECORD_FIELDS, Record

EMPTY = "—"

# Every format is total: any value (huge, tiny, negative, NaN, infinite, None, not a
# number at all) reads as some string, never an exception, so no stored or reported
# number can take a page down.

# From here on digits are not read one by one: "1.235e+15", as the script's
# toExponential(3) writes it (a bigger figure on a dashboard is a producer's bug).
EXPONENT_FROM = 1e15
_FOUR_DIGITS = Context(prec=4, rounding=ROUND_HALF_UP)


def _number(value: Any) -> int | float | None:
    """``value`` if it is a finite number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite(value: Any) -> int | float | None:
    """``value`` if it is a finite number (not a bool), else ``None``: a measurement or not."""
    return _number(value)


def _exponent(value: int | float) -> str:
    # Four significant digits, half away from zero on the exact value, as toExponential.
    return f"{_FOUR_DIGITS.create_decimal(value):.3e}"


def count(value: int | None) -> str:
    number = _number(value)
    if number is None:
        return EMPTY
    if abs(number) >= EXPONENT_FROM:
        return _exponent(number)
    if isinstance(number, float):  # a whole count, rounded as decimal() rounds
        return f"{Decimal(number).quantize(Decimal(1), rounding=ROUND_HALF_UP):,}"
    return f"{number:,}"


# From here on a tenth is noise on a dashboard (4,962 ms, 10,881 tok/s).
WHOLE_FROM = 999.95


def decimal(value: float | None) -> str:
    """Rates and milliseconds: one decimal place, none from a thousand up."""
    number = _number(value)
    if number is None:
        return EMPTY
    if abs(number) >= EXPONENT_FROM:
        return _exponent(number)
    # Half away from zero on the float's exact value, as the script's toLocaleString
    # rounds, so both paint 120.25 as "120.3" (``:.1f`` would give "120.2").
    step = Decimal("1") if abs(number) >= WHOLE_FROM else Decimal("0.1")
    return f"{Decimal(number).quantize(step, rounding=ROUND_HALF_UP):,}"


def percent(fraction: float | None) -> str:
    number = _number(fraction)
    return EMPTY if number is None else decimal(number * 100)


def total(counts: Mapping[str, int] | None) -> str:
    """The sum of counts by reason; ``None`` (nothing reports them) stays unmeasured."""
    if not isinstance(counts, Mapping):
        return EMPTY
    return count(sum(n for n in counts.values() if _number(n) is not None))


def reasons(counts: Mapping[str, int] | None) -> str:
    """``"timeout 2 · explicit 1"``: each reason with its count, largest first."""
    if not counts or not isinstance(counts, Mapping):
        return ""
    ranked = sorted(counts.items(), key=lambda item: (-(_number(item[1]) or 0), str(item[0])))
    return " · ".join(f"{reason} {count(n)}" for reason, n in ranked)


def rate_window(throughput: Mapping[str, Any] | None) -> str:
    """What the decode/prefill rates span: ``"5 s window · 12 samples"``."""
    if not throughput or not isinstance(throughput, Mapping):
        return ""
    window = _number(throughput.get("window_s"))
    if window is not None and abs(window) >= EXPONENT_FROM:
        shown = _exponent(window)
    else:
        shown = EMPTY if window is None else format(window, "g")
    samples = throughput.get("decode_samples")
    text = f"{shown} s window"
    return text if samples is None else f"{text} · {count(samples)} samples"


def latency_window(window: Mapping[str, Any] | None) -> str:
    """What the percentiles span: the ring's retained requests and their time range."""
    if not window or not isinstance(window, Mapping) or not window.get("requests"):
        return "no finished requests in the ring"
    seconds = window.get("seconds")
    text = f"last {count(window['requests'])} requests"
    return text if seconds is None else f"{text} · {decimal(seconds)} s"


def text(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= EXPONENT_FROM:
        return _exponent(value)  # str() of a huge int is unreadable, or raises
    return str(value)


def archive_state(health: Mapping[str, Any] | None) -> str:
    """Why the archive counters read "—", or the writer's last error."""
    if not isinstance(health, Mapping):
        return "no archive sink in this process"
    error = health.get("last_error")
    return f"last error: {error}" if error else ""


def uptime(seconds: float | None) -> str:
    """``"42 s"``, ``"12 min"``, ``"3 h 20 min"``, ``"2 d 3 h"``."""
    number = _number(seconds)
    if number is None:
        return EMPTY
    if abs(number) >= EXPONENT_FROM:
        return f"{_exponent(number)} s"
    s = int(number)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def milliseconds(seconds: float | None) -> str:
    """A duration the fleet reports in seconds, read in milliseconds like the ring's."""
    number = _number(seconds)
    return EMPTY if number is None else decimal(number * 1000)


def requests_over(distribution: Mapping[str, Any] | None) -> str:
    """How many requests a fleet percentile is drawn from: ``"over 1,204 requests"``."""
    if not isinstance(distribution, Mapping) or not _number(distribution.get("count")):
        return "no finished requests"
    return f"over {count(distribution['count'])} requests"


def fleet_archive_state(accounting: Mapping[str, Any] | None) -> str:
    """Why the fleet's archive counters read "—"."""
    return "" if isinstance(accounting, Mapping) else "no archive reported"


def unreadable_rows(skipped: int | None) -> str:
    """Heartbeat rows the fleet document skipped (not a state document): said, never hidden."""
    number = _number(skipped)
    return "" if not number else f"{count(skipped)} heartbeat rows unreadable, skipped"


# Below this a heartbeat's age reads to a tenth of a second: the interval is 2 s.
TENTHS_BELOW = 10


def age(seconds: float | None) -> str:
    """How long ago: ``"1.4 s ago"``, ``"42 s ago"``, ``"12 min ago"``."""
    number = _number(seconds)
    if number is None:
        return EMPTY
    if abs(number) < TENTHS_BELOW:
        return f"{decimal(number)} s ago"
    return f"{uptime(number)} ago"


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
    "milliseconds": milliseconds,
    "requests_over": requests_over,
    "fleet_archive_state": fleet_archive_state,
    "age": age,
    "unreadable_rows": unreadable_rows,
}


def lookup(document: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path; ``None`` where any step is missing or null."""
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _moment(at_ms: Any) -> datetime | None:
    """The UTC time of ``at_ms``, or ``None`` when no datetime can hold it."""
    number = _number(at_ms)
    if number is None or not MIN_AT_MS <= number <= MAX_AT_MS:
        return None
    return at_ms_to_datetime(int(number))


def _local(at_ms: Any) -> datetime | None:
    """``at_ms`` in the active time zone (the project's ``TIME_ZONE`` unless a
    middleware activated another), as the Django admin shows times."""
    moment = _moment(at_ms)
    try:
        return None if moment is None else timezone.localtime(moment)
    except OverflowError:  # within hours of year 1 or 9999: no local time holds it
        return None


def zone_name() -> str:
    """The name of the zone times are shown in (``Europe/Berlin``), for labels and the script."""
    return str(timezone.get_current_timezone_name())


def local_time(at_ms: int | None) -> tuple[str, str]:
    """``("HH:MM:SS", ISO 8601)``: the clock time in the active zone, and the instant
    in UTC for ``<time datetime>`` (the form the script's ``toISOString()`` writes)."""
    moment, local = _moment(at_ms), _local(at_ms)
    if moment is None or local is None:
        return EMPTY, ""
    return local.strftime("%H:%M:%S"), moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def local_datetime(at_ms: int | None) -> str:
    local = _local(at_ms)
    return EMPTY if local is None else local.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def row(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The cells of one finished request in a table (dashboard and history alike)."""
    record = Record(**{name: wire.get(name) for name in RECORD_FIELDS})
    time, iso = local_time(record.at_ms)
    kind = outcome(record)
    return {
        "seq": wire.get("seq"),
        "id": wire.get("id"),
        "request_id": record.request_id,
        "time": time,
        "datetime": local_datetime(record.at_ms)[:19],
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
    return EMPTY if value is None else (gettext("yes") if value else gettext("no"))


def detail(wire: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every field of one finished request, in sections, as its detail page reads them."""
    cells = row(wire)
    return [
        (
            gettext("Request"),
            [
                (gettext("Request id"), text(wire.get("request_id"))),
                (
                    gettext("Finished (%(zone)s)") % {"zone": zone_name()},
                    local_datetime(wire.get("at_ms")),
                ),
                (gettext("Outcome"), cells["outcome_text"]),
                (gettext("HTTP status"), cells["status"]),
                (gettext("Finish reason"), text(wire.get("finish_reason"))),
                (gettext("Error"), text(wire.get("error"))),
            ],
        ),
        (
            gettext("Served"),
            [
                (gettext("Route"), cells["route"]),
                (gettext("Model"), cells["model"]),
                (gettext("Stream"), _flag(wire.get("stream"))),
                (gettext("Replica"), cells["replica"]),
                (gettext("Client"), text(wire.get("client"))),
                (gettext("Via API key"), text(wire.get("via_api_key"))),
            ],
        ),
        (
            gettext("Tokens"),
            [
                (gettext("Prompt"), count(wire.get("prompt_tokens"))),
                (gettext("Completion"), count(wire.get("completion_tokens"))),
                (gettext("Cached"), count(wire.get("cached_tokens"))),
            ],
        ),
        (
            gettext("Latency"),
            [
                (gettext("Queue (ms)"), decimal(wire.get("queue_ms"))),
                (gettext("TTFT (ms)"), cells["ttft"]),
                (gettext("Duration (ms)"), cells["duration"]),
                (gettext("Decode (ms)"), decimal(wire.get("decode_ms"))),
                (gettext("Decode tok/s"), cells["decode_tps"]),
                (gettext("ITL (ms)"), decimal(wire.get("itl_ms"))),
            ],
        ),
    ]
