"""Records to rows and back (``ferrox_stats.archive.rows``)."""

from __future__ import annotations

import pytest

from ferrox_stats.archive.rows import (
    Pending,
    at_ms_to_datetime,
    datetime_to_at_ms,
    dead_letter_payload,
    invalid_reason,
    outcome,
)
from tests.factories import make_record


@pytest.mark.parametrize("at_ms", [0, 1, 1_767_225_600_123, -86_400_000, 253_402_000_000_000])
def test_finish_times_round_trip_to_the_millisecond(at_ms: int) -> None:
    assert datetime_to_at_ms(at_ms_to_datetime(at_ms)) == at_ms


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, "ok"),
        ({"status": 404}, "error"),
        ({"error": "EngineError", "status": 500}, "error"),
        ({"aborted": "client_disconnect", "error": "ValueError"}, "aborted"),
        ({"status": None}, "ok"),
    ],
)
def test_outcome(overrides: dict[str, object], expected: str) -> None:
    assert outcome(make_record(**overrides)) == expected


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"at_ms": None}, "at_ms is required and must be an integer"),
        ({"at_ms": 10**16}, "at_ms 10000000000000000 is outside the datetime range"),
        ({"replica": None}, "replica is required"),
        ({"model": "m" * 201}, "model is longer than 200 characters"),
        ({"client": "a\x00b"}, "client contains a NUL character"),
        ({"model": "a\ud800b"}, "model is not valid Unicode (a lone surrogate)"),
        ({"route": 7}, "route must be a string"),
        ({"prompt_tokens": 2**64}, f"prompt_tokens {2**64} is out of range"),
        ({"status": 40000}, "status 40000 is out of range"),
        ({"completion_tokens": 1.5}, "completion_tokens must be an integer"),
        ({"ttft_ms": float("nan")}, "ttft_ms is not finite"),
        ({"duration_ms": float("inf")}, "duration_ms is not finite"),
        ({"decode_ms": "fast"}, "decode_ms must be a number"),
        ({"stream": "yes"}, "stream must be a boolean"),
    ],
)
def test_records_that_can_never_be_rows_say_why(overrides: dict[str, object], reason: str) -> None:
    assert invalid_reason(Pending(0, make_record(**overrides), "i")) == reason


def test_a_plausible_record_is_valid() -> None:
    assert invalid_reason(Pending(0, make_record(), "i")) is None


def test_the_dead_letter_payload_is_json_safe() -> None:
    record = make_record(client="a\x00b", ttft_ms=float("nan"), route=7)
    payload = dead_letter_payload(Pending(3, record, "inst"))
    assert payload["client"] == "a\\x00b"
    assert payload["ttft_ms"] == "nan"
    assert payload["route"] == 7
    assert (payload["seq"], payload["instance"]) == (3, "inst")
