"""Factories for records and archived rows."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from ferrox_stats.archive.batch import BatchResult, write_batch
from ferrox_stats.archive.fold import fold
from ferrox_stats.archive.rows import Pending
from ferrox_stats.conf import conf
from ferrox_stats.core.requests import Record

_ids = itertools.count(1)
_seqs = itertools.count()
# 2026-01-01T00:00:00Z, so archived rows have plausible, distinct finish times.
BASE_AT_MS = 1_767_225_600_000


def make_record(**overrides: Any) -> Record:
    """A plausible finished streaming chat request; override any field by name."""
    n = next(_ids)
    fields: dict[str, Any] = {
        "request_id": f"chatcmpl-{n:08d}",
        "at_ms": BASE_AT_MS + n * 1000,
        "route": "/v1/chat/completions",
        "model": "llama-3.1-8b-instruct",
        "status": 200,
        "stream": True,
        "prompt_tokens": 512,
        "completion_tokens": 11,
        "cached_tokens": 0,
        "ttft_ms": 120.5,
        "duration_ms": 640.25,
        "queue_ms": 3.0,
        "decode_ms": 500.0,
        "finish_reason": "stop",
        "aborted": None,
        "error": None,
        "client": "10.0.0.7",
        "via_api_key": "team-search",
        "replica": "test-replica",
    }
    fields.update(overrides)
    return Record(**fields)


def archive(
    records: Iterable[Record], instance: str | None = "test-instance", using: str = "default"
) -> BatchResult:
    """Write records straight to the archive (no queue), with fresh ring seqs; with the
    rollups on, fold the batch's deltas into them (as the writer soon would)."""
    items = [Pending(next(_seqs), record, instance) for record in records]
    result = write_batch(items, using)
    if conf.ROLLUPS:
        fold(using)
    return result
