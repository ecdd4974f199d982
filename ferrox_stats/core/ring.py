"""Which finished requests a poller has not seen yet, and how many it missed.

Ported from FreeToken's ``server/request_ring.py`` by way of ferrox's ``stats::ring``.
Departures: ``limit < 1`` is refused (FreeToken's ``limit=0`` skipped rows), and a
cursor from another ring instance is reported as a ``reset`` instead of being served
as if it were continuous.

Storage: rows live in blocks of ``block`` consecutive seqs (block ``k`` holds seqs
``[k * block, (k + 1) * block)``). The newest block is open and grows; a full block is
sealed into a fixed list of slots indexed by ``k % slots``, and the block that has just
become wholly older than what the ring retains is let go. A ring given a ``Packing`` keeps its
newest ``hot`` rows as they are (what a poller that keeps up reads) and packs each
older block into one compact value, unpacked again when a poll reaches it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
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


@dataclass(frozen=True, slots=True)
class Packing(Generic[T]):
    """How a ring stores the rows older than its newest ``hot`` ones, a block at a time.

    ``pack(rows)`` returns one value holding ``rows`` exactly, or ``None`` when it cannot
    (the block then stays as it is); ``unpack`` gives back rows equal to those packed.
    A ring smaller than ``2 * hot`` never packs: what it would save is not worth the
    time packing takes.
    """

    pack: Callable[[list[T]], bytes | None]
    unpack: Callable[[bytes], Sequence[T]]
    hot: int = 1024
    block: int = 256


DEFAULT_BLOCK = 64
"""Rows per block of a ring without packing (it holds up to two more than its capacity)."""


class RequestRing(Generic[T]):
    """A bounded, thread-safe ring of rows, each numbered by a sequence that never repeats.

    Sequence numbers start at 0 in each instance; ``recorded_total`` is the next one.
    A block is found by arithmetic on the seq, so ``since()`` costs O(rows returned)
    whatever the capacity (plus unpacking the packed blocks it reaches).
    """

    def __init__(
        self,
        capacity: int,
        instance: str | None = None,
        packing: Packing[T] | None = None,
        view: Callable[[T], T] | None = None,
    ) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self._capacity = capacity
        self._block = min(capacity, packing.block if packing else DEFAULT_BLOCK)
        # Enough slots that a block is overwritten only once wholly evicted: sealed
        # blocks retained span at most capacity // block + 1 numbers.
        self._slots: list[list[T] | bytes | None] = [None] * (capacity // self._block + 2)
        # The open block, filled in place: a push stores a row, it never resizes a list.
        self._open: list[T | None] = [None] * self._block
        self._total = 0
        self._lock = threading.Lock()
        self._packing = packing if packing and capacity >= 2 * packing.hot else None
        # Sealed blocks that stay unpacked behind the open one (the hot rows).
        self._hot_blocks = -(-packing.hot // self._block) if packing else 0
        # The last block a poll unpacked, as (block number, rows): a poller reading
        # packed rows a page at a time unpacks each block once.
        self._unpacked: tuple[int, Sequence[T]] | None = None
        # What a row stored as pushed is read as (``since``, ``rows``); packed rows
        # unpack as read already.
        self._view = view
        self.packed_blocks = 0
        """Blocks packed so far."""
        self.unpackable_blocks = 0
        """Blocks ``pack`` refused (kept as they are; they take the memory they took)."""
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
            self._total = seq + 1
            offset = seq % self._block
            self._open[offset] = row
            if offset + 1 < self._block:
                return seq
            cold = self._seal()
        if cold is not None:
            self._pack(cold)
        return seq

    def push_many(self, rows: Iterable[T]) -> int:
        """Append ``rows`` in order as ``push`` would; return the first one's seq."""
        pending = list(rows)
        cold: list[int] = []
        block = self._block
        with self._lock:
            first = self._total
            done = 0
            while done < len(pending):
                offset = self._total % block
                chunk = pending[done : done + block - offset]
                self._open[offset : offset + len(chunk)] = chunk
                done += len(chunk)
                self._total += len(chunk)
                if offset + len(chunk) == block and (number := self._seal()) is not None:
                    cold.append(number)
        for number in cold:
            self._pack(number)
        return first

    def _seal(self) -> int | None:
        """Seal the full open block (lock held); return the block that just left the hot
        rows when it is to be packed."""
        number = self._total // self._block - 1
        slots = self._slots
        slots[number % len(slots)] = self._open  # type: ignore[assignment]
        self._open = [None] * self._block
        # Each seal moves the oldest retained seq a block on: the block now wholly older
        # than it is let go (eviction between seals waits for the next one), so no more
        # than capacity + 2 * block rows are ever held.
        evicted = (self._total - self._capacity) // self._block - 1
        if evicted >= 0:
            slots[evicted % len(slots)] = None
        cold = number - self._hot_blocks
        if self._packing is None or cold < 0:
            return None
        return cold

    def _pack(self, number: int) -> None:
        """Pack sealed block ``number``, outside the lock: pushes go on meanwhile."""
        assert self._packing is not None
        slots = self._slots
        index = number % len(slots)
        rows = slots[index]
        if not isinstance(rows, list):
            return
        packed = self._packing.pack(rows)
        with self._lock:
            if packed is None:
                self.unpackable_blocks += 1
            elif slots[index] is rows:
                slots[index] = packed
                self.packed_blocks += 1

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
            parts = self._parts(start, stop)
        rows = tuple(zip(range(start, stop), self._rows(parts), strict=True))
        next_cursor = total if stop == total else stop
        return Page(rows, next_cursor, max(0, oldest - cursor), total, False, self.instance)

    def rows(self) -> list[T]:
        """Every retained row, oldest first."""
        with self._lock:
            total = self._total
            parts = self._parts(total - min(total, self._capacity), total)
        return self._rows(parts, remember=False)

    def _parts(self, start: int, stop: int) -> list[tuple[int, list[T] | bytes, int, int]]:
        """Where seqs ``[start, stop)`` are (lock held): (block number, its rows or packed
        value, first and end offset in it). The open block's part is a copy."""
        block = self._block
        slots = self._slots
        open_first = self._total - self._total % block
        parts: list[tuple[int, list[T] | bytes, int, int]] = []
        seq = start
        while seq < stop:
            number, offset = divmod(seq, block)
            end = min(stop, (number + 1) * block)
            if seq >= open_first:
                part = self._open[offset : end - open_first]
                parts.append((number, part, 0, end - seq))  # type: ignore[arg-type]
            else:
                stored = slots[number % len(slots)]
                assert stored is not None
                parts.append((number, stored, offset, offset + end - seq))
            seq = end
        return parts

    def _rows(
        self, parts: list[tuple[int, list[T] | bytes, int, int]], remember: bool = True
    ) -> list[T]:
        """The rows of ``parts`` in order, unpacking packed blocks (outside the lock)."""
        rows: list[T] = []
        view = self._view
        for number, stored, first, end in parts:
            if isinstance(stored, list):
                rows += stored[first:end] if view is None else map(view, stored[first:end])
            else:
                rows += self._unpack(number, stored, remember)[first:end]
        return rows

    def _unpack(self, number: int, packed: bytes, remember: bool) -> Sequence[T]:
        last = self._unpacked
        if last is not None and last[0] == number:
            return last[1]
        assert self._packing is not None
        rows = self._packing.unpack(packed)
        if remember:
            self._unpacked = (number, rows)
        return rows
