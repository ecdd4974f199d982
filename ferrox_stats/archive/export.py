"""Streaming a range of the archive as CSV or JSON Lines, in constant memory.

Rows are the wire dicts every reader shares (``core.requests.entry`` plus the row's
``id``), read oldest first through ``FinishedRequest.objects.entries()``, which fetches
in chunks; a writer holds one row at a time.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from ..core.requests import Record, entry
from .rows import MAX_AT_MS, MIN_AT_MS, at_ms_to_datetime

# Every column, in a stable order: the wire dict's keys, then the archive row's id.
COLUMNS: tuple[str, ...] = (*entry(Record()), "id")

_EPOCH_MS = re.compile(r"-?[0-9]+")


class Writable(Protocol):
    """Where a writer writes: a text file, ``sys.stdout``, a command's ``self.stdout``."""

    def write(self, text: str, /) -> object: ...


def parse_moment(text: str) -> datetime:
    """An ISO 8601 datetime (naive means UTC) or epoch milliseconds, as an aware datetime."""
    text = text.strip()
    if _EPOCH_MS.fullmatch(text):
        at_ms = int(text)
        if not MIN_AT_MS <= at_ms <= MAX_AT_MS:
            raise ValueError(f"epoch milliseconds {text} are outside the datetime range")
        return at_ms_to_datetime(at_ms)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "expected an ISO 8601 datetime (like 2026-01-31T12:00:00Z) or epoch "
            f"milliseconds, got {text!r}"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def export_entries(
    since: datetime | None = None,
    until: datetime | None = None,
    filters: Mapping[str, Any] | None = None,
    *,
    using: str = "default",
    chunk_size: int = 2000,
) -> Iterator[dict[str, Any]]:
    """Rows finished in ``[since, until)`` that match ``filters``, oldest first, streamed."""
    from ..models import FinishedRequest

    qs = FinishedRequest.objects.using(using).window(since, until).matching(filters or {})
    return qs.order_by("finished_at", "id").entries(chunk_size=chunk_size)  # type: ignore[no-any-return]


CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/jsonl"}


def lines(entries: Iterable[Mapping[str, Any]], fmt: str) -> Iterator[str]:
    """The export as ``fmt`` ("csv" or "jsonl"), one line at a time (for streaming)."""
    if fmt == "csv":
        return csv_lines(entries)
    if fmt == "jsonl":
        return jsonl_lines(entries)
    raise ValueError(f"format must be one of {', '.join(CONTENT_TYPES)}, got {fmt!r}")


def csv_lines(entries: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A header, then one RFC 4180 line per entry.

    ``None`` is an empty field, booleans are ``true``/``false``, floats are written in
    their shortest round-trip form.
    """
    writer = csv.writer(Echo())
    yield writer.writerow(COLUMNS)
    for row in entries:
        yield writer.writerow([_csv_field(row[column]) for column in COLUMNS])


def jsonl_lines(entries: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """One JSON object per entry and line, keys in ``COLUMNS`` order, ``null`` for ``None``."""
    for row in entries:
        yield json.dumps({column: row[column] for column in COLUMNS}, allow_nan=False) + "\n"


def write_csv(entries: Iterable[Mapping[str, Any]], out: Writable) -> int:
    """Write ``csv_lines(entries)`` to ``out``; return the rows written (header aside)."""
    return _write(csv_lines(entries), out) - 1


def write_jsonl(entries: Iterable[Mapping[str, Any]], out: Writable) -> int:
    """Write ``jsonl_lines(entries)`` to ``out``; return the rows written."""
    return _write(jsonl_lines(entries), out)


WRITERS: dict[str, Callable[[Iterable[Mapping[str, Any]], Writable], int]] = {
    "csv": write_csv,
    "jsonl": write_jsonl,
}


class Echo:
    """A file whose ``write`` returns what it was given: ``csv.writer`` then yields lines."""

    def write(self, text: str) -> str:
        return text


def _write(chunks: Iterator[str], out: Writable) -> int:
    written = 0
    for line in chunks:
        out.write(line)
        written += 1
    return written


def _csv_field(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        # The spelling JSON uses, so both formats read the same.
        return "true" if value else "false"
    return value
