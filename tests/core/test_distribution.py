"""Log-spaced distributions: exact merges, bounded error, powers of two as exact bounds."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.core.distribution import (
    MAX_INDEX,
    MAX_OCTAVE,
    MIN_INDEX,
    MIN_OCTAVE,
    RELATIVE_ERROR,
    Distribution,
    bucket_index,
    bucket_lower,
    bucket_midpoint,
    bucket_upper,
)
from ferrox_stats.core.summary import nearest_rank

# Values as they come: durations in seconds, token counts, zeros, tiny and huge ones.
values = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=1_000_000),
    st.sampled_from([2.0**k for k in range(-30, 31)]),
)
value_lists = st.lists(values, max_size=60)
percentiles = st.floats(min_value=1e-6, max_value=100.0)


def of(items: list[float]) -> Distribution:
    distribution = Distribution()
    for value in items:
        distribution.add(value)
    return distribution


def same(a: Distribution, b: Distribution) -> bool:
    """Equal as wire dicts, the float sums compared with a tolerance."""
    wa, wb = a.to_wire(), b.to_wire()
    sum_a, sum_b = wa.pop("sum"), wb.pop("sum")
    return wa == wb and math.isclose(sum_a, sum_b, rel_tol=1e-9, abs_tol=1e-300)


@given(value_lists, value_lists, value_lists)
def test_merge_is_associative_and_commutative(
    a: list[float], b: list[float], c: list[float]
) -> None:
    left = of(a)
    left.merge(of(b))
    left.merge(of(c))
    right = of(b)
    right.merge(of(c))
    right_first = of(a)
    right_first.merge(right)
    swapped = of(c)
    swapped.merge(of(a))
    swapped.merge(of(b))
    assert same(left, right_first)
    assert same(left, swapped)


@given(st.lists(value_lists, max_size=6))
def test_merged_parts_equal_the_distribution_of_all_values(parts: list[list[float]]) -> None:
    everything = of([value for part in parts for value in part])
    merged = Distribution.merged(of(part) for part in parts)
    assert same(merged, everything)
    assert merged.count == everything.count == sum(map(len, parts))


@given(value_lists.filter(bool), percentiles)
def test_quantile_is_within_relative_error_of_the_exact_nearest_rank(
    items: list[float], percentile: float
) -> None:
    exact = nearest_rank(sorted(items), percentile)
    assert exact is not None
    reported = of(items).quantile(percentile)
    assert reported is not None
    # Below the normal range a float's own rounding (half the smallest subnormal) adds.
    assert abs(reported - exact) <= exact * RELATIVE_ERROR + math.ulp(0.0)


@given(value_lists, st.integers(min_value=-40, max_value=40))
def test_count_at_most_a_power_of_two_is_exact(items: list[float], k: int) -> None:
    bound = 2.0**k
    assert of(items).count_at_most(bound) == sum(1 for v in items if v <= bound)


@given(value_lists)
def test_wire_round_trip_through_json(items: list[float]) -> None:
    distribution = of(items)
    wire = json.loads(json.dumps(distribution.to_wire()))
    assert Distribution.from_wire(wire) == distribution


@given(st.floats(min_value=0.0, exclude_min=True, allow_infinity=False))
def test_every_positive_float_lies_in_its_bucket(value: float) -> None:
    index = bucket_index(value)
    assert MIN_INDEX <= index <= MAX_INDEX
    assert bucket_lower(index) <= value <= bucket_upper(index)
    if math.isfinite(bucket_lower(index)) and value >= 2.0**-1000:
        assert bucket_lower(index) < value
        assert abs(bucket_midpoint(index) - value) < value * RELATIVE_ERROR


@pytest.mark.parametrize("k", [-1074, -1022, -30, -2, -1, 0, 1, 2, 10, 30, 1023])
def test_powers_of_two_are_exact_upper_bounds(k: int) -> None:
    power = 2.0**k
    index = bucket_index(power)
    assert bucket_upper(index) == power
    if k >= -1022:  # subnormals are too sparse for the next float to be in the next bucket
        assert bucket_index(math.nextafter(power, math.inf)) == index + 1
        assert bucket_index(math.nextafter(power, 0)) == index


def test_buckets_split_each_power_of_two_into_32() -> None:
    assert bucket_index(2.0) - bucket_index(1.0) == 32
    assert [bucket_upper(bucket_index(1.0) + j) for j in (1, 2, 32)] == [1.03125, 1.0625, 2.0]


def test_zero_counts_apart_and_reads_exactly_zero() -> None:
    distribution = of([0, 0.0, 0, 5.0])
    assert distribution.zeros == 3
    assert distribution.count == 4
    assert distribution.quantile(75) == 0.0
    assert distribution.quantile(76) == pytest.approx(5.0, rel=RELATIVE_ERROR)
    assert distribution.count_at_most(0) == 3
    assert distribution.buckets()[0] == (0.0, 3)


@pytest.mark.parametrize("value", [math.ulp(0.0), 1e-300, 2.0**-1022, 1e300, 1.7e308])
def test_tiny_and_huge_values(value: float) -> None:
    distribution = of([value])
    reported = distribution.quantile(50)
    assert reported is not None
    assert abs(reported - value) <= value * RELATIVE_ERROR + math.ulp(0.0)
    assert distribution.count_at_most(math.inf) == 1
    assert distribution.count_at_most(1.7976931348623157e308) == 1
    assert Distribution.from_wire(distribution.to_wire()) == distribution


def test_empty_reads_none_and_counts_zero() -> None:
    distribution = Distribution()
    assert distribution.count == 0
    assert distribution.quantile(50) is None
    assert distribution.count_at_most(1.0) == 0
    assert distribution.to_wire() == {"zeros": 0, "sum": 0.0, "counts": {}}


def test_count_at_most_between_bounds_never_overcounts() -> None:
    distribution = of([1.01, 1.02])  # one bucket: (1, 1.03125]
    assert distribution.count_at_most(1.015) == 0
    assert distribution.count_at_most(1.03125) == 2
    assert distribution.count_at_most(-1) == 0
    with pytest.raises(ValueError, match="nan"):
        distribution.count_at_most(math.nan)


def test_total_count_and_copy_are_independent() -> None:
    distribution = of([1.0, 2.0, 0.5])
    copy = distribution.copy()
    copy.add(4.0)
    assert distribution.total == 3.5
    assert (distribution.count, copy.count) == (3, 4)


def test_merge_with_itself_doubles() -> None:
    distribution = of([1.0, 3.0])
    distribution.merge(distribution)
    assert distribution.count == 4
    assert distribution.total == 8.0


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, "1.5", None, True, 10**400])
def test_add_refuses_what_is_not_a_finite_number_at_least_zero(value: Any) -> None:
    distribution = Distribution()
    with pytest.raises(ValueError, match="finite number"):
        distribution.add(value)
    assert distribution == Distribution()


def test_a_sum_that_would_overflow_is_refused() -> None:
    distribution = of([1.7e308])
    with pytest.raises(ValueError, match="overflow"):
        distribution.add(1.7e308)
    assert distribution.count == 1
    with pytest.raises(ValueError, match="overflow"):
        distribution.merge(distribution.copy())


@pytest.mark.parametrize("percentile", [0, -5, 100.01, math.nan])
def test_quantile_outside_0_100_refused(percentile: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        of([1.0]).quantile(percentile)


def good_wire(**changes: Any) -> dict[str, Any]:
    return {"zeros": 1, "sum": 3.0, "counts": {"31": 1, "63": 1}} | changes


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ([], "mapping"),
        ("{}", "mapping"),
        ({"zeros": 0, "sum": 0.0}, "counts"),
        ({"sum": 0.0, "counts": {}}, "zeros"),
        ({"zeros": 0, "counts": {}}, "sum"),
        (good_wire(zeros=-1), "zeros"),
        (good_wire(zeros=1.0), "zeros"),
        (good_wire(zeros=True), "zeros"),
        (good_wire(zeros=2**64), "zeros"),
        (good_wire(sum=math.nan), "sum"),
        (good_wire(sum=math.inf), "sum"),
        (good_wire(sum=-1.0), "sum"),
        (good_wire(sum="3"), "sum"),
        (good_wire(sum=None), "sum"),
        (good_wire(counts=[1, 2]), "counts"),
        (good_wire(counts={"31": -1}), "count of bucket 31"),
        (good_wire(counts={"31": 1.0}), "count of bucket 31"),
        (good_wire(counts={"31": "1"}), "count of bucket 31"),
        (good_wire(counts={"31": None}), "count of bucket 31"),
        (good_wire(counts={"31": 2**63}), "count of bucket 31"),
        (good_wire(counts={31: 1}), "decimal integer"),
        (good_wire(counts={"1.5": 1}), "decimal integer"),
        (good_wire(counts={"031": 1}), "decimal integer"),
        (good_wire(counts={"-0": 1}), "decimal integer"),
        (good_wire(counts={" 31": 1}), "decimal integer"),
        (good_wire(counts={"9" * 400: 1}), "decimal integer"),
        (good_wire(counts={str(MAX_INDEX + 1): 1}), "outside"),
        (good_wire(counts={str(MIN_INDEX - 1): 1}), "outside"),
        (good_wire(counts={"1": 2**62, "2": 2**62}), "at most"),
    ],
)
def test_from_wire_refuses_hostile_input(wire: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Distribution.from_wire(wire)


def test_from_wire_accepts_ints_for_the_sum_and_skips_empty_buckets() -> None:
    distribution = Distribution.from_wire({"zeros": 0, "sum": 3, "counts": {"31": 1, "5": 0}})
    assert distribution.counts == {31: 1}
    assert distribution.total == 3.0
    assert Distribution.from_wire(good_wire()).count == 3


@given(value_lists)
def test_add_many_counts_as_adding_one_by_one(items: list[float]) -> None:
    many = Distribution()
    many.add_many(items)
    assert same(many, of(items))


def test_add_many_takes_deep_subnormals_one_by_one() -> None:
    items = [math.ulp(0.0) * k for k in (1, 2, 3, 5, 7, 64, 65)] + [2.0**-1060, 1.0]
    many = Distribution()
    many.add_many(items)
    assert many == of(items)


@pytest.mark.parametrize(
    "items", [[1.0, -1.0], [1.0, math.nan], [math.inf], [1.7e308, 1.7e308], [1, "2"], [10**400]]
)
def test_add_many_counts_all_or_nothing(items: list[Any]) -> None:
    distribution = of([3.0])
    with pytest.raises(ValueError, match="finite"):
        distribution.add_many(items)
    assert distribution == of([3.0])


# -- the octave and dense forms ----------------------------------------------------------


def at_most(form: dict[str, Any], k: int) -> int:
    """``count_at_most(2**k)`` read from an octave form, as the contract states it."""
    return int(form["zeros"] + sum(form["counts"][: max(k - form["offset"] + 1, 0)]))


@given(value_lists)
def test_octave_counts_equal_count_at_most_at_every_power_of_two(items: list[float]) -> None:
    distribution = of(items)
    octaves = json.loads(json.dumps(distribution.octaves()))
    assert (octaves["zeros"], octaves["sum"]) == (distribution.zeros, distribution.total)
    assert sum(octaves["counts"]) + octaves["zeros"] == distribution.count
    lowest = octaves["offset"] - 2
    for k in range(max(lowest, -1074), min(octaves["offset"] + len(octaves["counts"]) + 2, 1024)):
        assert at_most(octaves, k) == distribution.count_at_most(2.0**k), k
    back = Distribution.from_octaves(octaves)
    assert (back.count, back.zeros, back.total) == (
        distribution.count,
        distribution.zeros,
        distribution.total,
    )
    assert back.octaves() == octaves


@given(value_lists, value_lists, value_lists)
def test_octaves_stay_right_as_values_and_merges_come_after_the_first_export(
    first: list[float], then: list[float], merged: list[float]
) -> None:
    distribution = of(first)
    distribution.octaves()  # from now on kept as values come
    distribution.add_many(then)
    for value in then[:3]:
        distribution.add(value)
    other = of(merged)
    if merged[:1] == [0.0]:
        other.octaves()  # merging one that keeps its octaves, or one that does not
    distribution.merge(other)
    copy = distribution.copy()
    fresh = of(first + then + then[:3] + merged)
    for d in (distribution, copy):
        assert {**d.octaves(), "sum": 0} == {**fresh.octaves(), "sum": 0}


@given(value_lists)
def test_dense_round_trips_through_json(items: list[float]) -> None:
    distribution = of(items)
    dense = json.loads(json.dumps(distribution.dense()))
    assert Distribution.from_dense(dense) == distribution
    counts = dense["counts"]
    assert not counts or (counts[0] and counts[-1])  # no empty bucket at either end
    assert {dense["offset"] + i: n for i, n in enumerate(counts) if n} == distribution.counts


def test_the_empty_forms() -> None:
    empty = {"zeros": 0, "sum": 0.0, "offset": 0, "counts": []}
    assert Distribution().dense() == Distribution().octaves() == empty
    assert Distribution.from_dense(empty) == Distribution.from_octaves(empty) == Distribution()


def test_octaves_cover_each_power_of_two_up_to_and_including_it() -> None:
    octaves = of([0.0, 0.75, 1.0, 1.5, 2.0, 5.0]).octaves()
    # (0.5, 1]: 0.75 and 1.0; (1, 2]: 1.5 and 2.0; (2, 4]: none; (4, 8]: 5.0.
    assert octaves == {"zeros": 1, "sum": 10.25, "offset": 0, "counts": [2, 2, 0, 1]}


def good_listed(**changes: Any) -> dict[str, Any]:
    return {"zeros": 1, "sum": 3.0, "offset": 0, "counts": [1, 0, 2]} | changes


@pytest.mark.parametrize("read", [Distribution.from_dense, Distribution.from_octaves])
@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ([], "mapping"),
        ({"zeros": 0, "sum": 0.0, "offset": 0}, "counts"),
        (good_listed(zeros=-1), "zeros"),
        (good_listed(sum=math.inf), "sum"),
        (good_listed(offset=None), "offset"),
        (good_listed(offset=True), "offset"),
        (good_listed(offset="0"), "offset"),
        (good_listed(offset=1.0), "offset"),
        (good_listed(counts={"0": 1}), "list"),
        (good_listed(counts=[1, -1]), "count"),
        (good_listed(counts=[1, True]), "count"),
        (good_listed(counts=[1, 1.0]), "count"),
        (good_listed(counts=[1, "1"]), "count"),
        (good_listed(counts=[None]), "count"),
        (good_listed(counts=[2**63]), "count"),
        (good_listed(counts=[2**62, 2**62]), "at most"),
        (good_listed(offset=MAX_INDEX), "leave"),
        (good_listed(offset=MIN_INDEX - 1), "leave"),
        (good_listed(counts=[1] * (MAX_INDEX - MIN_INDEX + 2)), "leave"),
    ],
)
def test_the_listed_forms_refuse_hostile_input(read: Any, wire: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read(wire)


def test_octave_offsets_are_bounded_by_the_octaves_of_the_floats() -> None:
    top = {"zeros": 0, "sum": 1.0, "offset": MAX_OCTAVE, "counts": [1]}
    bottom = {"zeros": 0, "sum": 1.0, "offset": MIN_OCTAVE, "counts": [1]}
    assert Distribution.from_octaves(top).counts == {MAX_INDEX: 1}
    assert Distribution.from_octaves(bottom).counts == {MIN_OCTAVE * 32 + 31: 1}
    with pytest.raises(ValueError, match="leave"):
        Distribution.from_octaves({**top, "offset": MAX_OCTAVE + 1})
    with pytest.raises(ValueError, match="leave"):
        Distribution.from_octaves({**bottom, "offset": MIN_OCTAVE - 1})


# -- teeing ------------------------------------------------------------------------------


@given(st.lists(st.tuples(value_lists, value_lists), max_size=5))
def test_a_tee_holds_the_counts_of_everything_teed_into_it(
    parts: list[tuple[list[float], list[float]]],
) -> None:
    target = Distribution()
    target.octaves()
    sources = []
    for before, after in parts:
        source = of(before)  # counted before the tee: merged in when it starts
        source.tee(target)
        source.tee(target)  # again: nothing to do
        source.add_many(after)
        for value in after[:2]:
            source.add(value)
        sources.append(source)
    expected = Distribution.merged(sources)
    assert (target.zeros, target.counts) == (expected.zeros, expected.counts)
    assert {**target.octaves(), "sum": 0} == {**expected.octaves(), "sum": 0}
    # A copy tees into nothing.
    if sources:
        sources[0].copy().add(1.0)
        assert target.counts == expected.counts


def test_a_distribution_tees_into_one_other_only() -> None:
    source = of([1.0])
    source.tee(Distribution())
    with pytest.raises(ValueError, match="another"):
        source.tee(Distribution())


def test_a_tee_never_loops() -> None:
    a, b = of([1.0]), of([2.0])
    with pytest.raises(ValueError, match="itself"):
        a.tee(a)
    a.tee(b)
    with pytest.raises(ValueError, match="itself"):
        b.tee(a)


def test_merging_a_teeing_distribution_with_itself_tees_what_was_added() -> None:
    target = Distribution()
    source = of([1.0, 3.0])
    source.tee(target)
    source.merge(source)
    assert source.counts == {bucket_index(1.0): 2, bucket_index(3.0): 2}
    assert target.counts == source.counts


def test_many_values_at_once_land_in_the_buckets_bucket_index_names() -> None:
    # add_sorted takes 16 values or more from the floats' bits: every bound, each side.
    items = [math.ulp(0.0), 2.0**-1022, 10**300, 3]
    for k in range(-1021, 1000):  # a finite sum
        power = 2.0**k
        items += [power, math.nextafter(power, 0), math.nextafter(power, math.inf)]
        items.append(bucket_upper(bucket_index(power) + 7))
    many = Distribution()
    many.add_many(items)
    assert many.counts == of(items).counts
    assert many.count_at_most(1.0) == sum(1 for v in items if v <= 1.0)
    top = Distribution()
    top.add_many([1.0] * 15 + [sys.float_info.max])
    assert top.counts == {bucket_index(1.0): 15, MAX_INDEX: 1}


@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=60),
    st.lists(st.sampled_from([0.1, 1, 25, 50, 90, 95, 99, 99.9, 100]), max_size=6),
)
def test_quantiles_in_one_pass_equal_each_quantile(values: list[float], ps: list[float]) -> None:
    distribution = Distribution()
    distribution.add_many(values)
    assert distribution.quantiles(ps) == [distribution.quantile(p) for p in ps]


def test_quantiles_refuse_a_percentile_out_of_range() -> None:
    with pytest.raises(ValueError, match="percentile"):
        Distribution().quantiles([50, 0])
