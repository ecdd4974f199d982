"""RateWindow, LastKnown and pool_occupancy (SPEC §2 rate)."""

from __future__ import annotations

import math

import pytest

from ferrox_stats.core.rate import LastKnown, RateWindow, pool_occupancy


def test_four_tokens_one_second_ago_read_four_per_second() -> None:
    window = RateWindow(5.0)
    window.observe(100.0, 4)
    assert window.per_second(101.0) == 4.0


def test_lone_sample_at_now_is_floored_at_min_span_not_exploded() -> None:
    window = RateWindow(5.0, min_span_s=1.0)
    window.observe(7.0, 4)
    reading = window.reading(7.0)
    assert math.isfinite(reading.per_second)
    assert reading.per_second == 4.0
    assert reading.span_s == 1.0


def test_a_reading_states_the_amount_it_divided() -> None:
    # Readings of several processes combine as amounts over spans, never as rates.
    window = RateWindow(5.0)
    window.observe(10.0, 6)
    window.observe(12.0, 4)
    reading = window.reading(14.0)
    assert (reading.amount, reading.span_s, reading.per_second) == (10, 4.0, 2.5)
    assert window.reading(30.0).amount == 0.0


def test_rate_divides_by_span_observed_not_window_length() -> None:
    window = RateWindow(5.0)
    for tick in range(10):  # 5 tokens every 0.1 s from t=0: 50 tok/s
        window.observe(tick / 10, 5)
    assert window.per_second(1.0) == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("now", "samples", "per_second"),
    [(14.0, 2, 3 / 4), (15.0, 2, 3 / 5), (15.5, 1, 2 / 4.5), (16.0, 1, 2 / 5), (16.5, 0, 0.0)],
)
def test_samples_older_than_window_dropped_and_one_at_cutoff_kept(
    now: float, samples: int, per_second: float
) -> None:
    window = RateWindow(5.0)
    window.observe(10.0, 1)
    window.observe(11.0, 2)
    reading = window.reading(now)
    assert reading.samples == samples
    assert reading.per_second == pytest.approx(per_second)


@pytest.mark.parametrize("observed", [False, True])
def test_idle_window_reads_measured_zero_with_no_samples(observed: bool) -> None:
    window = RateWindow(5.0)
    if observed:
        window.observe(0.0, 500)
    reading = window.reading(5.5)
    assert reading.per_second == 0.0
    assert reading.samples == 0


def test_reading_states_its_window_and_sample_count() -> None:
    window = RateWindow(2.5)
    window.observe(1.0, 3)
    window.observe(2.0, 0)
    reading = window.reading(2.0)
    assert reading.window_s == 2.5
    assert reading.samples == 2


def test_sample_cap_keeps_the_newest_samples() -> None:
    window = RateWindow(60.0, sample_cap=3)
    for t in range(5):
        window.observe(float(t), t + 1)
    reading = window.reading(4.0)
    assert reading.samples == 3
    assert reading.per_second == (3 + 4 + 5) / (4.0 - 2.0)


@pytest.mark.parametrize("amount", [-1, -0.5])
def test_negative_amount_refused(amount: float) -> None:
    window = RateWindow(5.0)
    with pytest.raises(ValueError, match="amount"):
        window.observe(0.0, amount)
    assert window.reading(0.0).samples == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window_s": 0},
        {"window_s": -1},
        {"window_s": math.nan},
        {"window_s": 5, "sample_cap": 0},
        {"window_s": 5, "sample_cap": -3},
        {"window_s": 5, "sample_cap": 2.0},
        {"window_s": 5, "min_span_s": 0},
        {"window_s": 5, "min_span_s": 6},
    ],
)
def test_bad_constructor_args_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RateWindow(**kwargs)  # type: ignore[arg-type]


def test_last_known_is_none_until_a_report_carries_it() -> None:
    known: LastKnown[float] = LastKnown()
    assert known.get(0.0) is None
    assert known.age_s(0.0) is None
    known.observe(1.0, 0.0)
    assert known.get(1.0) == 0.0


def test_last_known_report_without_the_value_does_not_overwrite() -> None:
    known: LastKnown[float] = LastKnown()
    known.observe(1.0, 0.5)
    known.observe(2.0, None)
    assert known.get(3.0) == 0.5
    assert known.age_s(3.0) == 2.0


@pytest.mark.parametrize(("now", "value"), [(10.0, 0.25), (14.0, 0.25), (14.5, None)])
def test_last_known_reads_none_after_max_age(now: float, value: float | None) -> None:
    known: LastKnown[float] = LastKnown(max_age_s=4.0)
    known.observe(10.0, 0.25)
    assert known.get(now) == value


def test_last_known_newer_report_replaces_and_resets_age() -> None:
    known: LastKnown[int] = LastKnown(max_age_s=4.0)
    known.observe(0.0, 3)
    known.observe(6.0, 7)
    assert known.get(9.0) == 7
    assert known.age_s(9.0) == 3.0


@pytest.mark.parametrize("max_age_s", [0, -1.0])
def test_last_known_max_age_must_be_positive(max_age_s: float) -> None:
    with pytest.raises(ValueError):
        LastKnown(max_age_s=max_age_s)


@pytest.mark.parametrize(
    ("used", "total", "occupancy"),
    [
        (3, 4, 0.75),
        (0, 4, 0.0),
        (4, 4, 1.0),
        (3, 0, None),
        (0, 0, None),
        (None, 4, None),
        (3, None, None),
    ],
)
def test_pool_occupancy_is_none_without_a_pool_report(
    used: float | None, total: float | None, occupancy: float | None
) -> None:
    assert pool_occupancy(used, total) == occupancy


@pytest.mark.parametrize(("used", "total"), [(5, 4), (-1, 4)])
def test_pool_occupancy_used_outside_pool_refused(used: float, total: float) -> None:
    with pytest.raises(ValueError):
        pool_occupancy(used, total)
