"""Stats of a ring large enough to pack: polls and summaries read what was recorded."""

from __future__ import annotations

from ferrox_stats.core.requests import RECORD_PACKING, Record, Stats, summarize

HOT = RECORD_PACKING.hot


def records(n: int) -> list[Record]:
    return [
        Record(
            request_id=f"chatcmpl-{i}",
            at_ms=1_764_000_000_000 + i,
            model=("llama", "qwen", None)[i % 3],
            status=200 if i % 7 else 500,
            stream=bool(i % 2),
            completion_tokens=i,
            ttft_ms=None if i % 5 == 0 else i / 3,
            duration_ms=float(i),
        )
        for i in range(n)
    ]


def test_a_large_ring_packs_what_is_older_than_its_hot_rows_and_reads_it_back() -> None:
    pushed = records(5 * HOT)
    stats = Stats(capacity=4 * HOT)
    for record in pushed:
        stats.record(record)
    assert stats.ring.packed_blocks > 0
    assert stats.ring.rows() == pushed[HOT:]
    page = stats.since(HOT + 10, 100)
    assert page.rows == tuple((seq, pushed[seq]) for seq in range(HOT + 10, HOT + 110))
    assert stats.summary() == summarize(pushed[HOT:])


def test_the_default_ring_never_packs() -> None:
    stats = Stats()
    for record in records(3 * stats.ring.capacity):
        stats.record(record)
    assert stats.ring.packed_blocks == 0


def test_rows_pushed_as_plain_tuples_read_back_as_records_packed_or_not() -> None:
    # A tracker's record is a row (an exact tuple of Record's fields, which the garbage
    # collector untracks): every read, of a packed block or of the hot rows, is a Record.
    pushed = records(5 * HOT)
    stats = Stats(capacity=4 * HOT)
    stats.ring.push_many([tuple(record) for record in pushed])
    assert stats.ring.packed_blocks > 0
    read = stats.ring.rows()
    assert read == pushed[HOT:]
    assert {type(record) for record in read} == {Record}
    page = stats.since(5 * HOT - 50, 100)
    assert [type(record) for _, record in page.rows] == [Record] * 50
    assert page.rows[-1][1].request_id == f"chatcmpl-{5 * HOT - 1}"
    assert stats.summary() == summarize(pushed[HOT:])
