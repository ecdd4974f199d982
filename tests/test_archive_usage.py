"""Usage over time from the rollups (``archive/usage.py``): what the usage API will call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.rows import Pending
from ferrox_stats.archive.usage import usage
from ferrox_stats.core.distribution import RELATIVE_ERROR
from ferrox_stats.core.summary import nearest_rank
from ferrox_stats.models import FinishedRequest, Rollup
from tests.factories import BASE_AT_MS, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]

START = datetime(2026, 1, 1, tzinfo=UTC)  # BASE_AT_MS
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


def at(delta: timedelta) -> int:
    return BASE_AT_MS + int(delta.total_seconds() * 1000)


def archive(*records: object) -> None:
    write_batch([Pending(None, record, "inst") for record in records])  # type: ignore[arg-type]


def test_grouped_by_model_per_hour() -> None:
    archive(
        make_record(at_ms=at(MINUTE), model="a", prompt_tokens=10, completion_tokens=3),
        make_record(at_ms=at(2 * MINUTE), model="a", prompt_tokens=5, completion_tokens=2),
        make_record(at_ms=at(HOUR), model="b", prompt_tokens=7, completion_tokens=4),
        make_record(at_ms=at(HOUR + MINUTE), model=None, prompt_tokens=1, completion_tokens=None),
    )
    answer = usage(START, START + 2 * HOUR, bucket="hour", group_by=["model"])
    got = [
        (r.bucket, r.group, r.tally.requests, r.tally.prompt_tokens, r.tally.completion_tokens)
        for r in answer.rows
    ]
    assert got == [
        (START, {"model": "a"}, 2, 15, 5),
        (START + HOUR, {"model": None}, 1, 1, 0),
        (START + HOUR, {"model": "b"}, 1, 7, 4),
    ]
    assert (answer.since, answer.until, answer.relative_error) == (
        START,
        START + 2 * HOUR,
        RELATIVE_ERROR,
    )


def test_days_are_summed_from_hours_and_the_range_widened_to_whole_buckets() -> None:
    archive(
        make_record(at_ms=at(HOUR)),
        make_record(at_ms=at(23 * HOUR + 59 * MINUTE)),
        make_record(at_ms=at(DAY + HOUR)),
    )
    answer = usage(START + 5 * HOUR, START + DAY + 2 * HOUR, bucket="day")
    assert (answer.since, answer.until) == (START, START + 2 * DAY)
    assert [(r.bucket, r.group, r.tally.requests) for r in answer.rows] == [
        (START, {}, 2),
        (START + DAY, {}, 1),
    ]
    minutes = usage(START + HOUR, START + HOUR + MINUTE, bucket="minute")
    assert [(r.bucket, r.tally.requests) for r in minutes.rows] == [(START + HOUR, 1)]


def test_errors_aborts_by_reason_and_filters() -> None:
    archive(
        make_record(at_ms=at(MINUTE), via_api_key="team-a"),
        make_record(at_ms=at(MINUTE), via_api_key="team-a", status=500, error="upstream"),
        make_record(at_ms=at(MINUTE), via_api_key="team-a", aborted="timeout"),
        make_record(at_ms=at(MINUTE), via_api_key="team-a", aborted="client_disconnect"),
        make_record(at_ms=at(MINUTE), via_api_key=None, aborted="timeout"),
    )
    [row] = usage(START, START + HOUR, filters={"key": "team-a"}).rows
    assert (row.tally.requests, row.errors, row.aborted) == (4, 1, 2)
    assert row.tally.aborts == {"timeout": 1, "client_disconnect": 1}
    [unkeyed] = usage(START, START + HOUR, group_by=["key", "outcome"], filters={"key": None}).rows
    assert unkeyed.group == {"key": None, "outcome": "aborted"}
    assert unkeyed.as_dict()["aborts"] == {"timeout": 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket": "week"}, "bucket must be one of ['day', 'hour', 'minute'], got 'week'"),
        ({"group_by": ["client"]}, "cannot group or filter by 'client'"),
        ({"filters": {"status": "200"}}, "cannot group or filter by 'status'"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        usage(START, START + HOUR, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aware"):
        usage(START.replace(tzinfo=None), START + HOUR)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.floats(0.0, 120_000.0), min_size=1, max_size=40),
    st.lists(st.integers(0, 2), min_size=40, max_size=40),
)
def test_percentiles_are_within_the_stated_error_of_the_rows(
    durations: list[float], minutes: list[int]
) -> None:
    FinishedRequest.objects.all().delete()
    Rollup.objects.all().delete()
    # Several batches and minute cells merged into one hour.
    for i, ms in enumerate(durations):
        archive(make_record(at_ms=at(minutes[i] * MINUTE) + i, duration_ms=ms))
    [row] = usage(START, START + HOUR).rows
    latency = row.as_dict()["latency"]["duration"]
    assert latency["count"] == len(durations)
    seconds = [ms / 1000 for ms in durations]
    for p in (50, 95, 99):
        exact = nearest_rank(sorted(seconds), p)
        assert latency[f"p{p}"] == pytest.approx(exact, rel=RELATIVE_ERROR, abs=1e-300)
    assert row.as_dict()["latency"]["ttft"]["count"] == len(durations)
