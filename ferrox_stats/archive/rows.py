"""How a ``Record`` becomes an archive row and back, and which records can never be one."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from ..core.requests import Record, entry

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)

# Column order for COPY and for building rows; matches FinishedRequest's fields.
COLUMNS: tuple[str, ...] = (
    "request_id",
    "finished_at",
    "route",
    "model",
    "status",
    "stream",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_ms",
    "duration_ms",
    "queue_ms",
    "decode_ms",
    "finish_reason",
    "aborted",
    "error",
    "client",
    "via_api_key",
    "replica",
    "instance",
    "seq",
    "outcome",
    "ingested",
)

# Limits the database enforces by raising for the whole batch; checking them first
# dead-letters one bad row with a clear reason. Range and sign rules (status, times)
# are left to the table's CHECK constraints.
MAX_LENGTHS = {
    "request_id": 200,
    "route": 200,
    "model": 200,
    "finish_reason": 64,
    "aborted": 64,
    "error": 200,
    "client": 200,
    "via_api_key": 100,
    "replica": 200,
    "instance": 200,
}
INT_FIELDS = ("status", "prompt_tokens", "completion_tokens", "cached_tokens")
FLOAT_FIELDS = ("ttft_ms", "duration_ms", "queue_ms", "decode_ms")
MAX_BIGINT = 2**63 - 1
MAX_SMALLINT = 2**15 - 1
# datetime's own range, in epoch milliseconds.
MIN_AT_MS = (datetime(1, 1, 2, tzinfo=UTC) - EPOCH) // ONE_MS
MAX_AT_MS = (datetime(9999, 12, 30, tzinfo=UTC) - EPOCH) // ONE_MS


class Pending(NamedTuple):
    """A record waiting to be archived, with the ring seq and process that recorded it.

    ``ingested`` says whose keys they are: an ingest token's replica (True) or this
    deployment's own processes (False); the archive keeps the two namespaces apart.
    """

    seq: int | None
    record: Record
    instance: str | None
    ingested: bool = False


def at_ms_to_datetime(at_ms: int) -> datetime:
    return EPOCH + at_ms * ONE_MS


def datetime_to_at_ms(moment: datetime) -> int:
    return (moment - EPOCH) // ONE_MS


def outcome(record: Record) -> str:
    """``aborted``, ``error`` (an error, or an HTTP status >= 400), else ``ok``."""
    if record.aborted is not None:
        return "aborted"
    if record.error is not None or (record.status is not None and record.status >= 400):
        return "error"
    return "ok"


def text_problem(name: str, value: Any, limit: int) -> str | None:
    """Why ``value`` cannot be stored in the text column ``name``, or ``None``."""
    if not isinstance(value, str):
        return f"{name} must be a string"
    if len(value) > limit:
        return f"{name} is longer than {limit} characters"
    if "\x00" in value:
        return f"{name} contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{name} is not valid Unicode (a lone surrogate)"
    return None


def invalid_reason(item: Pending) -> str | None:
    """Why this record can never be a row, or ``None`` if it can."""
    record = item.record
    at_ms = record.at_ms
    if not isinstance(at_ms, int) or isinstance(at_ms, bool):
        return "at_ms is required and must be an integer"
    if not MIN_AT_MS <= at_ms <= MAX_AT_MS:
        return f"at_ms {at_ms} is outside the datetime range"
    if record.replica is None:
        return "replica is required"
    values = record._asdict()
    values["instance"] = item.instance
    for name, limit in MAX_LENGTHS.items():
        value = values[name]
        if value is not None and (problem := text_problem(name, value, limit)):
            return problem
    for name in INT_FIELDS:
        value = values[name]
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} must be an integer"
        if not -MAX_BIGINT <= value <= (MAX_SMALLINT if name == "status" else MAX_BIGINT):
            return f"{name} {value} is out of range"
    for name in FLOAT_FIELDS:
        value = values[name]
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"{name} must be a number"
        if not math.isfinite(value):
            return f"{name} is not finite"
    if record.stream is not None and not isinstance(record.stream, bool):
        return "stream must be a boolean"
    return None


def row_values(item: Pending) -> tuple[Any, ...]:
    """The row for a valid record, in ``COLUMNS`` order."""
    r = item.record
    return (
        r.request_id,
        at_ms_to_datetime(r.at_ms),  # type: ignore[arg-type]
        r.route,
        r.model,
        r.status,
        r.stream,
        r.prompt_tokens,
        r.completion_tokens,
        r.cached_tokens,
        r.ttft_ms,
        r.duration_ms,
        r.queue_ms,
        r.decode_ms,
        r.finish_reason,
        r.aborted,
        r.error,
        r.client,
        r.via_api_key,
        r.replica,
        item.instance,
        item.seq,
        outcome(r),
        item.ingested,
    )


def record_from_values(values: dict[str, Any]) -> Record:
    """The ``Record`` a row holds, from a ``.values()`` dict (or a model's ``__dict__``)."""
    return Record(
        request_id=values["request_id"],
        at_ms=datetime_to_at_ms(values["finished_at"]),
        route=values["route"],
        model=values["model"],
        status=values["status"],
        stream=values["stream"],
        prompt_tokens=values["prompt_tokens"],
        completion_tokens=values["completion_tokens"],
        cached_tokens=values["cached_tokens"],
        ttft_ms=values["ttft_ms"],
        duration_ms=values["duration_ms"],
        queue_ms=values["queue_ms"],
        decode_ms=values["decode_ms"],
        finish_reason=values["finish_reason"],
        aborted=values["aborted"],
        error=values["error"],
        client=values["client"],
        via_api_key=values["via_api_key"],
        replica=values["replica"],
    )


def row_entry(values: dict[str, Any]) -> dict[str, Any]:
    """The wire dict of an archived row: exactly what the ring served, ``seq`` included."""
    return entry(record_from_values(values), values["seq"])


def dead_letter_payload(item: Pending) -> dict[str, Any]:
    """A JSON-safe copy of the record for the dead-letter table (no NULs, no NaN)."""
    payload: dict[str, Any] = {}
    for key, value in {"seq": item.seq, **item.record._asdict()}.items():
        if isinstance(value, str):
            value = value.replace("\x00", "\\x00")
        elif (isinstance(value, float) and not math.isfinite(value)) or (
            value is not None and not isinstance(value, int | float | bool | str)
        ):
            value = repr(value)
        payload[key] = value
    payload["instance"] = item.instance
    return payload
