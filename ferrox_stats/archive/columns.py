"""A whole batch checked column by column: the usual batch without a pass per record.

``write_batch`` can look at each record on its own (``encodable``, ``invalid_reason``,
``keys``, ``row_values``): about 8 µs a record in Python, nearly half of what
PostgreSQL spends storing it. Almost every batch is plain: every record valid, no lone surrogate,
no key twice. ``plain_rows`` recognises such a batch from its columns (each test is one
C-level pass over a whole column) and returns its COPY rows. Anything unusual anywhere
in the batch returns ``None``: the batch then takes the per-record path, whose answers
(dead letters and their reasons, duplicates, replaced surrogates) are exactly those it
always gave. The checks are therefore sufficient, never necessary: some are stricter
than ``invalid_reason`` (a subclass of ``int`` or ``str``, such as ``bool``, sends the
batch the long way; so does a status outside PostgreSQL's ``smallint``, which the binary
COPY could not encode, and a request id or seq that appears twice).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from typing import Any

from ..core.requests import Record
from .rows import FLOAT_FIELDS, MAX_AT_MS, MAX_BIGINT, MAX_LENGTHS, MIN_AT_MS, Pending

_NONE = type(None)
_STR_OR_NONE = frozenset({str, _NONE})
_INT_OR_NONE = frozenset({int, _NONE})
_NUMBER_OR_NONE = frozenset({int, float, _NONE})
_BOOL_OR_NONE = frozenset({bool, _NONE})

_FIELDS = Record._fields
_AT_MS = _FIELDS.index("at_ms")
_REQUEST_ID = _FIELDS.index("request_id")
_REPLICA = _FIELDS.index("replica")
_STATUS = _FIELDS.index("status")
_STREAM = _FIELDS.index("stream")
_ABORTED = _FIELDS.index("aborted")
_ERROR = _FIELDS.index("error")
_TEXT = tuple(
    (_FIELDS.index(name), limit) for name, limit in MAX_LENGTHS.items() if name in _FIELDS
)
_TOKENS = tuple(
    _FIELDS.index(name) for name in ("prompt_tokens", "completion_tokens", "cached_tokens")
)
_TIMES = tuple(_FIELDS.index(name) for name in FLOAT_FIELDS)
_TEXT_LIMITS = (*(limit for _, limit in _TEXT), MAX_LENGTHS["instance"])
_SHORTEST = min(_TEXT_LIMITS)
# PostgreSQL's smallint and bigint: what the binary COPY can encode.
_MIN_INT2, _MAX_INT2 = -(2**15), 2**15 - 1
_MIN_INT8, _MAX_INT8 = -(2**63), 2**63 - 1


def plain_rows(items: Sequence[Pending]) -> list[tuple[Any, ...]] | None:
    """The COPY rows of a plain batch, or ``None`` if any item needs a look of its own.

    Plain: every item is valid (``invalid_reason`` is ``None``), ``encodable`` leaves
    its record as it is, and no two items share a key (``batch.keys``; checked more
    strictly: no request id twice, no seq twice, see ``PlainBatch``). A row is the
    record's fields followed by ``instance``, ``seq``, ``outcome`` and ``ingested``: the
    ``rows.COLUMNS`` order, with ``at_ms`` (epoch ms) where ``finished_at`` goes.
    """
    return PlainBatch().rows(items)


class PlainBatch:
    """``plain_rows`` a chunk at a time: no key twice across all the chunks checked."""

    def __init__(self) -> None:
        self._request_ids: set[str] = set()
        self._seqs: set[int] = set()

    def rows(self, items: Sequence[Pending]) -> list[tuple[Any, ...]] | None:
        """``plain_rows(items)``, also ``None`` if an item shares a key with an earlier chunk."""
        if not items:
            return []
        seqs, records, instances, ingested = zip(*items, strict=True)
        columns = list(zip(*records, strict=True))
        at_ms = columns[_AT_MS]
        if _types(at_ms) != {int} or min(at_ms) < MIN_AT_MS or max(at_ms) > MAX_AT_MS:
            return None
        if _types(columns[_REPLICA]) != {str} or not _plain_text(columns, instances):
            return None
        status = columns[_STATUS]
        if not (
            _types(status) <= _INT_OR_NONE
            and _within(status, _MIN_INT2, _MAX_INT2)
            and all(
                _types(columns[i]) <= _INT_OR_NONE and _within(columns[i], -MAX_BIGINT, MAX_BIGINT)
                for i in _TOKENS
            )
            and all(_types(columns[i]) <= _NUMBER_OR_NONE and _finite(columns[i]) for i in _TIMES)
            and _types(columns[_STREAM]) <= _BOOL_OR_NONE
            and _types(seqs) <= _INT_OR_NONE
            and _within(seqs, _MIN_INT8, _MAX_INT8)
            and _types(ingested) == {bool}
            and self._new_keys(columns[_REQUEST_ID], instances, seqs)
        ):
            return None
        outcomes = _outcomes(columns)  # may be an endless repeat("ok")
        rows = zip(instances, seqs, outcomes, ingested, strict=False)
        return list(map(tuple.__add__, records, rows))

    def _new_keys(
        self, request_ids: tuple[Any, ...], instances: tuple[Any, ...], seqs: tuple[Any, ...]
    ) -> bool:
        """Whether no item's request id, nor its seq, has been seen in the batch before.

        Stricter than "no key twice" (a key adds the replica, the namespace and, for a
        seq, the instance), and cheaper: a server's request ids and a process's ring
        seqs are unique by themselves. A batch where one repeats goes the long way.
        """
        ids: Sequence[Any] = request_ids
        if None in ids:
            ids = [i for i in ids if i is not None]
        keyed_seqs: Sequence[Any] = seqs
        if None in instances or None in seqs:
            keyed_seqs = [
                s for i, s in zip(instances, seqs, strict=True) if i is not None and s is not None
            ]
        return _all_new(self._request_ids, ids) and _all_new(self._seqs, keyed_seqs)


def _all_new(seen: set[Any], values: Sequence[Any]) -> bool:
    before = len(seen)
    seen.update(values)
    return len(seen) == before + len(values)


def _types(column: Iterable[Any]) -> set[type]:
    return set(map(type, column))


def _non_null(column: tuple[Any, ...]) -> tuple[Any, ...] | list[Any]:
    return [value for value in column if value is not None] if None in column else column


def _within(column: tuple[Any, ...], low: int, high: int) -> bool:
    values = _non_null(column)
    return not values or (low <= min(values) and max(values) <= high)


def _finite(column: tuple[Any, ...]) -> bool:
    try:
        return all(map(math.isfinite, _non_null(column)))
    except OverflowError:  # an int too large for a float: invalid_reason says what
        return False


def _plain_text(columns: list[tuple[Any, ...]], instances: tuple[Any, ...]) -> bool:
    """Every text field a ``str`` or ``None``, within its length, without NUL or surrogate."""
    text_columns = [*(columns[i] for i, _ in _TEXT), instances]
    if not all(_types(column) <= _STR_OR_NONE for column in text_columns):
        return False
    values = list(chain.from_iterable(map(_truthy, text_columns)))
    # Usually every string is shorter than the shortest limit: one pass for them all.
    if max(map(len, values), default=0) > _SHORTEST and any(
        max(map(len, _truthy(column)), default=0) > limit
        for column, limit in zip(text_columns, _TEXT_LIMITS, strict=True)
    ):
        return False
    text = "".join(values)
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        # UTF-8 refuses every surrogate: none here means encodable() changes nothing.
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _truthy(column: tuple[Any, ...]) -> Iterable[Any]:
    return filter(None, column)


def _outcomes(columns: list[tuple[Any, ...]]) -> Iterable[str]:
    """``rows.outcome`` of each record."""
    aborted, error, status = columns[_ABORTED], columns[_ERROR], columns[_STATUS]
    if aborted.count(None) == len(aborted) and error.count(None) == len(error):
        statuses = _non_null(status)
        if not statuses or max(statuses) < 400:
            return repeat("ok")
    return [
        "aborted"
        if a is not None
        else "error"
        if e is not None or (s is not None and s >= 400)
        else "ok"
        for a, e, s in zip(aborted, error, status, strict=True)
    ]
