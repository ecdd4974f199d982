"""How values read: unmeasured is "—", counts are grouped, rates and times have one decimal."""

from __future__ import annotations

from typing import Any

import pytest

from ferrox_stats.web import display, panels
from tests.factories import BASE_AT_MS

# The browser tests hold the page's script to the same cases.
FORMAT_CASES: list[tuple[str, Any, str]] = [
    ("count", None, "—"),
    ("count", 0, "0"),
    ("count", 1234567, "1,234,567"),
    ("decimal", None, "—"),
    ("decimal", 0.0, "0.0"),
    ("decimal", 120.25, "120.3"),
    ("decimal", 0.05, "0.1"),
    ("decimal", 999.94, "999.9"),
    ("decimal", 999.95, "1,000"),
    ("decimal", 1234.56, "1,235"),
    ("decimal", -2.25, "-2.3"),
    ("percent", None, "—"),
    ("percent", 0.0, "0.0"),
    ("percent", 0.7345, "73.5"),
    ("total", None, "—"),
    ("total", {}, "0"),
    ("total", {"timeout": 2, "explicit": 1}, "3"),
    ("reasons", None, ""),
    ("reasons", {"explicit": 1, "timeout": 2, "error": 2}, "error 2 · timeout 2 · explicit 1"),
    ("rate_window", {"window_s": 5.0, "decode_samples": 1200}, "5 s window · 1,200 samples"),
    ("latency_window", {"requests": 0, "seconds": None}, "no finished requests in the ring"),
    ("latency_window", {"requests": 3, "seconds": 12.25}, "last 3 requests · 12.3 s"),
    ("archive_state", None, "no archive sink in this process"),
    ("archive_state", {"last_error": None}, ""),
    ("archive_state", {"last_error": "OperationalError"}, "last error: OperationalError"),
    ("uptime", None, "—"),
    ("uptime", 42.9, "42 s"),
    ("uptime", 750, "12 min"),
    ("uptime", 12_000, "3 h 20 min"),
    ("uptime", 183_600, "2 d 3 h"),
    ("text", None, "—"),
    ("text", "", "—"),
    ("text", "gpu-1", "gpu-1"),
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
    for group in panels.GROUPS:
        for counter in group.counters:
            assert counter.fmt in display.FORMATS
            assert not counter.note_fmt or counter.note_fmt in display.FORMATS


def test_times_read_in_utc_to_the_millisecond() -> None:
    assert display.utc_time(BASE_AT_MS + 1_234) == ("00:00:01", "2026-01-01T00:00:01.234Z")
    assert display.utc_datetime(BASE_AT_MS + 1_234) == "2026-01-01 00:00:01.234"
    assert display.utc_time(None) == ("—", "")


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
