"""How values read: unmeasured is "—", counts are grouped, rates and times have one decimal."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.web import display, fleet, panels
from tests.factories import BASE_AT_MS

# The browser tests hold the page's script to the same cases.
FORMAT_CASES: list[tuple[str, Any, str]] = [
    ("count", None, "—"),
    ("count", 0, "0"),
    ("count", 1234567, "1,234,567"),
    ("count", 2.5, "3"),
    ("count", 999_999_999_999_999, "999,999,999,999,999"),
    ("count", 10**20, "1.000e+20"),
    ("decimal", None, "—"),
    ("decimal", 0.0, "0.0"),
    ("decimal", 120.25, "120.3"),
    ("decimal", 0.05, "0.1"),
    ("decimal", 999.94, "999.9"),
    ("decimal", 999.95, "1,000"),
    ("decimal", 1234.56, "1,235"),
    ("decimal", -2.25, "-2.3"),
    ("decimal", 5e-324, "0.0"),
    ("decimal", 1e15, "1.000e+15"),
    ("decimal", 1.0005e18, "1.001e+18"),  # a tie: half away from zero, as toExponential
    ("decimal", 1e30, "1.000e+30"),
    ("decimal", -1e300, "-1.000e+300"),
    ("decimal", "12", "—"),
    ("percent", None, "—"),
    ("percent", 0.0, "0.0"),
    ("percent", 0.7345, "73.5"),
    ("percent", 1e300, "1.000e+302"),
    ("total", None, "—"),
    ("total", {}, "0"),
    ("total", {"timeout": 2, "explicit": 1}, "3"),
    ("total", {"timeout": 10**15, "explicit": 1}, "1.000e+15"),
    ("reasons", None, ""),
    ("reasons", {"explicit": 1, "timeout": 2, "error": 2}, "error 2 · timeout 2 · explicit 1"),
    ("reasons", {"error": 10**20}, "error 1.000e+20"),
    ("rate_window", {"window_s": 5.0, "decode_samples": 1200}, "5 s window · 1,200 samples"),
    ("latency_window", {"requests": 0, "seconds": None}, "no finished requests in the ring"),
    ("latency_window", {"requests": 3, "seconds": 12.25}, "last 3 requests · 12.3 s"),
    ("latency_window", {"requests": 3, "seconds": 1e20}, "last 3 requests · 1.000e+20 s"),
    ("archive_state", None, "no archive sink in this process"),
    ("archive_state", {"last_error": None}, ""),
    ("archive_state", {"last_error": "OperationalError"}, "last error: OperationalError"),
    ("uptime", None, "—"),
    ("uptime", 42.9, "42 s"),
    ("uptime", 750, "12 min"),
    ("uptime", 12_000, "3 h 20 min"),
    ("uptime", 183_600, "2 d 3 h"),
    ("uptime", "soon", "—"),
    ("uptime", 1e20, "1.000e+20 s"),
    ("text", None, "—"),
    ("text", "", "—"),
    ("text", "gpu-1", "gpu-1"),
    ("milliseconds", None, "—"),
    ("milliseconds", 0.62, "620.0"),
    ("milliseconds", 0.00012, "0.1"),
    ("milliseconds", 4.25, "4,250"),
    ("milliseconds", 1e306, "—"),  # no longer finite in milliseconds
    ("milliseconds", "0.5", "—"),
    ("requests_over", None, "no finished requests"),
    ("requests_over", {"count": 0, "p50": None}, "no finished requests"),
    ("requests_over", {"count": 1204, "p50": 0.5}, "over 1,204 requests"),
    ("fleet_archive_state", None, "no archive reported"),
    ("fleet_archive_state", {"persisted": 3}, ""),
    ("unreadable_rows", None, ""),
    ("unreadable_rows", 0, ""),
    ("unreadable_rows", 2, "2 heartbeat rows unreadable, skipped"),
    ("age", None, "—"),
    ("age", 0.84, "0.8 s ago"),
    ("age", 9.94, "9.9 s ago"),
    ("age", 42.5, "42 s ago"),
    ("age", 750, "12 min ago"),
    ("age", 1e20, "1.000e+20 s ago"),
]


@pytest.mark.parametrize(("fmt", "value", "shown"), FORMAT_CASES)
def test_formats(fmt: str, value: Any, shown: str) -> None:
    assert display.FORMATS[fmt](value) == shown


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("live.requests.active", 3),
        ("live.archive.pending", None),  # no archive: null all the way down
        ("live.nothing.here", None),
        ("instance", "i-1"),
    ],
)
def test_lookup_follows_a_dotted_path(path: str, value: Any) -> None:
    document = {"instance": "i-1", "live": {"requests": {"active": 3}, "archive": None}}
    assert display.lookup(document, path) == value


def test_every_counter_names_a_known_format() -> None:
    for group in (*panels.GROUPS, *fleet.GROUPS):
        for counter in group.counters:
            assert counter.fmt in display.FORMATS
            assert not counter.note_fmt or counter.note_fmt in display.FORMATS


def test_times_read_in_utc_to_the_millisecond() -> None:
    assert display.local_time(BASE_AT_MS + 1_234) == ("00:00:01", "2026-01-01T00:00:01.234Z")
    assert display.local_datetime(BASE_AT_MS + 1_234) == "2026-01-01 00:00:01.234"
    assert display.local_time(None) == ("—", "")


@pytest.mark.parametrize(
    ("fields", "outcome"),
    [
        ({"status": 200}, "ok"),
        ({"status": 429}, "error"),
        ({"status": 200, "error": "Boom"}, "error"),
        ({"status": 200, "aborted": "timeout"}, "aborted: timeout"),
    ],
)
def test_a_rows_outcome(fields: dict[str, Any], outcome: str) -> None:
    assert display.row(fields)["outcome_text"] == outcome


def test_every_format_has_cases_the_browser_test_holds_the_script_to() -> None:
    assert {fmt for fmt, _, _ in FORMAT_CASES} == set(display.FORMATS)


# -- every format is total over any number ----------------------------------------------

NUMBERS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(),
)
NOT_NUMBERS = st.one_of(st.text(max_size=5), st.lists(st.integers(), max_size=2))


@given(value=st.one_of(NUMBERS, NOT_NUMBERS))
def test_every_format_reads_any_value_as_a_string(value: Any) -> None:
    for name, fmt in display.FORMATS.items():
        shown = fmt(value)
        assert isinstance(shown, str), name
    for name in ("count", "decimal", "percent", "uptime"):
        shown = display.FORMATS[name](value)
        assert len(shown) < 40, (name, shown)


@given(value=NUMBERS)
def test_formats_of_mappings_read_any_number(value: Any) -> None:
    assert isinstance(display.total({"a": value, "b": 1}), str)
    assert isinstance(display.reasons({"a": value, "b": 1}), str)
    assert isinstance(display.rate_window({"window_s": value, "decode_samples": value}), str)
    assert isinstance(display.latency_window({"requests": value, "seconds": value}), str)


@given(value=NUMBERS)
def test_a_number_that_is_not_finite_reads_as_unmeasured(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        assert display.decimal(value) == display.count(value) == display.EMPTY


@given(value=NUMBERS, field=st.sampled_from(sorted(set(display.RECORD_FIELDS) - {"stream"})))
def test_a_row_and_its_detail_render_any_stored_number(value: Any, field: str) -> None:
    # ``field: value`` replaces the request_id or at_ms before it when it names one.
    wire = {"request_id": "r-1", "at_ms": BASE_AT_MS, field: value, "decode_tps": value}
    cells = display.row(wire)
    sections = display.detail(wire)
    assert all(isinstance(v, str) for k, v in cells.items() if k not in ("seq", "id", "request_id"))
    assert all(isinstance(shown, str) for _, fields in sections for _, shown in fields)


@given(at_ms=NUMBERS)
def test_times_read_any_number(at_ms: Any) -> None:
    time, iso = display.local_time(at_ms)
    assert isinstance(time, str) and isinstance(iso, str)
    assert isinstance(display.local_datetime(at_ms), str)
