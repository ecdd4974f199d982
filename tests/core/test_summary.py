"""Nearest-rank percentiles and means of present values (None is absence, 0 a measurement)."""

from __future__ import annotations

import pytest

from ferrox_stats.core.summary import mean_present, nearest_rank, percentiles


@pytest.mark.parametrize("percentile", [0.1, 50, 99, 100])
def test_single_value_is_every_percentile(percentile: float) -> None:
    assert nearest_rank([42.0], percentile) == 42.0


@pytest.mark.parametrize(
    ("percentile", "value"), [(1, 10), (20, 10), (21, 20), (50, 30), (80, 40), (81, 50), (100, 50)]
)
def test_nearest_rank_picks_an_observed_value_never_interpolates(
    percentile: float, value: float
) -> None:
    assert nearest_rank([10, 20, 30, 40, 50], percentile) == value


@pytest.mark.parametrize("percentile", [0, -1, 100.5, 101])
def test_percentile_outside_0_100_refused(percentile: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        nearest_rank([1.0, 2.0], percentile)


def test_nearest_rank_of_nothing_is_none() -> None:
    assert nearest_rank([], 50) is None


@pytest.mark.parametrize("percentile", [7, 14, 28, 55, 56])
def test_nearest_rank_is_exact_not_float_rounded(percentile: int) -> None:
    assert nearest_rank(list(range(1, 101)), percentile) == percentile


def test_percentiles_skip_none() -> None:
    assert percentiles([None, 300, None, 100, 200]) == {50: 200, 95: 300, 99: 300}


def test_percentiles_of_only_absent_values_are_none() -> None:
    assert percentiles([None, None], wanted=(50, 99)) == {50: None, 99: None}


@pytest.mark.parametrize(
    ("values", "mean"),
    [([], None), ([None], None), ([0], 0.0), ([None, 0, None], 0.0), ([1, None, 2], 1.5)],
)
def test_mean_present_counts_zero_and_ignores_absence(
    values: list[float | None], mean: float | None
) -> None:
    assert mean_present(values) == mean
