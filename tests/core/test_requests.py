"""Record, entry() and Stats: what /admin/stats and /v1/requests report (SPEC §2 requests)."""

from __future__ import annotations

import pytest

from ferrox_stats.core.requests import (
    MAX_PAGE,
    Record,
    Stats,
    decode_tps,
    encodable,
    entry,
    page_entries,
)

WIRE_NAMES = [
    "seq", "request_id", "at_ms", "route", "model", "status", "stream", "prompt_tokens",
    "completion_tokens", "cached_tokens", "ttft_ms", "duration_ms", "queue_ms", "decode_ms",
    "finish_reason", "aborted", "error", "client", "via_api_key", "replica", "decode_tps",
    "itl_ms",
]  # fmt: skip


def stats_of(*records: Record, capacity: int = 16) -> Stats:
    stats = Stats(capacity=capacity)
    for record in records:
        stats.record(record)
    return stats


def test_record_defaults_every_field_to_none() -> None:
    assert all(value is None for value in Record())


def test_record_is_immutable() -> None:
    with pytest.raises(AttributeError):
        Record().status = 200  # type: ignore[misc]


def test_entry_has_exactly_the_wire_names() -> None:
    assert list(entry(Record())) == WIRE_NAMES


def test_entry_of_empty_record_is_all_null() -> None:
    assert set(entry(Record()).values()) == {None}


def test_entry_carries_fields_and_seq() -> None:
    wire = entry(Record(request_id="chatcmpl-1", status=200, stream=False, model=None), seq=7)
    assert wire["seq"] == 7
    assert (wire["request_id"], wire["status"], wire["stream"]) == ("chatcmpl-1", 200, False)
    assert wire["model"] is None


def test_derived_rates_from_decode_loop() -> None:
    wire = entry(Record(completion_tokens=11, decode_ms=500.0))
    assert wire["decode_tps"] == 20.0
    assert wire["itl_ms"] == 50.0


@pytest.mark.parametrize(
    ("completion_tokens", "decode_ms"),
    [(None, 500.0), (0, 500.0), (1, 500.0), (11, None), (None, None)],
)
def test_derived_rates_null_when_not_computable(
    completion_tokens: int | None, decode_ms: float | None
) -> None:
    wire = entry(Record(completion_tokens=completion_tokens, decode_ms=decode_ms))
    assert wire["decode_tps"] is None
    assert wire["itl_ms"] is None


def test_two_tokens_is_one_decode_step() -> None:
    wire = entry(Record(completion_tokens=2, decode_ms=40.0))
    assert (wire["decode_tps"], wire["itl_ms"]) == (25.0, 40.0)


@pytest.mark.parametrize(("percentile", "value"), [("p50", 300), ("p95", 1000), ("p99", 1000)])
def test_duration_percentiles_are_nearest_rank(percentile: str, value: float) -> None:
    stats = stats_of(*(Record(duration_ms=ms) for ms in (1000, 200, 400, 100, 300)))
    assert getattr(stats.summary(), f"duration_{percentile}_ms") == value


def test_ttft_summaries_skip_rows_without_one() -> None:
    summary = stats_of(*(Record(ttft_ms=ms) for ms in (100, 200, None, 300))).summary()
    assert summary.ttft_mean_ms == 200.0
    assert (summary.ttft_p50_ms, summary.ttft_p99_ms) == (200, 300)
    assert summary.duration_p50_ms is None
    assert summary.window_requests == 4


def test_ttft_mean_of_no_ttft_is_none() -> None:
    assert stats_of(Record(duration_ms=5.0)).summary().ttft_mean_ms is None


def test_ttft_mean_counts_zero() -> None:
    assert stats_of(Record(ttft_ms=0.0)).summary().ttft_mean_ms == 0.0


def test_empty_summary_is_none_not_zero() -> None:
    summary = Stats(capacity=4).summary()
    assert summary.window_requests == 0
    assert summary.window_seconds is None
    assert {
        summary.duration_p50_ms, summary.duration_p95_ms, summary.duration_p99_ms,
        summary.ttft_p50_ms, summary.ttft_p95_ms, summary.ttft_p99_ms, summary.ttft_mean_ms,
    } == {None}  # fmt: skip


@pytest.mark.parametrize(
    ("at_ms", "seconds"),
    [((5_000, 2_000, 3_500), 3.0), ((2_000,), 0.0), ((None, 1_000, 1_250), 0.25), ((None,), None)],
)
def test_window_seconds_spans_oldest_to_newest_finish(
    at_ms: tuple[int | None, ...], seconds: float | None
) -> None:
    assert stats_of(*(Record(at_ms=at) for at in at_ms)).summary().window_seconds == seconds


def test_summary_covers_only_what_the_ring_retains() -> None:
    stats = stats_of(
        Record(duration_ms=9_999, at_ms=0),
        Record(duration_ms=10, at_ms=1_000),
        Record(duration_ms=20, at_ms=3_000),
        capacity=2,
    )
    summary = stats.summary()
    assert summary.window_requests == 2
    assert summary.duration_p99_ms == 20
    assert summary.window_seconds == 2.0


def test_since_caps_limit_at_max_page() -> None:
    stats = Stats(capacity=10, max_page=3)
    for n in range(10):
        stats.record(Record(request_id=f"r{n}"))
    page = stats.since(0, 100)
    assert [seq for seq, _ in page.rows] == [0, 1, 2]
    assert page.next_cursor == 3


@pytest.mark.parametrize(("capacity", "max_page", "expected"), [(10, 256, 10), (1024, 5, 5)])
def test_max_page_never_exceeds_capacity(capacity: int, max_page: int, expected: int) -> None:
    assert Stats(capacity=capacity, max_page=max_page).max_page == expected


def test_default_max_page_is_max_page() -> None:
    assert Stats().max_page == MAX_PAGE


@pytest.mark.parametrize("limit", [0, -1])
def test_since_limit_below_one_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        Stats(capacity=4).since(0, limit)


@pytest.mark.parametrize("max_page", [0, -1])
def test_max_page_below_one_refused(max_page: int) -> None:
    with pytest.raises(ValueError, match="max_page"):
        Stats(max_page=max_page)


def test_stats_exposes_ring_instance_and_recorded_total() -> None:
    stats = Stats(capacity=2, instance="web-1")
    assert [stats.record(Record()) for _ in range(3)] == [0, 1, 2]
    assert (stats.instance, stats.recorded_total) == ("web-1", 3)
    assert stats.since(0).instance == "web-1"


def test_page_entries_are_wire_dicts_with_seq_oldest_first() -> None:
    stats = stats_of(Record(request_id="a"), Record(request_id="b"), Record(request_id="c"))
    entries = page_entries(stats.since(1, 10))
    assert [(e["seq"], e["request_id"]) for e in entries] == [(1, "b"), (2, "c")]
    assert all(list(e) == WIRE_NAMES for e in entries)


def test_encodable_replaces_each_lone_surrogate_and_keeps_the_rest() -> None:
    record = Record(request_id="r\ud800", model="m\udc80\ud800x", route="/v1/\u00e9", status=200)
    clean = encodable(record)
    assert (clean.request_id, clean.model, clean.route) == (
        "r\ufffd",
        "m\ufffd\ufffdx",
        "/v1/\u00e9",
    )
    assert clean.status == 200
    fine = Record(request_id="r-1", model="\u4e16\U0001f600")
    assert encodable(fine) is fine


def test_a_decode_rate_too_large_for_a_float_is_not_a_measurement() -> None:
    assert decode_tps(Record(completion_tokens=100, decode_ms=5e-324)) is None
    assert decode_tps(Record(completion_tokens=3, decode_ms=1e-300)) == 2e303


@pytest.mark.parametrize(
    "field",
    # Every field the record declares as text (ForwardRef under postponed annotations).
    [f for f, kind in Record.__annotations__.items() if "str" in str(kind)],
)
def test_encodable_finds_a_lone_surrogate_in_every_text_field(field: str) -> None:
    # The ASCII fast path must cover each text field, or one would pass unchecked.
    dirty = Record(status=200, **{field: "x\udfff"})
    assert getattr(encodable(dirty), field) == "x\ufffd"
