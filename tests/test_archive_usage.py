"""Usage over time from the rollups (``archive/usage.py``): what the usage API will call."""

from __future__ import annotations

import gc
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.fold import ABANDONED, fold
from ferrox_stats.archive.rows import Pending, outcome
from ferrox_stats.archive.usage import DIMENSIONS, usage
from ferrox_stats.conf import conf
from ferrox_stats.core.distribution import RELATIVE_ERROR
from ferrox_stats.core.rollup import TIMES
from ferrox_stats.core.summary import nearest_rank
from ferrox_stats.models import FinishedRequest, Rollup, RollupDelta
from tests.factories import BASE_AT_MS, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]

START = datetime(2026, 1, 1, tzinfo=UTC)  # BASE_AT_MS
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


def at(delta: timedelta) -> int:
    return BASE_AT_MS + int(delta.total_seconds() * 1000)


def archive(*records: object) -> None:
    """A batch archived, and its rollup deltas folded (as the writer soon would)."""
    write_batch([Pending(None, record, "inst") for record in records])  # type: ignore[arg-type]
    fold("default")


def test_an_answer_folds_the_deltas_no_writer_folded_and_leaves_the_others_to_them() -> None:
    archive(make_record(at_ms=at(MINUTE), model="a"))
    write_batch([Pending(None, make_record(at_ms=at(2 * MINUTE), model="a"), "inst")])

    def requests() -> list[int]:
        answer = usage(START, START + HOUR, bucket="hour", group_by=["model"])
        return [row.tally.requests for row in answer.rows]

    # Just written: a writer folds it within ROLLUP_FOLD_S; the answer does not wait.
    assert requests() == [1]
    assert RollupDelta.objects.count() == 1
    # Left pending past ABANDONED x ROLLUP_FOLD_S (its writer gone): the answer folds it.
    gone = timezone.now() - timedelta(seconds=ABANDONED * conf.ROLLUP_FOLD_S + 1)
    RollupDelta.objects.update(made=gone)
    assert requests() == [2]
    assert not RollupDelta.objects.exists()


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
        make_record(at_ms=at(MINUTE), via_api_key=None, aborted="preempted"),
    )
    [row] = usage(START, START + HOUR, filters={"key": "team-a"}).rows
    assert (row.tally.requests, row.errors, row.aborted) == (4, 1, 2)
    assert row.tally.aborts == {"timeout": 1, "client_disconnect": 1}
    # The known reasons summed from their columns, any other from the JSON: by a
    # group's rows, by the total rows, over the whole range.
    whole = {"timeout": 2, "client_disconnect": 1, "preempted": 1}
    for group_by in ([], ["key"]):
        answer = usage(START, START + HOUR, group_by=group_by, per_bucket=False)
        merged: dict[str, int] = {}
        for each in answer.rows:
            for reason, n in each.tally.aborts.items():
                merged[reason] = merged.get(reason, 0) + n
        assert merged == whole, group_by
    [unkeyed] = usage(START, START + HOUR, group_by=["key", "outcome"], filters={"key": None}).rows
    assert unkeyed.group == {"key": None, "outcome": "aborted"}
    assert unkeyed.as_dict()["aborts"] == {"timeout": 1, "preempted": 1}
    # Counts, whichever way the database summed them (never a Decimal: JSON says "1",
    # and the CSV export, which failed on one, writes them).
    assert {type(n) for n in unkeyed.tally.aborts.values()} == {int}
    from ferrox_stats.archive.usage import csv_lines

    by_key = usage(START, START + HOUR, group_by=["key"])
    assert '""timeout"": 1' in "".join(csv_lines(by_key))


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
    [row] = usage(START, START + HOUR, latency=["duration", "ttft"]).rows
    latency = row.as_dict()["latency"]["duration_s"]
    assert latency["count"] == len(durations)
    seconds = [ms / 1000 for ms in durations]
    for p in (50, 95, 99):
        exact = nearest_rank(sorted(seconds), p)
        assert latency[f"p{p}"] == pytest.approx(exact, rel=RELATIVE_ERROR, abs=1e-300)
    assert row.as_dict()["latency"]["ttft_s"]["count"] == len(durations)


# -- cost ----------------------------------------------------------------------------------

PRICES = {
    "a": [
        {"from": "2026-01-01T00:00Z", "input": 1.0, "output": 2.0, "cached": 0.5},
        # A price change on the hour: the first hour keeps the old price.
        {"from": "2026-01-01T01:00Z", "input": 10.0, "output": 20.0},
    ]
}


def priced(prices: object = PRICES, costs: object = None) -> object:
    from ferrox_stats.core.prices import parse

    return parse(prices, costs or {})


def test_each_hour_is_priced_at_the_price_in_force_and_a_day_sums_its_hours() -> None:
    archive(
        make_record(at_ms=at(MINUTE), model="a", prompt_tokens=1000, completion_tokens=100,
                    cached_tokens=200),
        make_record(at_ms=at(HOUR + MINUTE), model="a", prompt_tokens=1000,
                    completion_tokens=100, cached_tokens=200),
        make_record(at_ms=at(HOUR + MINUTE), model="b", prompt_tokens=5, completion_tokens=5),
    )  # fmt: skip
    first = (800 * 1.0 + 200 * 0.5 + 100 * 2.0) / 1e6
    second = (1000 * 10.0 + 100 * 20.0) / 1e6
    hours = usage(START, START + 2 * HOUR, prices=priced())  # type: ignore[arg-type]
    assert [(r.bucket, r.cost, r.unpriced_requests) for r in hours.rows] == [
        (START, pytest.approx(first), 0),
        (START + HOUR, pytest.approx(second), 1),  # model b has no price
    ]
    day = usage(START, START + DAY, bucket="day", prices=priced())  # type: ignore[arg-type]
    assert [(r.cost, r.unpriced_requests) for r in day.rows] == [(pytest.approx(first + second), 1)]
    by_model = usage(
        START,
        START + DAY,
        bucket="day",
        group_by=["model"],
        prices=priced(),  # type: ignore[arg-type]
    )
    assert [(r.group, r.cost, r.unpriced_requests) for r in by_model.rows] == [
        ({"model": "a"}, pytest.approx(first + second), 0),
        ({"model": "b"}, None, 1),  # nothing priced: None, never 0
    ]


def test_a_model_name_is_priced_whatever_characters_it_holds() -> None:
    # PostgreSQL is given the price table as arrays (a literal each, where Django binds
    # on the client): a name that array syntax would read otherwise must still match.
    names = ["NULL", 'q"u,o{t}e\\s', "  spaced ", "ünï"]
    table = {
        name: [{"from": "2026-01-01T00:00Z", "input": float(n + 1), "output": 0.0}]
        for n, name in enumerate(names)
    }
    archive(
        *(
            make_record(at_ms=at(MINUTE), model=name, prompt_tokens=1000, completion_tokens=1)
            for name in names
        ),
        make_record(at_ms=at(MINUTE), model="unpriced", prompt_tokens=1000),
    )
    answer = usage(START, START + HOUR, group_by=["model"], prices=priced(table))  # type: ignore[arg-type]
    got = {row.group["model"]: (row.cost, row.unpriced_requests) for row in answer.rows}
    assert got == {
        **{name: (pytest.approx((n + 1) * 1000 / 1e6), 0) for n, name in enumerate(names)},
        "unpriced": (None, 1),
    }


# A rollup row per answered cell, priced as it is: always tried.
@example([(5, "a", "k1", 100, 50, 10), (70, "b", None, 10, 5, 0)], "hour", ("model",), True, False)
@example(
    [(5, "a", "k1", 100, 50, 10), (9, "a", "k1", 7, 3, 1)], "hour", tuple(DIMENSIONS), True, False
)
@example(
    [(5, "a", "k1", 100, 50, 10), (70, "a", "k2", 10, 5, 0), (71, "b", "k2", 10, 5, 0)],
    "hour",
    ("model", "key"),  # the key-and-model level's row per cell
    True,
    False,
)
# By key, from the key-and-model level: at day buckets, the first day (a price change
# at 01:00) from its hour rows, the others from their day rows.
@example(
    [
        (5, "a", "k1", 100, 50, 10),
        (70, "a", "k1", 100, 50, 10),
        (71, "b", "k2", 10, 5, 0),
        (1500, "a", "k1", 30, 20, 10),
        (3000, "a", None, 40, 20, 0),
    ],
    "day",
    ("key",),
    True,
    False,
)
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3 * 24 * 60 - 1),  # minute of three days
            st.sampled_from(["a", "b", None]),  # model ("b" has no price)
            st.sampled_from(["k1", "k2", None]),  # key
            st.integers(0, 5000),  # prompt tokens
            st.integers(0, 800),  # completion tokens
            st.integers(0, 5000),  # cached tokens (of the prompt's: at most those)
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(["hour", "day"]),
    # ("model",) and all five at hour buckets: a rollup row per answered cell, priced
    # as it is rather than summed.
    st.sampled_from([(), ("key",), ("outcome",), ("model",), ("model", "key"), tuple(DIMENSIONS)]),
    st.booleans(),
    st.booleans(),
)
def test_the_database_prices_and_buckets_what_each_request_costs(
    requests: list[tuple[int, str | None, str | None, int, int, int]],
    bucket: str,
    group_by: tuple[str, ...],
    per_bucket: bool,
    portable: bool,
) -> None:
    # The oracle: each request priced on its own at the price in force at its hour
    # (a price change at 01:00 and one at the start of the second day), summed per
    # answered bucket and group; the answer prices each rollup row in SQL (a join to
    # the price table; ``portable``: the ORM's CASE that a database without epoch SQL
    # gets) and sums whole days or the whole range in SQL too.
    from ferrox_stats.archive import usage as module

    FinishedRequest.objects.all().delete()
    Rollup.objects.all().delete()
    table = {
        "a": [
            {"from": "2026-01-01T00:00Z", "input": 1.0, "output": 2.0, "cached": 0.5},
            {"from": "2026-01-01T01:00Z", "input": 3.0, "output": 7.0},
            {"from": "2026-01-02T00:00Z", "input": 0.0, "output": 0.0},
        ]
    }
    book = priced(table)
    records = [
        make_record(
            at_ms=at(minute * MINUTE), model=model, via_api_key=key,
            prompt_tokens=prompt, completion_tokens=completion,
            cached_tokens=min(cached, prompt),
        )
        for minute, model, key, prompt, completion, cached in requests
    ]  # fmt: skip
    archive(*records)
    width = {"hour": HOUR, "day": DAY}[bucket]
    want: dict[tuple[object, ...], list[object]] = {}
    for record in records:
        moment = START + timedelta(milliseconds=record.at_ms - BASE_AT_MS)
        start = START + (moment - START) // width * width if per_bucket else START
        labels = {
            "key": record.via_api_key,
            "model": record.model,
            "route": record.route,
            "replica": record.replica,
            "outcome": outcome(record),
        }
        key = (start, *(labels[name] for name in group_by))
        cost = book.token_cost(  # type: ignore[attr-defined]
            record.model,
            record.at_ms - record.at_ms % 3_600_000,
            record.prompt_tokens,
            record.completion_tokens,
            record.cached_tokens,
        )
        sums = want.setdefault(key, [None, 0, 0])
        sums[0] = sums[0] if cost is None else (sums[0] or 0.0) + cost  # type: ignore[operator]
        sums[1] += cost is None  # type: ignore[operator]
        sums[2] += 1  # type: ignore[operator]
    with (
        mock.patch.object(module, "_epoch_sql", lambda vendor: None) if portable else nullcontext()
    ):
        answer = usage(
            START,
            START + 3 * DAY,
            bucket=bucket,
            group_by=group_by,
            prices=book,  # type: ignore[arg-type]
            per_bucket=per_bucket,
        )
    got = {
        (row.bucket, *row.group.values()): [row.cost, row.unpriced_requests, row.tally.requests]
        for row in answer.rows
    }
    assert got.keys() == want.keys()
    for key, (cost, unpriced, count) in want.items():
        expected = None if cost is None else pytest.approx(cost, rel=1e-12, abs=1e-12)
        assert got[key] == [expected, unpriced, count], key


def test_without_prices_nothing_costs_anything_known() -> None:
    archive(make_record(at_ms=at(MINUTE), model="a"))
    [row] = usage(START, START + HOUR).rows
    assert (row.cost, row.unpriced_requests, row.replica_cost) == (None, 1, None)
    assert row.as_dict()["cost"] is None


def test_replica_cost_counts_each_hour_a_replica_served_in_once() -> None:
    costs = {"gpu-a": [{"from": "2026-01-01", "per_hour": 3.0}]}
    archive(
        make_record(at_ms=at(MINUTE), replica="gpu-a", model="a"),
        make_record(at_ms=at(2 * MINUTE), replica="gpu-a", model="b", aborted="timeout"),
        make_record(at_ms=at(2 * HOUR), replica="gpu-a"),
        make_record(at_ms=at(MINUTE), replica="gpu-b"),  # no hourly cost
    )
    prices = priced({}, costs)
    answer = usage(START, START + DAY, bucket="day", group_by=["replica"], prices=prices)  # type: ignore[arg-type]
    assert answer.replica_costed
    # Read from the replica level's hour rows (its day rows would cost one hour a day),
    # each hour's counters summed into the day.
    assert [(r.group["replica"], r.replica_cost, r.requests) for r in answer.rows] == [
        ("gpu-a", 6.0, 3),  # two hours with traffic, however many groups they held
        ("gpu-b", None, 1),
    ]
    total = usage(START, START + DAY, bucket="day", prices=prices)  # type: ignore[arg-type]
    assert [r.replica_cost for r in total.rows] == [6.0]
    minutes = usage(START, START + HOUR, bucket="minute", prices=prices)  # type: ignore[arg-type]
    # Minutes 1 (gpu-a and the unpriced gpu-b) and 2: each a minute's share of the hour.
    assert [r.replica_cost for r in minutes.rows] == [pytest.approx(0.05)] * 2
    # A replica's hours are not a key's or a model's: no guessed share.
    by_model = usage(START, START + DAY, bucket="day", group_by=["model"], prices=prices)  # type: ignore[arg-type]
    assert not by_model.replica_costed
    assert {r.replica_cost for r in by_model.rows} == {None}


def test_totals_sum_each_group_over_the_range_and_merge_its_distributions() -> None:
    archive(
        make_record(at_ms=at(MINUTE), model="a", duration_ms=100.0),
        make_record(at_ms=at(HOUR), model="a", duration_ms=300.0),
        make_record(at_ms=at(HOUR), model="b", duration_ms=200.0),
    )
    answer = usage(START, START + 2 * HOUR, group_by=["model"], latency=["duration"])
    totals = {tuple(r.group.values()): r for r in answer.totals()}
    assert {k: r.tally.requests for k, r in totals.items()} == {("a",): 2, ("b",): 1}
    assert totals[("a",)].tally.duration.count == 2
    whole = usage(START, START + 2 * HOUR, group_by=["model"], per_bucket=False)
    assert [(r.bucket, r.group, r.tally.requests) for r in whole.rows] == [
        (START, {"model": "a"}, 2),
        (START, {"model": "b"}, 1),
    ]


def test_latency_merges_only_the_distributions_asked_for() -> None:
    archive(make_record(at_ms=at(MINUTE), via_api_key="k"))
    # By every group's rows (merged here), and by the total rows and a label's (their
    # stored percentiles).
    for group_by in (["key", "route"], [], ["key"]):
        [row] = usage(START, START + HOUR, latency=["ttft"], group_by=group_by).rows
        assert list(row.as_dict(["ttft"])["latency"]) == ["ttft_s"]
        assert row.latency(["ttft"])["ttft_s"]["count"] == 1
    [row] = usage(START, START + HOUR, latency=["ttft"], group_by=["key", "route"]).rows
    assert (row.tally.duration.count, row.tally.ttft.count, row.tally.tpot.count) == (0, 1, 0)
    with pytest.raises(ValueError, match="latency takes"):
        usage(START, START + HOUR, latency=["queue"])


@pytest.mark.parametrize(
    ("bucket", "group_by"),
    # Every group's rows (two labels or more): summed per day by the database; and at
    # hour buckets by key and route (summed per hour) and by every label (a rollup row
    # per answered cell, read as it is).
    [("day", ["key", "route"]), ("hour", ["key", "route"]), ("hour", list(DIMENSIONS))],
)
def test_the_sums_from_the_database_equal_the_rows_merged_one_by_one(
    bucket: str, group_by: list[str]
) -> None:
    from ferrox_stats.archive.rollups import stored_tally
    from ferrox_stats.core.rollup import Tally

    archive(
        *(
            make_record(
                at_ms=at(n * 7 * MINUTE),
                model=("a", "b", None)[n % 3],
                via_api_key=("k1", "k2")[n % 2],
                aborted=(None, "timeout", None, "client_disconnect")[n % 4],
                prompt_tokens=n * 13,
                completion_tokens=n % 5,
                cached_tokens=n % 3,
            )
            for n in range(40)
        )
    )
    answer = usage(START, START + DAY, bucket=bucket, group_by=group_by, latency=TIMES)
    width = {"hour": HOUR, "day": DAY}[bucket]
    assert len(answer.rows) > 1
    for row in answer.rows:
        merged = Tally()
        labels = {DIMENSIONS[name]: value for name, value in row.group.items()}
        for stored in Rollup.objects.filter(
            span_s=3600, level=0, bucket__gte=row.bucket, bucket__lt=row.bucket + width, **labels
        ):
            merged.merge(stored_tally(stored))
        # A usage row keeps errors and aborts beside its tally.
        assert (row.errors, row.aborted) == (merged.errors, merged.aborted)
        merged.errors = merged.aborted = 0
        assert row.tally.wire() == merged.wire()
        for name in TIMES:
            got, want = getattr(row.tally, name), getattr(merged, name)
            # Counts exactly; the float sums up to the order the rows came in.
            assert (got.zeros, got.counts) == (want.zeros, want.counts), name
            assert got.total == pytest.approx(want.total, rel=1e-12), name


def test_an_answer_larger_than_its_cap_is_refused() -> None:
    from ferrox_stats.archive.usage import TooManyRows

    archive(*(make_record(at_ms=at(MINUTE), model=f"m{n}") for n in range(3)))
    with pytest.raises(TooManyRows, match="more than 2 rows"):
        usage(START, START + HOUR, group_by=["model"], max_rows=2)
    with pytest.raises(TooManyRows, match="more than 10 rows"):
        usage(START, START + DAY, bucket="hour", max_rows=10)  # 24 buckets
    assert len(usage(START, START + HOUR, group_by=["model"], max_rows=3).rows) == 3


def test_abort_reasons_summed_by_the_database_equal_those_summed_in_python() -> None:
    from django.db import connection
    from django.db.models.expressions import RawSQL

    from ferrox_stats.archive import usage as module

    # An engine's own reasons (the known ones are counted in columns, not in the JSON).
    reasons = ("preempted", "kv_evicted", "cancelled")
    archive(
        *(
            make_record(at_ms=at(n * 11 * MINUTE), aborted=reasons[n % 3], via_api_key=f"k{n % 2}")
            for n in range(30)
        )
    )
    epoch = module._epoch_sql(connection.vendor)
    assert epoch is not None  # PostgreSQL or SQLite: the database sums them
    texts = (
        Rollup.objects.filter(span_s=3600, level=0, outcome="aborted")
        .exclude(aborts="")
        .annotate(at_s=RawSQL(epoch, ()))
        .values_list("at_s", "via_api_key", "aborts")
    )
    by_database = sorted(module._abort_sums(texts, ["at_s", "via_api_key"], connection.vendor))
    summed: dict[tuple[object, ...], int] = {}
    for *key, count in module._abort_sums_in_python(texts, 2):
        summed[tuple(key)] = summed.get(tuple(key), 0) + count
    assert by_database == sorted((*key, count) for key, count in summed.items())
    assert sum(count for *_, count in by_database) == 30
    # Summed over every bucket (an answer over the whole range): by key alone.
    keyed = texts.values_list("via_api_key", "aborts")
    by_key = sorted(module._abort_sums(keyed, ["via_api_key"], connection.vendor))
    assert by_key == sorted(
        (key, reason, sum(c for (_, k, r), c in summed.items() if (k, r) == (key, reason)))
        for key, reason in {(k, r) for _, k, r in summed}
    )
    # And over nothing at all.
    assert sorted(module._abort_sums(texts.values_list("aborts"), [], connection.vendor)) == [
        ("cancelled", 10),
        ("kv_evicted", 10),
        ("preempted", 10),
    ]


def _scans(plan: dict[str, object]) -> list[dict[str, object]]:
    """Every node of a plan that reads ``ferrox_stats_rollup``."""
    found = [plan] if plan.get("Relation Name") == "ferrox_stats_rollup" else []
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        found += _scans(child)
    return found


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("group_by", "prices", "counted", "bucket"),
    [
        ([], None, 1, "hour"),
        (["model"], None, 1, "hour"),
        (["key"], None, 1, "hour"),
        (["key", "model"], None, 1, "hour"),
        (["route", "outcome"], None, 1, "hour"),
        # Priced at hour buckets (grouped by the stored bucket): the label's counters
        # (levels 3, 4), and apart the cost from the label's and the model's (7, 8);
        # at day buckets, the counters and the cost from levels 7 and 8 at once.
        (["key"], PRICES, 2, "hour"),
        (["replica"], PRICES, 2, "hour"),
        (["key"], PRICES, 1, "day"),
    ],
)
def test_counters_and_abort_reasons_are_read_from_covering_indexes_alone(
    group_by: list[str], prices: object, counted: int, bucket: str
) -> None:
    # An index-only scan never reads the wide rollup rows (their distributions): each
    # column the answer needs must be in the index (migrations 0014-0016). Vacuumed, so
    # that the visibility map prices an index-only scan below a plain index scan of the
    # same rows (which reads the heap), and with whole-table and bitmap reads priced
    # out: a plan that still reads the heap proves a column is missing.
    # An engine's own abort reason (the known ones are counters: no JSON to read), and
    # rows without one in many groups, so that the partial index of the rows with any
    # is the smaller, as it is in production.
    archive(
        make_record(at_ms=at(timedelta(minutes=5)), aborted="preempted"),
        *(make_record(at_ms=at(n * MINUTE), via_api_key=f"k{n}") for n in range(60)),
    )
    with connection.cursor() as db:
        # Rewritten first (the table and its indexes): an earlier test's rolled-back
        # thousands of rows leave indexes of empty pages behind, which VACUUM does not
        # shrink, and the planner then prefers whichever index stayed small.
        db.execute("VACUUM FULL ferrox_stats_rollup")
        db.execute("VACUUM ANALYZE ferrox_stats_rollup")
    with transaction.atomic(), connection.cursor() as db:
        for setting in ("seqscan", "bitmapscan"):
            db.execute(f"SET LOCAL enable_{setting} = off")
        with CaptureQueriesContext(connection) as captured:
            answer = usage(
                START,
                START + timedelta(days=1),
                bucket=bucket,
                group_by=group_by,
                prices=priced(prices) if prices else None,  # type: ignore[arg-type]
            )
        assert answer.rows
        nodes = []
        for query in captured.captured_queries:
            db.execute("EXPLAIN (FORMAT JSON) " + query["sql"])
            nodes += _scans(db.fetchone()[0][0]["Plan"])
    assert [(n["Node Type"], n.get("Index Name")) for n in nodes] == [
        *[("Index Only Scan", "ferrox_rollup_level_counters")] * counted,
        ("Index Only Scan", "ferrox_rollup_level_aborts"),
    ]
    # By one label or by nothing, a latency answer's stored percentiles too (migrations
    # 0017 and 0019): the merged rows' partial index.
    if len(group_by) <= 1:
        with transaction.atomic(), connection.cursor() as db:
            for setting in ("seqscan", "bitmapscan"):
                db.execute(f"SET LOCAL enable_{setting} = off")
            with CaptureQueriesContext(connection) as captured:
                usage(START, START + timedelta(days=1), group_by=group_by, latency=["ttft"])
            percentiles = [q["sql"] for q in captured.captured_queries if "percentiles" in q["sql"]]
            assert len(percentiles) == 1
            db.execute("EXPLAIN (FORMAT JSON) " + percentiles[0])
            [scan] = _scans(db.fetchone()[0][0]["Plan"])
        assert (scan["Node Type"], scan.get("Index Name")) == (
            "Index Only Scan",
            "ferrox_rollup_percentiles_all",
        )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prices", [None, PRICES])
def test_the_planner_knows_how_few_rows_and_groups_an_answer_reads(prices: object) -> None:
    # 10 days of 5 keys an hour: 1 200 hour rows, 50 (day, key) groups, and 240 rows of
    # the per-model level among 1 800 minute rows. Without the statistics of migration
    # 0018 (or if the answer's day expression stopped being theirs) the planner takes
    # span and level as independent, and guesses a group per row of a day's sum: it
    # starts parallel workers for a few thousand rows, and sorts every row by the day
    # instead of hashing them (on disk, at 30 days of 100 groups an hour).
    archive(
        *(
            make_record(at_ms=at(hour * HOUR + MINUTE), model="a", via_api_key=f"k{hour % 5}")
            for hour in range(10 * 24)
        )
    )
    with connection.cursor() as db:
        db.execute("ANALYZE ferrox_stats_rollup")
    book = priced(prices) if prices else None

    def estimated(**asked: object) -> tuple[int, float, float]:
        with CaptureQueriesContext(connection) as captured:
            answer = usage(START, START + 10 * DAY, prices=book, **asked)  # type: ignore[arg-type]
        [summed] = [q["sql"] for q in captured.captured_queries if "requests" in q["sql"]]
        with connection.cursor() as db:
            db.execute("EXPLAIN (FORMAT JSON) " + summed)
            plan = db.fetchone()[0][0]["Plan"]
        [scan] = _scans(plan)
        return len(answer.rows), plan["Plan Rows"], scan["Plan Rows"]

    with connection.cursor() as db:
        db.execute("SELECT stxname FROM pg_statistic_ext WHERE stxname LIKE 'ferrox_rollup_%%'")
        assert sorted(name for (name,) in db.fetchall()) == [
            "ferrox_rollup_day_groups",
            "ferrox_rollup_levels",  # (this data is too even for its absence to show)
        ]
    # By key at day buckets: 50 groups of 1 200 rows.
    rows, groups, read = estimated(bucket="day", group_by=["key"])
    assert (rows, groups <= 100, read <= 2_400) == (50, True, True), (groups, read)
    # By model at hour buckets: 240 rows of the per-model level, one per answer row.
    rows, groups, read = estimated(bucket="hour", group_by=["model"])
    assert (rows, groups <= 480, read <= 480) == (240, True, True), (groups, read)


# -- rollup levels -------------------------------------------------------------------------


def mixed_records(n: int = 36) -> list[object]:
    return [
        make_record(
            at_ms=at(k * 5 * MINUTE),
            model=("a", "b", None)[k % 3],
            via_api_key=("k1", "k2")[k % 2],
            replica=("r1", "r2")[k // 2 % 2],
            route=("/v1/chat/completions", "/v1/completions")[k // 3 % 2],
            status=(200, 200, 500)[k % 3],
            aborted=(None, None, None, "timeout")[k % 4],
            prompt_tokens=k * 13,
            completion_tokens=k % 7,
            duration_ms=10.0 + k * 37.5,
            ttft_ms=1.0 + k,
        )
        for k in range(n)
    ]


def merged_by_bucket(answer: object, keep: tuple[str, ...] = ()) -> dict[object, object]:
    """The rows of ``answer`` merged per bucket and the ``keep`` labels of their group."""
    return merged_rows(answer.rows, keep, by_bucket=True)  # type: ignore[attr-defined]


def merged_rows(
    rows: list[object], keep: tuple[str, ...], *, by_bucket: bool = False
) -> dict[object, object]:
    from ferrox_stats.archive.usage import UsageRow

    merged: dict[object, UsageRow] = {}
    for row in rows:
        labels = tuple(row.group[name] for name in keep)  # type: ignore[attr-defined]
        key = (row.bucket, *labels) if by_bucket else labels  # type: ignore[attr-defined]
        into = merged.get(key)
        if into is None:
            into = merged[key] = UsageRow(row.bucket, dict(zip(keep, labels, strict=True)))  # type: ignore[attr-defined]
        into.add_row(row)  # type: ignore[arg-type]
    return merged


def assert_merged_level_answers_as_the_groups(
    since: datetime, until: datetime, bucket: str, coarse: tuple[str, ...], fine: tuple[str, ...]
) -> tuple[object, object]:
    """The answer grouped by ``coarse`` (a merged level's) row for row equal to the one
    grouped by ``fine`` (every group's) merged down to it; both answers."""
    coarse_answer = usage(since, until, bucket=bucket, group_by=coarse, latency=TIMES)
    fine_answer = usage(since, until, bucket=bucket, group_by=fine, latency=TIMES)
    want = merged_by_bucket(fine_answer, coarse)
    assert len(coarse_answer.rows) == len(want) >= 1
    for row in coarse_answer.rows:
        same_row(row, want[(row.bucket, *row.group.values())])
    return coarse_answer, fine_answer


def same_row(got: object, want: object) -> None:
    a, b = got.as_dict(), want.as_dict()  # type: ignore[attr-defined]
    assert a == {**b, "cost": pytest.approx(b["cost"]) if b["cost"] else b["cost"]}


@pytest.mark.parametrize(
    ("coarse", "fine"),
    [
        ((), ("key", "route")),
        ((), ("replica", "outcome")),
        (("model",), ("model", "key", "route")),
        (("key",), ("key", "route")),
        (("replica",), ("replica", "outcome")),
        (("route",), ("route", "model")),
        (("outcome",), ("outcome", "key")),
    ],
)
@pytest.mark.parametrize("bucket", ["minute", "hour", "day"])
def test_a_merged_level_answers_what_the_groups_merged_answer(
    coarse: tuple[str, ...], fine: tuple[str, ...], bucket: str
) -> None:
    # Ungrouped reads the total rows (level 2), by model the model rows (level 1), by
    # key, replica, route or outcome theirs (3-6): the same counters, abort reasons
    # and distributions as every group's rows merged.
    archive(*mixed_records())
    assert_merged_level_answers_as_the_groups(START, START + 4 * HOUR, bucket, coarse, fine)


@pytest.mark.parametrize("stored", [True, False])
@pytest.mark.parametrize(
    ("coarse", "fine"),
    [((), ("key", "route")), (("model",), ("model", "route")), (("key",), ("key", "model"))],
)
def test_a_merged_levels_totals_over_days_and_hours_equal_the_groups_merged(
    coarse: tuple[str, ...], fine: tuple[str, ...], stored: bool
) -> None:
    # Three days of requests, asked from 05:00 on the first to 03:00 on the third: the
    # totals of a merged level come from the second day's day row and the hours at
    # either end; its hours' percentiles from the rows (or, for rows written before
    # migration 0017, ``stored=False``, from their distributions).
    archive(*(record for k in range(3) for record in shifted(mixed_records(24), k * DAY)))
    if not stored:
        Rollup.objects.update(percentiles="")
    since, until = START + 5 * HOUR, START + 2 * DAY + 3 * HOUR
    for bucket in ("hour", "day"):
        coarse_answer, fine_answer = assert_merged_level_answers_as_the_groups(
            since, until, bucket, coarse, fine
        )
        assert len(coarse_answer.rows) >= 2  # type: ignore[attr-defined]
        fine_totals = merged_rows(fine_answer.totals(), coarse)  # type: ignore[attr-defined]
        totals = coarse_answer.totals()  # type: ignore[attr-defined]
        assert len(totals) == len(fine_totals) >= 1
        for total in totals:
            same_row(total, fine_totals[tuple(total.group.values())])
        whole = usage(since, until, bucket=bucket, group_by=coarse, latency=TIMES, per_bucket=False)
        for row, total in zip(whole.rows, totals, strict=True):
            same_row(row, total)


def shifted(records: list[object], by: timedelta) -> list[object]:
    return [r._replace(at_ms=r.at_ms + int(by.total_seconds() * 1000)) for r in records]  # type: ignore[attr-defined]


def test_each_answer_reads_the_coarsest_level_that_keeps_what_it_needs() -> None:
    from django.db.models import F

    archive(*mixed_records())
    hours = Rollup.objects.filter(span_s=3600)
    # A marker on each merged row: the answers that read a level show its rows' count.
    hours.filter(level=1).update(cached_tokens=F("cached_tokens") + 1000)
    hours.filter(level=2).update(cached_tokens=F("cached_tokens") + 1_000_000)
    hours.filter(level=3).update(cached_tokens=F("cached_tokens") + 10_000_000)
    hours.filter(level=4).update(cached_tokens=F("cached_tokens") + 100_000_000)
    hours.filter(level=7).update(cached_tokens=F("cached_tokens") + 10**9)
    hours.filter(level=8).update(cached_tokens=F("cached_tokens") + 10**10)
    hours.filter(level=10).update(cached_tokens=F("cached_tokens") + 10**11)

    def cached(**kwargs: object) -> int:
        answer = usage(START, START + 4 * HOUR, per_bucket=False, **kwargs)  # type: ignore[arg-type]
        return sum(row.tally.cached_tokens for row in answer.rows)

    def honest(**labels: object) -> int:
        return sum(hours.filter(level=0, **labels).values_list("cached_tokens", flat=True))

    models, totals = hours.filter(level=1).count(), hours.filter(level=2).count()
    assert (models, totals) == (9, 3)  # three models and three hours
    assert cached() == honest() + 1_000_000 * totals
    assert cached(group_by=["model"]) == honest() + 1000 * models
    assert cached(filters={"model": "a"}) == honest(model="a") + 1000 * 3
    assert cached(filters={"model": None}) == honest(model=None) + 1000 * 3
    # Tokens are priced per model: the model rows, even ungrouped.
    assert cached(prices=priced()) == honest() + 1000 * models
    # One other label: its own level's rows (the replicas' cost too, from their hours).
    keys, replicas = hours.filter(level=3).count(), hours.filter(level=4).count()
    assert (keys, replicas) == (6, 6)  # two of each, three hours
    assert cached(group_by=["replica"]) == honest() + 100_000_000 * replicas
    costed = priced({}, {"r1": [{"from": "2026-01-01", "per_hour": 1.0}]})
    assert cached(group_by=["replica"], prices=costed) == honest() + 100_000_000 * replicas
    assert cached(filters={"key": "k1"}) == honest(via_api_key="k1") + 10_000_000 * 3
    assert cached(group_by=["key"]) == honest() + 10_000_000 * keys
    # A label and the model (priced tokens count the model as one): their level's rows.
    pairs = {level: hours.filter(level=level).count() for level in (7, 8, 10)}
    assert pairs == {7: 18, 8: 18, 10: 18}  # six pairs an hour, three hours
    assert cached(group_by=["key"], prices=priced()) == honest() + 10**9 * pairs[7]
    assert cached(group_by=["key", "model"]) == honest() + 10**9 * pairs[7]
    assert cached(group_by=["replica"], prices=priced()) == honest() + 10**10 * pairs[8]
    assert cached(group_by=["model", "outcome"]) == honest() + 10**11 * pairs[10]
    assert cached(filters={"outcome": "ok"}, prices=priced()) == (
        honest(outcome="ok") + 10**11 * hours.filter(level=10, outcome="ok").count()
    )
    # Two labels but the model: every group's rows.
    assert cached(group_by=["key", "route"]) == honest()
    assert cached(group_by=["key"], filters={"replica": "r1"}) == honest(replica="r1")
    assert cached(group_by=["key"], filters={"replica": "r1"}, prices=priced()) == honest(
        replica="r1"
    )


def test_an_answer_holds_no_object_per_cell_the_collector_tracks() -> None:
    # The reason ``Cells`` are columns: thousands of tracked objects per answer reached
    # the collector's oldest generation and brought on its full collections.
    costs = {"gpu-a": [{"from": "2026-01-01", "per_hour": 3.0}]}
    prices = {"a": [{"from": "2026-01-01", "input": 1.0, "output": 2.0}]}
    archive(
        *(
            make_record(
                at_ms=at(n * 7 * MINUTE),
                replica=f"gpu-{'ab'[n % 2]}",
                model="a",
                aborted=(None, "timeout", "preempted")[n % 3],
            )
            for n in range(60)
        )
    )
    answer = usage(
        START,
        START + DAY,
        group_by=["replica"],
        prices=priced(prices, costs),  # type: ignore[arg-type]
        latency=["duration"],
    )
    cells = answer.cells
    assert len(cells) >= 8
    assert any(cells.aborts) and any(cells.cost) and any(cells.replica_cost)
    assert any(cells.percentiles) or any(cells.tallies)
    for name in type(cells).__slots__:
        assert len(getattr(cells, name)) == len(cells), name
    gc.collect()  # (a tuple is left untracked by the collection that finds it atomic)
    tracked = {
        name: sum(map(gc.is_tracked, getattr(cells, name)))
        for name in type(cells).__slots__
        if name != "tallies"  # made only where distributions are merged in Python
    }
    assert tracked == dict.fromkeys(tracked, 0)
    # Read as rows, they are the same cells.
    assert [row.requests for row in answer.rows] == cells.requests
    assert [tuple(row.group.values()) for row in answer.rows] == cells.group


@pytest.mark.parametrize("group_by", [["model"], ["model", "route"]])
def test_an_answer_moves_few_objects_into_the_collectors_oldest_generation(
    group_by: list[str],
) -> None:
    # Python collects its oldest generation whole once a quarter as many objects as it
    # holds have moved in: an answer that moves an object per cell there (a row object
    # per cell, an iterator per row in a transposition) brings those collections on.
    # Collections made frequent here, every survivor of a middle-generation collection
    # counted: by one label (a row per cell, the columns transposed) and by two.
    cells = 3000
    archive(
        *(
            make_record(at_ms=at(n * MINUTE), model=f"m{n % 2}", route=f"/r{n % 3}")
            for n in range(cells)
        )
    )
    moved = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 1:
            moved.append(len(gc.get_objects(1)))

    thresholds = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(count)
    gc.set_threshold(100, 1, 1_000_000)
    try:
        answer = usage(START, START + 3 * DAY, bucket="minute", group_by=group_by)
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(count)
    assert len(answer.cells) == cells
    assert moved  # (collections did happen)
    assert sum(moved) < cells / 6, moved  # (a few hundred the query makes)
