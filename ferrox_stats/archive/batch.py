"""How one batch of pending records is written, and what became of each.

On PostgreSQL the batch is COPYed into a temporary staging table and moved into the
archive with ``INSERT … ON CONFLICT DO NOTHING``; elsewhere it is a bulk insert of the
rows not already archived. Both run in one transaction. A data error sends the batch
row by row, each in a savepoint, so one bad row is dead-lettered with its reason and
the rest still commit. Connection-level errors propagate: the caller keeps the batch
and retries it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DataError, IntegrityError, connections, transaction

from .rows import COLUMNS, Pending, dead_letter_payload, invalid_reason, row_values

# Errors that belong to a row, not to the connection: the row is dead-lettered.
ROW_ERRORS = (DataError, IntegrityError)


@dataclass
class BatchResult:
    """What happened to each record of a committed batch."""

    inserted: int = 0
    duplicates: int = 0
    dead: list[tuple[Pending, str]] = field(default_factory=list)


def write_batch(items: Sequence[Pending], using: str = "default") -> BatchResult:
    """Write ``items`` in one transaction; raise if the batch could not commit at all."""
    from ..models import DeadLetter

    result = BatchResult()
    valid: list[Pending] = []
    for item in items:
        reason = invalid_reason(item)
        if reason is None:
            valid.append(item)
        else:
            result.dead.append((item, reason))

    with transaction.atomic(using=using):
        if valid:
            try:
                with transaction.atomic(using=using):
                    result.inserted = _insert(valid, using)
                result.duplicates = len(valid) - result.inserted
            except ROW_ERRORS:
                _insert_one_by_one(valid, using, result)
        if result.dead:
            DeadLetter.objects.using(using).bulk_create(
                DeadLetter(
                    replica=str(item.record.replica or "")[:200],
                    request_id=str(item.record.request_id or "")[:200],
                    instance=str(item.instance or "")[:200],
                    reason=reason.replace("\x00", "\\x00"),
                    payload=dead_letter_payload(item),
                )
                for item, reason in result.dead
            )
    return result


def _insert(items: Sequence[Pending], using: str) -> int:
    """Insert what is not archived yet; return how many rows were inserted."""
    if connections[using].vendor == "postgresql":
        return _copy_insert(items, using)
    return _bulk_insert(items, using)


def _insert_one_by_one(items: Sequence[Pending], using: str, result: BatchResult) -> None:
    for item in items:
        try:
            with transaction.atomic(using=using):
                inserted = _insert([item], using)
        except ROW_ERRORS as exc:
            # The exception's class and the database's message: a constraint or a
            # type, never request content (records carry none).
            result.dead.append((item, f"{type(exc).__name__}: {exc}".strip()[:1000]))
        else:
            result.inserted += inserted
            result.duplicates += 1 - inserted


STAGING = "ferrox_stats_staging"
TABLE = "ferrox_stats_finishedrequest"
_COLUMN_LIST = ", ".join(COLUMNS)


def _copy_insert(items: Sequence[Pending], using: str) -> int:
    with connections[using].cursor() as cursor:
        # One staging table per connection, emptied by every commit.
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {STAGING} ON COMMIT DELETE ROWS AS "
            f"SELECT {_COLUMN_LIST} FROM {TABLE} WITH NO DATA"
        )
        # A failed earlier attempt in this transaction may have left rows behind.
        cursor.execute(f"TRUNCATE {STAGING}")
        with cursor.copy(f"COPY {STAGING} ({_COLUMN_LIST}) FROM STDIN") as copy:
            for item in items:
                copy.write_row(row_values(item))
        # No conflict target: either unique key ((replica, request_id) or
        # (instance, seq)) makes a row a duplicate of one already archived.
        cursor.execute(
            f"INSERT INTO {TABLE} ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM {STAGING} "
            "ON CONFLICT DO NOTHING"
        )
        inserted: int = cursor.rowcount
        cursor.execute(f"TRUNCATE {STAGING}")
    return inserted


def _bulk_insert(items: Sequence[Pending], using: str) -> int:
    from ..models import FinishedRequest

    manager = FinishedRequest.objects.using(using)
    by_request = {(i.record.replica, i.record.request_id) for i in items if i.record.request_id}
    by_seq = {(i.instance, i.seq) for i in items if i.instance is not None and i.seq is not None}
    seen_request: set[tuple[Any, Any]] = set()
    seen_seq: set[tuple[Any, Any]] = set()
    if by_request:
        seen_request.update(
            manager.filter(request_id__in={r for _, r in by_request})
            .values_list("replica", "request_id")
            .iterator()
        )
    if by_seq:
        seen_seq.update(
            manager.filter(instance__in={i for i, _ in by_seq}, seq__in={s for _, s in by_seq})
            .values_list("instance", "seq")
            .iterator()
        )
    rows = []
    for item in items:
        request_key = (item.record.replica, item.record.request_id)
        seq_key = (item.instance, item.seq)
        has_seq = item.instance is not None and item.seq is not None
        if (item.record.request_id and request_key in seen_request) or (
            has_seq and seq_key in seen_seq
        ):
            continue
        if item.record.request_id:
            seen_request.add(request_key)
        if has_seq:
            seen_seq.add(seq_key)
        rows.append(FinishedRequest(**dict(zip(COLUMNS, row_values(item), strict=True))))
    manager.bulk_create(rows, batch_size=500)
    return len(rows)
