"""core.rollup: a batch tallied a column at a time equals one record at a time; the
stored form of a distribution reads back exactly and refuses what it cannot be."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats.core.distribution import Distribution
from ferrox_stats.core.requests import Record
from ferrox_stats.core.rollup import (
    MAX_TOKENS,
    Tally,
    canonical_ints,
    merge_stored,
    stored_distribution,
)

_times = st.one_of(
    st.none(),
    st.floats(min_value=0, max_value=2e12, allow_nan=False),
    st.sampled_from([0.0, -0.0, 5e-324, math.inf, math.nan, -1.0, 1e15]),
    st.integers(min_value=0, max_value=10**6),
)
_tokens = st.one_of(st.none(), st.integers(min_value=0, max_value=2**12), st.just(MAX_TOKENS + 1))


@st.composite
def _records(draw: st.DrawFn) -> Record:
    return Record(
        request_id=None,
        at_ms=0,
        prompt_tokens=draw(_tokens),
        completion_tokens=draw(_tokens),
        cached_tokens=draw(_tokens),
        ttft_ms=draw(_times),
        duration_ms=draw(_times),
        decode_ms=draw(_times),
        aborted=draw(st.sampled_from([None, None, "timeout", "client_disconnect"])),
    )


@given(st.lists(st.tuples(st.integers(0, 3), _records()), max_size=40))
def test_grouped_equals_adding_one_at_a_time(keyed: list[tuple[int, Record]]) -> None:
    keys = [k for k, _ in keyed]
    records = [r for _, r in keyed]
    grouped = Tally.grouped(keys, records)
    one_by_one: dict[int, Tally] = {}
    for key, record in keyed:
        one_by_one.setdefault(key, Tally()).add(record)
    if grouped is not None:  # None: the caller adds them one at a time
        assert grouped == one_by_one
        assert list(grouped) == list(one_by_one)


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=30))
def test_a_stored_distribution_reads_back_exactly(values: list[float]) -> None:
    tally = Tally()
    tally.duration.add_many(values)
    texts = tally.texts()
    back = Tally.stored((0, 0, 0, 0, 0), texts)
    assert back.duration == tally.duration
    assert (texts[1] == "") == (not values)


_values = st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=30)


@given(_values, st.lists(_values, max_size=6), st.booleans())
def test_merging_stored_texts_equals_merging_the_distributions_they_store(
    first: list[float], parts: list[list[float]], teed: bool
) -> None:
    # merge_stored adds a text's buckets without making its distribution: the same
    # zeros, buckets and sum, octaves counted again, and what the target tees into
    # (its counts, not its sum) fed too.
    texts = []
    for values in parts:
        tally = Tally()
        tally.duration.add_many(values)
        texts.append(tally.texts()[1])
    want, got = Distribution(), Distribution()
    want.add_many(first)
    got.add_many(first)
    assert want.octaves() == got.octaves()  # kept from now on
    into_want, into_got = Distribution(), Distribution()
    if teed:
        want.tee(into_want)
        got.tee(into_got)
    for text in texts:
        want.merge(stored_distribution(text))
        merge_stored(got, text)
    assert (got.zeros, got.counts, got.total) == (want.zeros, want.counts, want.total)
    assert got.octaves() == want.octaves()
    assert (into_got.zeros, into_got.counts) == (into_want.zeros, into_want.counts)


def test_a_refused_text_leaves_what_it_was_merged_into_unchanged() -> None:
    into = Distribution()
    into.add_many([1.0, 1.7e308])
    before = into.copy()
    with pytest.raises(ValueError, match="not a stored"):
        merge_stored(into, "1;1.0;6,1,5,1")  # a bucket twice
    with pytest.raises(ValueError, match="overflow"):
        merge_stored(into, f"0;{1.7e308!r};5,1")
    assert into == before


@pytest.mark.parametrize(
    "text",
    [
        "x",
        "1;0.0",
        "0;0.0;",
        "1;1.0;5, 1",
        "1;1.0;5,+1",
        "1;1.0;05,1",
        "1;1.0;6,1,5,1",
        "1;1.0;5,0",
        "1;1.0;5",
        "1;nan;",
        "-1;1.0;5,1",
        "1;-1.0;5,1",
        "1;1e0;5,1",
        "01;1.0;5,1",
        "0;1.0;999999999,1",
        "1;1.0;-0,1",
        "1;1.0;5,1e0",
        "1;1.0;5,1,",
        "1;1.0;[5,1]",
        "1;1.0;5," + "9" * 5000,  # more digits than int() (and JSON) read
    ],
)
def test_a_stored_distribution_refuses_what_it_cannot_be(text: str) -> None:
    with pytest.raises(ValueError):
        Tally().merge_texts("", text, "", "")


_INT = "(?:0|-?[1-9][0-9]*)"
CANONICAL = re.compile(f"{_INT}(?:,{_INT})*")  # what the reader matched before


@settings(max_examples=2000)
@given(
    st.lists(
        st.sampled_from(["0", "1", "9", "10", "-", ",", "-0", "+", " ", ".", "e", "\u0661", "]"])
    ).map("".join)
    | st.lists(st.integers(-(10**20), 10**20)).map(lambda ints: ",".join(map(str, ints)))
)
def test_canonical_integers_are_what_the_regular_expression_matched(text: str) -> None:
    # The reader's check (a character set and JSON) accepts exactly the texts the full
    # match of the canonical form accepted, and reads the same integers.
    want = [int(n) for n in text.split(",")] if CANONICAL.fullmatch(text) else None
    assert canonical_ints(text) == want


def test_an_empty_distribution_is_stored_empty() -> None:
    assert Tally().texts() == ("", "", "", "")
    assert Tally.stored((0, 0, 0, 0, 0), ("", "", "", "")).duration == Distribution()
