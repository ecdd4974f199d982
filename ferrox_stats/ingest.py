"""Ingest: finished records that engines elsewhere report, answered item by item.

A batch is validated item by item (an unknown field, a wrong type, NaN, a negative
or absurd value, a string shaped like a secret key: that item is rejected with a
reason that names the field, never its value). The valid ones are written to the
archive synchronously (so "accepted" means stored), idempotent on the producer's
``request_id`` (and ``instance``/``seq``) within the token's replica, then enter this
process's ring and counters. Those keys are the producer's word: they are namespaced by
the token's replica and kept apart from the server's own records, so no producer can
make another replica's records, or this deployment's, answer ``duplicate``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .archive.batch import DEAD, DUPLICATE, INSERTED, write_batch
from .archive.rows import MAX_LENGTHS, Pending, text_problem
from .core.rate import gauge_problem
from .core.requests import RECORD_FIELDS, Record
from .live import Recorder

ACCEPTED = "accepted"
REJECTED = "rejected"

# What a producer may send per record: every Record field except ``replica`` (its
# token decides that) plus its own ring ``seq``. Derived fields are not inputs.
ITEM_FIELDS = frozenset(RECORD_FIELDS) - {"replica"} | {"seq"}
REQUIRED_FIELDS = ("request_id", "at_ms")
STRING_FIELDS = tuple(name for name in MAX_LENGTHS if name in ITEM_FIELDS)
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens")
TIME_FIELDS = ("ttft_ms", "duration_ms", "queue_ms", "decode_ms")
GAUGE_FIELDS = frozenset({"pool_used", "pool_total", "queue_depth"})

# Beyond these a value is not a measurement but a bug in the producer.
MAX_TOKENS = 100_000_000
MAX_TIME_MS = 7 * 24 * 3600 * 1000.0  # a week for one request
MAX_FUTURE_MS = 5 * 60 * 1000  # clock skew tolerated for a finish time
MAX_PAST_MS = 400 * 24 * 3600 * 1000  # older than this cannot be live telemetry
MAX_SEQ = 2**63 - 1

# Strings shaped like API secrets (OpenAI-style keys, our own tokens, bearer headers)
# never enter telemetry: a key is reported by its label.
SECRET_SHAPE = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|fxs_[A-Za-z0-9_\-]{8,}|bearer\s)", re.I)


# A name a producer made up is echoed only when it is a plain identifier: a made-up
# name may itself be a key ("usage by key": {"sk-…": …}).
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def describe_name(name: Any) -> str:
    """How an unknown field is named in a reason: quoted if plain, else not at all."""
    if isinstance(name, str) and PLAIN_NAME.fullmatch(name) and not SECRET_SHAPE.search(name):
        return repr(name)
    return "(a name that is not a plain identifier)"


def string_problem(name: str, value: Any, max_length: int) -> str | None:
    """Why ``value`` cannot be reported as the string ``name``, or ``None`` if it can.

    Stricter than what the archive can store: not empty, and never a secret.
    """
    if isinstance(value, str) and not 0 < len(value) <= max_length:
        return f"{name} must be 1 to {max_length} characters"
    if problem := text_problem(name, value, max_length):
        return problem
    if SECRET_SHAPE.search(value):
        return f"{name} looks like a secret key; report keys by their label"
    return None


@dataclass
class ItemResult:
    index: int
    status: str
    request_id: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "request_id": self.request_id,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass
class IngestResult:
    results: list[ItemResult] = field(default_factory=list)
    gauges: str | None = None  # "accepted", a rejection reason, or None when none sent

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_item(item: Any, now_ms: int) -> Record | str:
    """The record an item describes, or why it is rejected."""
    if not isinstance(item, dict):
        return "each record must be a JSON object"
    unknown = sorted(set(item) - ITEM_FIELDS)
    if unknown:
        return f"unknown field {describe_name(unknown[0])}"
    for name in REQUIRED_FIELDS:
        if item.get(name) is None:
            return f"{name} is required"
    for name in STRING_FIELDS:
        value = item.get(name)
        if value is not None and (problem := string_problem(name, value, MAX_LENGTHS[name])):
            return problem
    at_ms = item["at_ms"]
    if not _is_int(at_ms):
        return "at_ms must be an integer (epoch milliseconds)"
    if not now_ms - MAX_PAST_MS <= at_ms <= now_ms + MAX_FUTURE_MS:
        return "at_ms is too far from now"
    status = item.get("status")
    if status is not None and not (_is_int(status) and 100 <= status <= 599):
        return "status must be an HTTP status code (100-599)"
    stream = item.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return "stream must be a boolean"
    for name in TOKEN_FIELDS:
        value = item.get(name)
        if value is not None and not (_is_int(value) and 0 <= value <= MAX_TOKENS):
            return f"{name} must be an integer from 0 to {MAX_TOKENS}"
    for name in TIME_FIELDS:
        value = item.get(name)
        if value is None:
            continue
        # math.isfinite() of an int too large for a float would raise.
        if not _is_number(value) or not (isinstance(value, int) or math.isfinite(value)):
            return f"{name} must be a finite number"
        if not 0 <= value <= MAX_TIME_MS:
            return f"{name} must be from 0 to {MAX_TIME_MS:.0f} ms"
    seq = item.get("seq")
    if seq is not None and not (_is_int(seq) and 0 <= seq <= MAX_SEQ):
        return "seq must be a non-negative integer"
    values = {name: item.get(name) for name in RECORD_FIELDS if name != "replica"}
    for name in TIME_FIELDS:
        value = values[name]
        if value is not None:
            values[name] = float(value)
    return Record(**values)


def validate_gauges(gauges: Any) -> dict[str, float] | str:
    """Gauges a report carried, or why they are rejected; absent ones stay absent."""
    if not isinstance(gauges, dict):
        return "gauges must be a JSON object"
    unknown = sorted(set(gauges) - GAUGE_FIELDS)
    if unknown:
        return f"unknown gauge {describe_name(unknown[0])}"
    if problem := gauge_problem(**gauges):
        return problem
    found = {name: float(value) for name, value in gauges.items() if value is not None}
    if ("pool_used" in found) != ("pool_total" in found):
        return "pool_used and pool_total come together"
    return found


def ingest(
    items: list[Any],
    *,
    replica: str,
    instance: str | None,
    recorder: Recorder,
    gauges: Any = None,
    using: str = "default",
) -> IngestResult:
    """Validate, archive and record a batch; every item gets exactly one answer."""
    now_ms = recorder.clock.wall_ms()
    result = IngestResult()
    pending: list[Pending] = []
    positions: list[int] = []
    for index, item in enumerate(items):
        checked = validate_item(item, now_ms)
        if isinstance(checked, str):
            request_id = item.get("request_id") if isinstance(item, dict) else None
            # Echoed only if it could be stored: never a secret, and never a string the
            # response cannot encode (a lone surrogate).
            echo = (
                request_id
                if isinstance(request_id, str)
                and string_problem("request_id", request_id, MAX_LENGTHS["request_id"]) is None
                else None
            )
            result.results.append(ItemResult(index, REJECTED, echo, checked))
            continue
        record = checked._replace(replica=replica)
        result.results.append(ItemResult(index, "", record.request_id))
        pending.append(Pending(item.get("seq"), record, instance, ingested=True))
        positions.append(index)

    if pending:
        written = write_batch(pending, using)
        reasons = {id(item): reason for item, reason in written.dead}
        for item, position, outcome in zip(pending, positions, written.outcomes, strict=True):
            answer = result.results[position]
            if outcome == INSERTED:
                answer.status = ACCEPTED
                recorder.ingested(item.record)
            elif outcome == DUPLICATE:
                answer.status = DUPLICATE
            else:
                assert outcome == DEAD
                answer.status = REJECTED
                # The database's first line names the constraint; details stay in the log.
                answer.reason = reasons[id(item)].splitlines()[0][:200]

    if gauges is not None:
        checked_gauges = validate_gauges(gauges)
        if isinstance(checked_gauges, str):
            result.gauges = checked_gauges
        else:
            recorder.observe_gauges(
                pool_used=checked_gauges.get("pool_used"),
                pool_total=checked_gauges.get("pool_total"),
                queue_depth=checked_gauges.get("queue_depth"),
            )
            result.gauges = ACCEPTED
    return result


__all__ = ["ACCEPTED", "DUPLICATE", "REJECTED", "IngestResult", "ingest"]
