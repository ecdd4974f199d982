"""State documents (``state.process_state``'s shape) built by hand, and heartbeat rows."""

from __future__ import annotations

from typing import Any

from ferrox_stats.heartbeat import instance_row

BASE_MS = 1_767_225_600_000  # tests.conftest.FakeClock's wall clock at start


def empty_wire() -> dict[str, Any]:
    return {"zeros": 0, "sum": 0.0, "counts": {}}


def state_doc(
    instance: str = "gpu-1/100/aaaaaaaaaaaa",
    *,
    at_ms: int = BASE_MS,
    started_ms: int | None = None,
    stopped: bool = False,
    active: int = 0,
    completed: int = 0,
    aborts: dict[str, int] | None = None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    decode: tuple[float, float, int] = (0.0, 0.0, 0),  # amount, span_s, samples
    prefill: tuple[float, float, int] = (0.0, 0.0, 0),
    breakdown: list[dict[str, Any]] | None = None,
    archive: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One process's state document; the replica, host and pid come from ``instance``."""
    replica, pid, _ = instance.split("/")
    started = at_ms - 60_000 if started_ms is None else started_ms

    def window(values: tuple[float, float, int]) -> dict[str, Any]:
        amount, span, samples = values
        return {"amount": amount, "span_s": span, "samples": samples, "window_s": 5.0}

    return {
        "version": 1,
        "instance": instance,
        "replica": replica,
        "host": f"host-{replica}",
        "pid": int(pid),
        "started_ms": started,
        "at_ms": at_ms,
        "uptime_s": (at_ms - started) / 1000,
        "stopped": stopped,
        "serving": {
            "active": active,
            "completed": completed,
            "aborts": dict(aborts or {}),
            "prompt_tokens_total": prompt_tokens,
            "completion_tokens_total": completion_tokens,
        },
        "rates": {"decode": window(decode), "prefill": window(prefill)},
        "breakdown": list(breakdown or []),
        "gauges": {"pool_occupancy": None, "queue_depth": None, "refused": 0},
        "recorded_total": completed,
        "sink_errors": 0,
        "archive": archive,
    }


def archive_counts(
    *,
    accepted: int = 0,
    persisted: int = 0,
    pending: int = 0,
    dropped: dict[str, int] | None = None,
) -> dict[str, Any]:
    dropped = dict(dropped or {})
    return {
        "accepted": accepted,
        "persisted": persisted,
        "duplicates": 0,
        "pending": pending,
        "dropped": dropped,
        "dead_lettered": 0,
    }


def save(doc: dict[str, Any], heartbeat_s: float = 2.0, using: str = "default") -> None:
    """Write ``doc`` as its instance's heartbeat row, as the publisher does."""
    row = instance_row(doc, heartbeat_s)
    row.save(using=using)
