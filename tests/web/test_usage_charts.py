"""The usage page's SVG charts: scales, gaps, and text escaped."""

from __future__ import annotations

import re

import pytest

from ferrox_stats.web import usage_charts
from ferrox_stats.web.usage_charts import Series, bars, lines

LABELS = ["00:00", "01:00", "02:00", "03:00"]
TICKS = [(0, "00:00"), (2, "02:00")]


def text(value: float) -> str:
    return f"{value:g}"


@pytest.mark.parametrize(
    ("largest", "top"),
    [(10, 12), (8, 8), (9, 12), (1, 1.2), (0.5, 0.8), (250, 400), (4000, 4000), (0, 1)],
)
def test_the_axis_top_is_four_whole_steps_above_the_largest_value(
    largest: float, top: float
) -> None:
    assert usage_charts._axis_top(largest) == pytest.approx(top)


def test_a_bucket_without_requests_draws_no_bar() -> None:
    chart = bars("Requests", "d", LABELS, TICKS, [Series("ok", [3, 0, None, 1])], text)
    assert not chart.empty
    assert re.findall(r"<title>([^<]*·[^<]*)</title>", chart.svg) == [
        "00:00 · ok: 3",
        "03:00 · ok: 1",
    ]


def test_nothing_measured_breaks_the_line_and_a_lone_value_is_a_dot() -> None:
    chart = lines("TTFT", "d", LABELS, TICKS, [Series("m p50", [1.0, 2.0, None, 4.0])], text)
    assert chart.svg.count("<path ") == 1  # 00:00-01:00; 03:00 stands alone
    (path,) = re.findall(r' d="([^"]*)"', chart.svg)
    assert path.count("M") == 1 and path.count("L") == 1
    assert "03:00 · m p50: 4" in chart.svg
    assert "02:00 · m p50" not in chart.svg  # absent, not 0


def test_a_chart_with_nothing_measured_is_empty_not_a_flat_line() -> None:
    assert lines("TTFT", "d", LABELS, TICKS, [Series("m", [None] * 4)], text).empty
    assert bars("Cost", "d", LABELS, TICKS, [Series("cost", [None] * 4)], text).empty


def test_names_are_escaped_and_the_chart_is_named_for_screen_readers() -> None:
    chart = bars("A <b>", "what it shows", LABELS, TICKS, [Series("<script>", [1, 1, 1, 1])], text)
    assert "<script>" not in chart.svg and "&lt;script&gt;" in chart.svg
    assert 'role="img"' in chart.svg
    assert re.search(r'aria-labelledby="(\S+) (\S+)"', chart.svg)
    assert "<title id=" in chart.svg and "<desc id=" in chart.svg and "what it shows" in chart.svg
