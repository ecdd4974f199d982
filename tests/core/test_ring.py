"""RequestRing: seqs, paging, missed rows and resets (SPEC §2 ring)."""

from __future__ import annotations

import gc
import marshal
import weakref
from dataclasses import replace

import pytest

from ferrox_stats.core.ring import DEFAULT_BLOCK, Packing, RequestRing


def filled(capacity: int, pushes: int, instance: str | None = None) -> RequestRing[str]:
    ring: RequestRing[str] = RequestRing(capacity, instance)
    for n in range(pushes):
        ring.push(f"row{n}")
    return ring


def seqs(ring: RequestRing[str], cursor: int, limit: int) -> list[int]:
    return [seq for seq, _ in ring.since(cursor, limit).rows]


def test_seqs_start_at_zero_and_never_repeat_across_wraps() -> None:
    ring: RequestRing[str] = RequestRing(3)
    assert [ring.push(f"row{n}") for n in range(10)] == list(range(10))


def test_each_ring_instance_numbers_from_zero() -> None:
    filled(2, 5)
    assert RequestRing[str](2).push("x") == 0


@pytest.mark.parametrize(
    ("capacity", "pushes", "length"),
    [(3, 0, 0), (3, 2, 2), (3, 3, 3), (3, 10, 3), (1, 5, 1)],
)
def test_len_is_rows_retained_and_recorded_total_is_every_push(
    capacity: int, pushes: int, length: int
) -> None:
    ring = filled(capacity, pushes)
    assert len(ring) == length
    assert ring.recorded_total == pushes
    assert ring.capacity == capacity


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True, "3"])
def test_capacity_below_one_or_not_an_int_refused(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        RequestRing(capacity)  # type: ignore[arg-type]


def test_rows_are_every_retained_row_oldest_first() -> None:
    assert filled(3, 5).rows() == ["row2", "row3", "row4"]


def test_since_returns_rows_with_their_seq_oldest_first() -> None:
    page = filled(5, 3).since(1, 10)
    assert page.rows == ((1, "row1"), (2, "row2"))
    assert page.recorded_total == 3


@pytest.mark.parametrize(
    ("limit", "expected", "next_cursor"),
    [
        (1, [0], 1),
        (3, [0, 1, 2], 3),
        (7, list(range(7)), 7),
        (8, list(range(8)), 8),
        (100, list(range(8)), 8),
    ],
)
def test_page_holds_at_most_limit_and_next_cursor_follows_last_row(
    limit: int, expected: list[int], next_cursor: int
) -> None:
    page = filled(10, 8).since(0, limit)
    assert [seq for seq, _ in page.rows] == expected
    assert page.next_cursor == next_cursor


def test_next_cursor_is_recorded_total_when_page_holds_every_match() -> None:
    ring = filled(10, 4)
    assert ring.since(2, 2).next_cursor == 4
    assert ring.since(2, 50).next_cursor == ring.recorded_total


def test_paging_by_next_cursor_returns_every_row_exactly_once() -> None:
    ring = filled(10, 10)
    received: list[int] = []
    cursor = 0
    while cursor < ring.recorded_total:
        page = ring.since(cursor, 3)
        received += [seq for seq, _ in page.rows]
        cursor = page.next_cursor
    assert received == list(range(10))


@pytest.mark.parametrize(
    ("capacity", "pushes", "cursor", "missed", "rows"),
    [
        (3, 10, 0, 7, [7, 8, 9]),
        (3, 10, 5, 2, [7, 8, 9]),
        (3, 10, 7, 0, [7, 8, 9]),
        (3, 10, 9, 0, [9]),
        (3, 10, 10, 0, []),
        (5, 3, 0, 0, [0, 1, 2]),
        (1, 4, 0, 3, [3]),
    ],
)
def test_missed_counts_rows_evicted_at_or_after_cursor(
    capacity: int, pushes: int, cursor: int, missed: int, rows: list[int]
) -> None:
    page = filled(capacity, pushes).since(cursor, 100)
    assert page.missed == missed
    assert [seq for seq, _ in page.rows] == rows


def test_missed_and_limit_together_account_for_every_row() -> None:
    page = filled(3, 10).since(0, 1)
    assert page.rows == ((7, "row7"),)
    assert page.missed == 7
    assert page.next_cursor == 8


@pytest.mark.parametrize("limit", [0, -1, 2.0, True])
def test_limit_below_one_or_not_an_int_refused(limit: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        filled(5, 3).since(0, limit)  # type: ignore[arg-type]


def test_refused_zero_limit_skips_no_rows() -> None:
    ring = filled(5, 3)
    with pytest.raises(ValueError):
        ring.since(0, 0)
    assert seqs(ring, 0, 10) == [0, 1, 2]


@pytest.mark.parametrize("cursor", [-1, -100])
def test_negative_cursor_refused(cursor: int) -> None:
    with pytest.raises(ValueError, match="cursor"):
        filled(5, 3).since(cursor, 10)


@pytest.mark.parametrize(("pushes", "cursor"), [(5, 6), (5, 1000), (0, 1)])
def test_cursor_beyond_recorded_total_is_a_reset_to_recorded_total(
    pushes: int, cursor: int
) -> None:
    page = filled(3, pushes).since(cursor, 10)
    assert page.reset is True
    assert page.rows == ()
    assert page.next_cursor == page.recorded_total == pushes
    assert page.missed == 0


def test_poller_continues_normally_after_a_reset() -> None:
    ring = filled(3, 5)
    cursor = ring.since(99, 10).next_cursor
    ring.push("row5")
    page = ring.since(cursor, 10)
    assert page.reset is False
    assert page.rows == ((5, "row5"),)


@pytest.mark.parametrize(("capacity", "pushes"), [(3, 0), (3, 2), (3, 10)])
def test_cursor_at_recorded_total_is_an_empty_page_not_a_reset(capacity: int, pushes: int) -> None:
    page = filled(capacity, pushes).since(pushes, 10)
    assert page.rows == ()
    assert page.reset is False
    assert page.next_cursor == pushes
    assert page.missed == 0


@pytest.mark.parametrize("cursor", [0, 2, 4, 99])
def test_every_page_names_the_ring_instance(cursor: int) -> None:
    ring = filled(3, 4)
    assert ring.since(cursor, 1).instance == ring.instance


def test_default_instances_are_distinct_strings() -> None:
    first, second = RequestRing[str](3), RequestRing[str](3)
    assert isinstance(first.instance, str)
    assert first.instance
    assert first.instance != second.instance


def test_explicit_instance_is_kept() -> None:
    ring = filled(3, 2, instance="web-1:epoch-7")
    assert ring.instance == "web-1:epoch-7"
    assert ring.since(0, 10).instance == "web-1:epoch-7"


def test_a_cursor_from_another_instance_is_a_reset_even_when_in_range() -> None:
    ring: RequestRing[str] = RequestRing(4, instance="b")
    for row in "abc":
        ring.push(row)
    page = ring.since(1, 10, instance="a")
    assert (page.reset, page.rows, page.next_cursor, page.instance) == (True, (), 3, "b")
    same = ring.since(1, 10, instance="b")
    assert (same.reset, [row for _, row in same.rows]) == (False, ["b", "c"])


def packing(hot: int = 2, block: int = 2, calls: list[str] | None = None) -> Packing[str]:
    """Rows packed with marshal; a block holding "refused" is refused; unpacks counted."""

    def pack(rows: list[str]) -> bytes | None:
        return None if "refused" in rows else marshal.dumps(rows)

    def unpack(packed: bytes) -> list[str]:
        if calls is not None:
            calls.append("unpack")
        return list(marshal.loads(packed))

    return Packing(pack, unpack, hot=hot, block=block)


def test_push_many_numbers_rows_as_pushes_do() -> None:
    ring: RequestRing[str] = RequestRing(5, packing=packing(hot=1, block=2))
    assert ring.push_many(f"row{n}" for n in range(3)) == 0
    assert ring.push("row3") == 3
    assert ring.push_many([]) == 4
    assert ring.push_many(f"row{n}" for n in range(4, 9)) == 4
    assert ring.recorded_total == 9
    assert ring.rows() == [f"row{n}" for n in range(4, 9)]


@pytest.mark.parametrize(("capacity", "packs"), [(3, False), (4, True), (10, True)])
def test_a_ring_packs_only_when_it_holds_at_least_twice_its_hot_rows(
    capacity: int, packs: bool
) -> None:
    ring: RequestRing[str] = RequestRing(capacity, packing=packing(hot=2, block=1))
    for n in range(30):
        ring.push(f"row{n}")
    assert (ring.packed_blocks > 0) is packs
    assert ring.rows() == [f"row{n}" for n in range(30 - capacity, 30)]


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("cursor", [0, 9, 10, 11, 15, 18, 19, 20])
def test_pages_of_a_packed_ring_are_the_rows_pushed(cursor: int, limit: int) -> None:
    plain = filled(10, 20)
    packed: RequestRing[str] = RequestRing(10, packing=packing(hot=2, block=3))
    for n in range(20):
        packed.push(f"row{n}")
    assert packed.packed_blocks > 0
    assert packed.since(cursor, limit) == replace(
        plain.since(cursor, limit), instance=packed.instance
    )


def test_a_poller_paging_through_packed_rows_unpacks_each_block_once() -> None:
    calls: list[str] = []
    ring: RequestRing[str] = RequestRing(40, packing=packing(hot=2, block=4, calls=calls))
    for n in range(40):
        ring.push(f"row{n}")
    cursor, received = 0, []
    while cursor < ring.recorded_total:
        page = ring.since(cursor, 1)
        received += [row for _, row in page.rows]
        cursor = page.next_cursor
    assert received == [f"row{n}" for n in range(40)]
    assert len(calls) == ring.packed_blocks == 9  # 10 blocks, the newest one hot


def test_a_block_pack_refuses_is_kept_as_it_is() -> None:
    ring: RequestRing[str] = RequestRing(8, packing=packing(hot=1, block=2))
    ring.push_many(["row0", "refused", "row2", "row3", "row4", "row5"])
    assert (ring.unpackable_blocks, ring.packed_blocks) == (1, 1)
    assert ring.rows() == ["row0", "refused", "row2", "row3", "row4", "row5"]


class Row:
    """A row whose liveness a test can see."""

    alive: weakref.WeakSet[Row] = weakref.WeakSet()

    def __init__(self) -> None:
        Row.alive.add(self)


@pytest.mark.parametrize("capacity", [1, 3, 64, 100, 1000])
def test_a_ring_lets_go_of_rows_beyond_its_capacity_and_two_blocks(capacity: int) -> None:
    Row.alive = weakref.WeakSet()
    ring: RequestRing[Row] = RequestRing(capacity)
    for _ in range(5 * capacity + 7):
        ring.push(Row())
    gc.collect()
    assert capacity <= len(Row.alive) <= capacity + 2 * min(capacity, DEFAULT_BLOCK)
