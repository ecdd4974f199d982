"""Which finished requests a poller has not seen yet, and how many it missed.

Ported from FreeToken's ``server/request_ring.py`` by way of ferrox's ``stats::ring``.
Departures: ``limit < 1`` is refused (FreeToken's ``limit=0`` skipped rows), and a
cursor from another ring instance is reported as a ``reset`` instead of being served
as if it were continuous.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One answer to ``since()``.

    ``rows`` are ``(seq, row)`` pairs, oldest first. A poller passes ``next_cursor``
    back as its next cursor. ``missed`` counts rows at or after the cursor that were
    evicted before this poll. ``reset`` says the cursor was beyond anything this
    ring instance ever recorded (another process, or a restart): the rows it holds
    are not a continuation of what the poller saw, and ``next_cursor`` restarts it here.
    """

    rows: tuple[tuple[int, T], ...]
    next_cursor: int
    missed: int
    recorded_total: int
    reset: bool
    instance: str


class RequestRing(Generic[T]):
    """A bounded, thread-safe ring of rows, each numbered by a sequence that never repeats.

    Sequence numbers start at 0 in each instance; ``recorded_total`` is the next one.
    Storage is a fixed list indexed by ``seq % capacity``, so ``since()`` costs
    O(rows returned) whatever the capacity.
    """

    def __init__(self, capacity: int, instance: str | None = None) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self._capacity = capacity
        self._slots: list[T | None] = [None] * capacity
        self._total = 0
        self._lock = threading.Lock()
        self.instance = instance if instance is not None else uuid.uuid4().hex

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def recorded_total(self) -> int:
        """How many rows were ever pushed: the seq the next push gets."""
        return self._total

    def __len__(self) -> int:
        return min(self._total, self._capacity)

    def push(self, row: T) -> int:
        """Append ``row``, evicting the oldest when full; return its seq."""
        with self._lock:
            seq = self._total
            self._slots[seq % self._capacity] = row
            self._total = seq + 1
            return seq

    def push_many(self, rows: Sequence[T]) -> int:
        """``push`` each of ``rows``, in order, under one lock; return the first one's seq."""
        with self._lock:
            first = self._total
            capacity = self._capacity
            slots = self._slots
            for seq, row in enumerate(rows, first):
                slots[seq % capacity] = row
            self._total = first + len(rows)
            return first

    def since(self, cursor: int, limit: int, instance: str | None = None) -> Page[T]:
        """Rows with ``seq >= cursor`` still retained, oldest first, at most ``limit``.

        ``instance``, when the poller passes the one its cursor came from, lets a
        cursor from another ring (which may happen to be in range) be reported as a
        reset too.
        """
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
            raise ValueError(f"cursor must be a non-negative integer, got {cursor!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        with self._lock:
            total = self._total
            if cursor > total or (instance is not None and instance != self.instance):
                return Page((), total, 0, total, True, self.instance)
            oldest = total - min(total, self._capacity)
            start = max(cursor, oldest)
            stop = min(total, start + limit)
            capacity = self._capacity
            slots = self._slots
            rows = tuple((seq, slots[seq % capacity]) for seq in range(start, stop))
        next_cursor = total if stop == total else stop
        return Page(rows, next_cursor, max(0, oldest - cursor), total, False, self.instance)  # type: ignore[arg-type]

    def rows(self) -> list[T]:
        """Every retained row, oldest first."""
        with self._lock:
            total = self._total
            oldest = total - min(total, self._capacity)
            return [self._slots[seq % self._capacity] for seq in range(oldest, total)]  # type: ignore[misc]
