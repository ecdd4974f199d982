"""The batch fold (``Breakdown._fold_batch``: every cell's values bucketed in one pass)
counts exactly what adding each value alone (``Distribution.add``) counts."""

from __future__ import annotations

import math
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats.core.breakdown import ABORTED, DISTRIBUTIONS, ERROR, OK, TIMES, Breakdown
from ferrox_stats.core.distribution import (
    MAX_INDEX,
    MIN_INDEX,
    ZERO_INDEX,
    Distribution,
    bits_indices,
    bucket_index,
    bucket_upper,
    int_indices,
)
from ferrox_stats.core.requests import Record

SUBNORMAL = 5e-321

# Seconds at the edges: zeros, powers of two and bucket bounds (exact upper bounds, and
# the floats either side), the smallest normal float, huge ones (a batch of them keeps
# a finite sum, in ms too), subnormals (which the batch leaves to the checked path).
edge_seconds = st.sampled_from(
    [0.0, sys.float_info.min, 1e300, 2.0**-1000]
    + [2.0**k for k in range(-1022, 1010, 37)]
    + [bucket_upper(bucket_index(2.0**k) + j) for k in (-20, -3, 0, 1, 7, 30) for j in (3, 17)]
    + [math.nextafter(2.0**k, side) for k in (-10, 0, 4, 20) for side in (0.0, math.inf)]
)
seconds = st.floats(0.0, 1e6) | edge_seconds
milliseconds = st.none() | seconds.map(lambda s: s * 1000.0) | st.floats(0.0, 1e6)
tokens = st.none() | st.integers(0, 70_000) | st.sampled_from([0, 1, 2, 2**15 - 1, 2**15, 2**40])

batch_records = st.builds(
    Record,
    model=st.sampled_from(["a", "b", "c", "d", None]),
    route=st.sampled_from(["/x", "/y", "/z"]),
    prompt_tokens=tokens,
    completion_tokens=tokens,
    ttft_ms=milliseconds,
    duration_ms=milliseconds,
    decode_ms=milliseconds,
    aborted=st.none() | st.sampled_from(["client_disconnect", "timeout"]),
    error=st.none() | st.sampled_from(["E", "Overloaded"]),
)


def reference(records: list[Record]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Each record's values added one at a time (``Distribution.add``)."""
    cells: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        outcome = ABORTED if r.aborted is not None else ERROR if r.error is not None else OK
        cell = cells.setdefault(
            (r.model or "", r.route or "", outcome),
            {"requests": 0, "input_tokens": 0, "output_tokens": 0}
            | {name: Distribution() for name in DISTRIBUTIONS},
        )
        cell["requests"] += 1
        for name, value in (
            ("duration", None if r.duration_ms is None else r.duration_ms / 1000.0),
            ("ttft", None if r.ttft_ms is None else r.ttft_ms / 1000.0),
            ("input", r.prompt_tokens),
            ("output", r.completion_tokens),
        ):
            if value is not None:
                cell[name].add(value)
        if r.decode_ms is not None and (r.completion_tokens or 0) > 1:
            cell["tpot"].add(r.decode_ms / 1000.0 / (r.completion_tokens - 1))
        cell["input_tokens"] += r.prompt_tokens or 0
        cell["output_tokens"] += r.completion_tokens or 0
    return cells


def assert_same(breakdown: Breakdown, records: list[Record]) -> None:
    expected = reference(records)
    cells = breakdown.cells()
    assert set(cells) == set(expected)
    for key, cell in cells.items():
        want = expected[key]
        assert (cell.requests, cell.input_tokens, cell.output_tokens) == (
            want["requests"],
            want["input_tokens"],
            want["output_tokens"],
        )
        for name in DISTRIBUTIONS:
            got, one_by_one = getattr(cell, name), want[name]
            # Every bucket and zero exactly; the float sum up to the order of adding.
            assert (got.zeros, got.counts) == (one_by_one.zeros, one_by_one.counts)
            assert got.octaves()["counts"] == one_by_one.octaves()["counts"]
            assert math.isclose(got.total, one_by_one.total, rel_tol=1e-9, abs_tol=1e-300)


def subnormal_or_negative_zero(records: list[Record]) -> bool:
    values = [
        value / 1000.0 for r in records for value in (r.duration_ms, r.ttft_ms) if value is not None
    ] + [
        r.decode_ms / 1000.0 / (r.completion_tokens - 1)
        for r in records
        if r.decode_ms is not None and r.completion_tokens is not None and r.completion_tokens > 1
    ]
    return any(0 < v < sys.float_info.min or math.copysign(1, v) < 0 for v in values)


@settings(max_examples=100, deadline=None)
@given(st.lists(batch_records, min_size=1, max_size=40), st.lists(batch_records, max_size=40))
def test_the_batch_fold_counts_what_adding_one_value_at_a_time_counts(
    first: list[Record], second: list[Record]
) -> None:
    breakdown = Breakdown(fold_every=10**6)
    # Up to 4 models x 3 routes x every outcome (under the caps): many cells a batch.
    breakdown._queue.extend(first)
    with breakdown._lock:
        batched = breakdown._fold_batch(list(breakdown._queue))
        breakdown._queue.clear()
    assert batched == (not subnormal_or_negative_zero(first))
    if not batched:
        breakdown._queue.extend(first)  # the checked path, as _fold takes it
    assert_same(breakdown, first)
    # Again with every cell's octaves kept and its times teed (after an export).
    _, merged = breakdown.export()
    for record in second:
        breakdown.observe(record)
    assert_same(breakdown, first + second)
    _, merged = breakdown.export()
    for name in TIMES:
        one_by_one = Distribution.merged(
            cell[name] for cell in reference(first + second).values()
        ).dense()
        assert merged[name]["counts"] == one_by_one["counts"]
        assert (merged[name]["zeros"], merged[name]["offset"]) == (
            one_by_one["zeros"],
            one_by_one["offset"],
        )
    assert breakdown.refused == 0


@given(st.lists(seconds | st.just(SUBNORMAL) | st.just(-0.0), max_size=80))
def test_bits_indices_are_bucket_index_or_none(values: list[float]) -> None:
    indices = bits_indices(values)
    if any(0 < v < sys.float_info.min or math.copysign(1, v) < 0 for v in values):
        assert indices is None
    else:
        assert indices == [bucket_index(v) if v else ZERO_INDEX for v in values]
        # A zero's index is a subnormal's bucket: below any value the batch takes.
        assert MIN_INDEX < ZERO_INDEX < bucket_index(sys.float_info.min) < MAX_INDEX


def test_int_indices_are_bucket_index_up_to_the_table() -> None:
    counts = list(range(2**15))
    assert int_indices(counts) == [bucket_index(n) if n else ZERO_INDEX for n in counts]
    assert int_indices([True, False]) == [bucket_index(1), ZERO_INDEX]
    try:
        int_indices([2**15])
    except IndexError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a count past the table must raise IndexError")


normal_seconds = st.floats(0.0, 1e300, allow_subnormal=False) | edge_seconds


@given(st.lists(normal_seconds, max_size=60), st.data())
def test_add_counted_in_any_order_is_adding_one_by_one(
    values: list[float], data: st.DataObject
) -> None:
    one_by_one, counted, tee, tee_reference = (Distribution() for _ in range(4))
    one_by_one.octaves()  # octaves kept from here on
    counted.octaves()
    counted.tee(tee)
    for value in values:
        one_by_one.add(value)
        tee_reference.add(value)
    shuffled = data.draw(st.permutations(values))
    indices = bits_indices(shuffled)
    assert indices is not None
    nonzero = [i for i in indices if i != ZERO_INDEX]
    counted.add_counted(sum(shuffled), len(indices) - len(nonzero), nonzero)
    assert (counted.zeros, counted.counts, counted.octaves()) == (
        one_by_one.zeros,
        one_by_one.counts,
        one_by_one.octaves() | {"sum": counted.total},
    )
    assert math.isclose(counted.total, one_by_one.total, rel_tol=1e-9, abs_tol=1e-300)
    assert (tee.zeros, tee.counts) == (tee_reference.zeros, tee_reference.counts)
