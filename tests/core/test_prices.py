"""Prices and cost (``core/prices.py``): schedules, rule 1, the settings' form."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.core.prices import HOUR_MS, ModelPrice, PriceBook, parse, parse_moment_ms

JAN = parse_moment_ms("2026-01-01", "test")
FEB = parse_moment_ms("2026-02-01T00:00:00+00:00", "test")


def book() -> PriceBook:
    return parse(
        {
            "m": [
                {"from": "2026-02-01", "input": 0.5, "output": 1.5},
                {"from": "2026-01-01", "input": 1.0, "output": 2.0, "cached": 0.25},
            ]
        },
        {"gpu-a": [{"from": "2026-01-01T12:00Z", "per_hour": 2.4}]},
    )


def test_the_price_in_force_is_the_latest_that_took_effect() -> None:
    prices = book()
    assert prices.price("m", JAN - 1) is None
    assert prices.price("m", JAN) == ModelPrice(JAN, 1.0, 2.0, 0.25)
    assert prices.price("m", FEB - 1) == ModelPrice(JAN, 1.0, 2.0, 0.25)
    assert prices.price("m", FEB) == ModelPrice(FEB, 0.5, 1.5, None)


def test_each_price_is_in_force_until_the_next_of_its_model() -> None:
    periods = book().model_periods()
    assert [(model, start, end) for model, start, end, _ in periods] == [
        ("m", JAN, FEB),
        ("m", FEB, None),
    ]
    assert [price.input for *_, price in periods] == [1.0, 0.5]
    assert PriceBook().model_periods() == []


def test_a_price_that_takes_effect_within_a_day_names_its_day_in_its_range() -> None:
    noon = parse(
        {
            "m": [
                {"from": "2026-01-01T12:00Z", "input": 1, "output": 1},
                {"from": "2026-01-03T05:00Z", "input": 2, "output": 2},
            ],
            "n": [{"from": "2026-01-01T18:00Z", "input": 1, "output": 1}],
        },
        {},
    )
    day_ms = 24 * HOUR_MS
    assert noon.days_changing(JAN, JAN + day_ms) == [JAN]  # two changes, one day
    assert noon.days_changing(JAN, JAN + 3 * day_ms) == [JAN, JAN + 2 * day_ms]
    assert noon.days_changing(JAN + day_ms, JAN + 2 * day_ms) == []  # between them
    assert noon.days_changing(JAN - day_ms, JAN + 12 * HOUR_MS) == []  # ends at noon
    # Prices from midnights price each UTC day at one price.
    assert book().days_changing(JAN - day_ms, FEB + day_ms) == []


def test_cost_prices_cached_prompt_tokens_apart_and_as_input_without_a_cached_price() -> None:
    prices = book()
    # 1M prompt tokens of which 400k cached, 1M completion, in January.
    assert prices.token_cost("m", JAN, 1_000_000, 1_000_000, 400_000) == pytest.approx(
        0.6 * 1.0 + 0.4 * 0.25 + 2.0
    )
    # February has no cached price: cached tokens cost what input does.
    assert prices.token_cost("m", FEB, 1_000_000, 0, 400_000) == pytest.approx(0.5)
    # An unknown cached count is none cached; more cached than prompt is all cached.
    assert prices.token_cost("m", JAN, 1_000_000, 0, None) == pytest.approx(1.0)
    assert prices.token_cost("m", JAN, 1_000_000, 0, 2_000_000) == pytest.approx(0.25)


def test_nothing_priced_is_none_never_zero() -> None:
    prices = book()
    assert prices.token_cost("unknown-model", FEB, 10, 10, 0) is None
    assert prices.token_cost(None, FEB, 10, 10, 0) is None
    assert prices.token_cost("m", JAN - HOUR_MS, 10, 10, 0) is None  # before any price
    assert prices.token_cost("m", FEB, None, 10, 0) is None
    assert prices.token_cost("m", FEB, 10, None, 0) is None
    assert PriceBook().token_cost("m", FEB, 10, 10, 0) is None
    # A price of 0 is a measurement.
    free = parse({"m": [{"from": "2026-01-01", "input": 0, "output": 0}]}, {})
    assert free.token_cost("m", FEB, 10, 10, 0) == 0.0


def test_a_replicas_hourly_cost() -> None:
    prices = book()
    noon = JAN + 12 * HOUR_MS
    assert prices.hourly("gpu-a", noon - HOUR_MS) is None
    assert prices.hourly("gpu-a", noon) == 2.4
    assert prices.hourly("gpu-b", noon) is None
    assert prices.hourly(None, noon) is None


TOKENS = st.integers(0, 10**9)


@given(
    st.lists(st.tuples(TOKENS, TOKENS, TOKENS), min_size=1, max_size=30),
    st.floats(0, 1000),
    st.floats(0, 1000),
    st.one_of(st.none(), st.floats(0, 1000)),
)
def test_the_cost_of_summed_tokens_is_the_sum_of_each_requests_cost(
    requests: list[tuple[int, int, int]], input_: float, output: float, cached: float | None
) -> None:
    # What lets a rollup bucket be priced from its sums: cost is linear in the tokens
    # (with each request's cached count at most its prompt count, as engines report).
    price = ModelPrice(0, input_, output, cached)
    requests = [(p, c, min(k, p)) for p, c, k in requests]
    each = math.fsum(price.cost(*r) for r in requests)
    summed = price.cost(*(sum(column) for column in zip(*requests, strict=True)))
    assert summed == pytest.approx(each, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(
    ("prices", "costs", "message"),
    [
        ([], {}, "PRICES must be a dict"),
        ({"m": []}, {}, "non-empty list"),
        ({"m": [{"from": "2026-01-01", "input": 1}]}, {}, "missing output"),
        ({"m": [{"from": "2026-01-01", "input": 1, "output": 1, "x": 1}]}, {}, "unknown key 'x'"),
        ({"m": [{"from": "2026-01-01T00:30Z", "input": 1, "output": 1}]}, {}, "whole UTC hour"),
        ({"m": [{"from": "yesterday", "input": 1, "output": 1}]}, {}, "not an ISO 8601"),
        ({"m": [{"from": 20260101, "input": 1, "output": 1}]}, {}, "must be an ISO 8601"),
        ({"m": [{"from": "2026-01-01", "input": -1, "output": 1}]}, {}, "from 0 to"),
        ({"m": [{"from": "2026-01-01", "input": math.nan, "output": 1}]}, {}, "from 0 to"),
        ({"m": [{"from": "2026-01-01", "input": "1", "output": 1}]}, {}, "must be a number"),
        ({"m": [{"from": "2026-01-01", "input": True, "output": 1}]}, {}, "must be a number"),
        (
            {
                "m": [
                    {"from": "2026-01-01", "input": 1, "output": 1},
                    {"from": "2026-01-01T00:00Z", "input": 2, "output": 1},
                ]
            },
            {},
            "same moment",
        ),
        ({}, {"r": [{"from": "2026-01-01"}]}, "missing per_hour"),
        ({}, {"": [{"from": "2026-01-01", "per_hour": 1}]}, "non-empty string"),
    ],
)
def test_a_bad_table_is_refused_naming_what_is_wrong(
    prices: object, costs: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse(prices, costs)
