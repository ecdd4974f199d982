"""The whole-batch check (``ferrox_stats.archive.columns``): a batch it calls plain is one
the per-record path would write whole, unchanged, with the same rows."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats.archive.batch import keys
from ferrox_stats.archive.columns import PlainBatch, plain_rows
from ferrox_stats.archive.rows import (
    EPOCH,
    MAX_AT_MS,
    MIN_AT_MS,
    ONE_MS,
    Pending,
    invalid_reason,
    row_values,
)
from ferrox_stats.core.requests import Record, encodable
from tests.factories import make_record


def per_record_answer(items: list[Pending]) -> bool:
    """Whether the per-record path finds every item valid, unchanged and unique by key."""
    seen: set[Hashable] = set()
    for item in items:
        if encodable(item.record) != item.record or invalid_reason(item) is not None:
            return False
        if any(key in seen for key in keys(item)):
            return False
        seen.update(keys(item))
    return True


def expected_row(item: Pending) -> tuple[Any, ...]:
    values = row_values(item)
    return (values[0], (values[1] - EPOCH) // ONE_MS, *values[2:])


class StrLike(str):
    pass


text = st.one_of(
    st.none(),
    st.sampled_from(["", "a", "chatcmpl-1", "modèle-ü", "x" * 64, "x" * 65, "y" * 200]),
    st.sampled_from(["y" * 201, "a\x00b", "m\ud800", "\udfff", StrLike("s"), 0, False, b"", 7]),
    st.text(max_size=5),
)
integer = st.one_of(
    st.none(),
    st.integers(-5, 70_000),
    st.sampled_from([2**15 - 1, 2**15, -(2**15), -(2**15) - 1, 2**63 - 1, 2**63, -(2**63)]),
    st.sampled_from([True, 1.5, "3"]),
)
number = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.sampled_from([False, "1.0"]),
)
at_ms = st.one_of(
    st.integers(MIN_AT_MS - 1, MAX_AT_MS + 1),
    st.sampled_from([None, True, 1.0, 1_780_000_000_000]),
)
fields = {
    "request_id": text,
    "at_ms": at_ms,
    "route": text,
    "model": text,
    "status": integer,
    "stream": st.sampled_from([None, True, False, 1, "yes"]),
    "prompt_tokens": integer,
    "completion_tokens": integer,
    "cached_tokens": integer,
    "ttft_ms": number,
    "duration_ms": number,
    "queue_ms": number,
    "decode_ms": number,
    "finish_reason": text,
    "aborted": text,
    "error": text,
    "client": text,
    "via_api_key": text,
    "replica": text,
}
# A plausible record with any of its fields replaced, plausibly or not.
record = st.fixed_dictionaries({}, optional=fields).map(lambda overrides: make_record(**overrides))
pending = st.builds(
    Pending,
    seq=st.one_of(st.none(), st.integers(0, 3), st.sampled_from([2**63, "4", True])),
    record=record,
    instance=st.one_of(st.none(), st.sampled_from(["inst-a", "inst-b", "i" * 201, 3])),
    ingested=st.sampled_from([False, True, 0]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(pending, max_size=4), st.integers(1, 4))
def test_a_plain_batch_is_one_the_per_record_path_writes_whole(
    items: list[Pending], chunk: int
) -> None:
    rows = plain_rows(items)
    if rows is not None:
        assert per_record_answer(items)
        assert rows == [expected_row(item) for item in items]
    # Checked a chunk at a time, the answer is the same or stricter, the rows the same.
    checker = PlainBatch()
    chunked = [checker.rows(items[i : i + chunk]) for i in range(0, len(items), chunk)]
    if all(part is not None for part in chunked):
        assert rows == [row for part in chunked if part is not None for row in part]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(make_record, model=st.text(max_size=20)), max_size=20))
def test_plausible_batches_are_plain(records: list[Record]) -> None:
    items = [Pending(seq, r, "inst") for seq, r in enumerate(records)]
    assert per_record_answer(items) == (plain_rows(items) is not None)


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "modèle-ü"},  # not ASCII, but UTF-8
        {"error": "e" * 200},  # longer than the shortest limit, within its own
        {"request_id": None, "status": None, "stream": None, "ttft_ms": None, "client": ""},
        {"ttft_ms": 3},  # an int where a float goes
        {"aborted": "client_disconnect", "status": 503},
    ],
)
def test_what_is_plain(overrides: dict[str, Any]) -> None:
    items = [Pending(1, make_record(**overrides), "inst"), Pending(2, make_record(), "inst")]
    assert plain_rows(items) == [expected_row(item) for item in items]


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"status": True}, "a bool is not an int here"),
        ({"model": StrLike("m")}, "a str subclass"),
        ({"client": "a\x00b"}, "a NUL"),
        ({"model": "m\ud800"}, "a lone surrogate, which encodable() replaces"),
        ({"error": "e" * 201}, "too long"),
        ({"status": -40_000}, "valid, but no smallint: the per-record path says why"),
        ({"decode_ms": float("nan")}, "not finite"),
        ({"at_ms": None}, "no finish time"),
        ({"replica": None}, "no replica"),
    ],
)
def test_what_is_not_plain(overrides: dict[str, Any], why: str) -> None:
    items = [Pending(1, make_record(), "inst"), Pending(2, make_record(**overrides), "inst")]
    assert plain_rows(items) is None, why


def test_a_request_id_or_seq_seen_twice_is_not_plain_even_in_another_chunk() -> None:
    a, b = make_record(), make_record()
    same_id = b._replace(replica="elsewhere", request_id=a.request_id)
    checker = PlainBatch()
    assert checker.rows([Pending(1, a, "inst")]) is not None
    assert checker.rows([Pending(2, same_id, "inst")]) is None
    # Stricter than the keys, which also hold the replica: the per-record path then
    # writes both (tests/test_archive_batch.py).
    assert plain_rows([Pending(1, a, "inst"), Pending(1, b, "inst")]) is None
    assert plain_rows([Pending(1, a, "inst"), Pending(1, b, None)]) is not None
