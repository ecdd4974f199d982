"""What the fleet page shows: its counters, charts, the instances table and the overview line.

Every value comes from one ``v1/fleet`` document (the heartbeats in the database), so
whichever worker answers a poll, the page shows the same numbers.
``static/ferrox_stats/fleet.js`` reads the same paths out of each poll and builds the
instances table and the overview as ``instance_row`` and ``overview`` do here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext_lazy as _

from . import display
from .panels import Chart, Counter, Group

__all__ = ["CHARTS", "GROUPS", "STATES", "instance_row", "overview", "view"]

# The states a reader gives an instance from its heartbeat's age and its shutdown mark.
STATES = ("live", "stale", "lost", "stopped")


def _percentiles(title: Any, key: str) -> Group:
    """p50, p95 and p99 of one merged latency distribution (seconds, shown in ms)."""
    path = f"totals.latency.{key}"
    return Group(
        title,
        (
            Counter(
                _("p50"),
                f"{path}.p50",
                "milliseconds",
                "ms",
                note_path=path,
                note_fmt="requests_over",
            ),
            Counter(_("p95"), f"{path}.p95", "milliseconds", "ms"),
            Counter(_("p99"), f"{path}.p99", "milliseconds", "ms"),
        ),
    )


# Ordered so that on a laptop the groups fill two rows: nine counters, then eight.
GROUPS = (
    Group(
        _("Requests"),
        (
            Counter(_("In flight"), "totals.active", "count"),
            Counter(_("Completed"), "totals.completed", "count"),
            Counter(
                _("Aborts"),
                "totals.aborts",
                "total",
                note_path="totals.aborts",
                note_fmt="reasons",
            ),
        ),
    ),
    _percentiles(_("Duration"), "duration_s"),
    _percentiles(_("Time to first token"), "ttft_s"),
    Group(
        _("Throughput"),
        (
            Counter(
                _("Decode"),
                "totals.decode_tps",
                "decimal",
                "tok/s",
                note_path="totals",
                note_fmt="rate_window",
            ),
            Counter(_("Prefill"), "totals.prefill_tps", "decimal", "tok/s"),
            Counter(_("Prompt tokens"), "totals.prompt_tokens_total", "count"),
            Counter(_("Completion tokens"), "totals.completion_tokens_total", "count"),
        ),
    ),
    Group(
        _("Archive"),
        (
            Counter(
                _("Persisted"),
                "totals.archive.persisted",
                "count",
                note_path="totals.archive",
                note_fmt="fleet_archive_state",
            ),
            Counter(_("Pending"), "totals.archive.pending", "count"),
            Counter(
                _("Dropped"),
                "totals.archive.dropped",
                "total",
                note_path="totals.archive.dropped",
                note_fmt="reasons",
            ),
            Counter(_("Dead-lettered"), "totals.archive.dead_lettered", "count"),
        ),
    ),
)

# charts.js names each chart's lines (keyed "fleet_<name>") and where they are in a poll.
CHARTS = (
    Chart("fleet_throughput", _("Throughput"), "tok/s", _("Decode and prefill tokens per second")),
    Chart(
        "fleet_duration",
        _("Duration"),
        _("ms, p50, p95 and p99"),
        _("Request duration percentiles"),
    ),
    Chart(
        "fleet_ttft",
        _("Time to first token"),
        _("ms, p50, p95 and p99"),
        _("Time-to-first-token percentiles"),
    ),
)


def overview(document: Mapping[str, Any] | None) -> dict[str, Any]:
    """Instances by state, and the age of the newest heartbeat among them (the fleet's lag)."""
    instances = _instances(document)
    by_state = {state: 0 for state in STATES}
    for instance in instances:
        state = instance.get("state")
        if isinstance(state, str) and state in by_state:
            by_state[state] += 1
    ages = [
        age
        for instance in instances
        if (age := _finite(instance.get("age_s"))) is not None and instance.get("state") == "live"
    ]
    return {**by_state, "newest_age_s": min(ages) if ages else None}


def view(document: Mapping[str, Any] | None) -> dict[str, Any]:
    """The document the page's paths are read from: the fleet's, plus ``derived.overview``."""
    return {**(document or {}), "derived": {"overview": overview(document)}}


def instance_row(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The cells of one instance in the instances table."""
    state = wire.get("state")
    time, iso = display.local_time(wire.get("last_seen_ms"))
    return {
        "instance": display.text(wire.get("instance")),
        "id": wire.get("instance") if isinstance(wire.get("instance"), str) else "",
        "state": state if state in STATES else "unknown",
        "host": display.text(wire.get("host")),
        "pid": display.text(wire.get("pid")),
        "replica": display.text(wire.get("replica")),
        "uptime": display.uptime(wire.get("uptime_s")),
        "last_seen": time,
        "iso": iso,
        "age": display.age(wire.get("age_s")),
        "active": display.count(wire.get("active")),
        "completed": display.count(wire.get("completed")),
        "decode_tps": display.decimal(wire.get("decode_tps")),
        "prefill_tps": display.decimal(wire.get("prefill_tps")),
        "pending": display.count(wire.get("pending")),
        "note": instance_note(wire),
    }


def instance_note(wire: Mapping[str, Any]) -> str:
    """What an operator must know about an instance beyond its numbers."""
    state = wire.get("state")
    notes = []
    if state == "lost":
        lost = wire.get("not_archived")
        notes.append(
            "no heartbeat, no clean shutdown: archive unknown"
            if display.finite(lost) is None
            else f"up to {display.count(lost)} records not archived"
        )
    elif state == "stale":
        notes.append("heartbeats late: not in the totals")
    elif state == "stopped":
        notes.append("shut down cleanly")
    dropped = wire.get("dropped")
    if isinstance(dropped, Mapping) and dropped:
        notes.append(f"dropped: {display.reasons(dropped)}")
    return " · ".join(notes)


def _instances(document: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    found = document.get("instances") if isinstance(document, Mapping) else None
    return [i for i in found if isinstance(i, Mapping)] if isinstance(found, list) else []


def _finite(value: Any) -> float | None:
    number = display.finite(value)
    return None if number is None else float(number)
