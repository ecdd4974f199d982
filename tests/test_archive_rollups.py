"""Rollups kept in the archive batch's transaction (``archive/rollups.py``, as deltas
that ``archive/fold.py`` folds in) and rebuilt from the archive (``archive/rebuild.py``):
they equal a GROUP BY over the archived rows, whatever the batches held (nulls,
duplicates, dead letters), however the folds fell, and after faults."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDay, TruncHour, TruncMinute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferrox_stats.archive import batch, rollups
from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.fold import fold
from ferrox_stats.archive.rebuild import rebuild
from ferrox_stats.archive.rollups import (
    DAY,
    PERCENTILES,
    cells_of,
    group_key,
    stored_tally,
    upsert,
)
from ferrox_stats.archive.rows import Pending, datetime_to_at_ms
from ferrox_stats.core.distribution import Distribution
from ferrox_stats.core.rollup import MAX_TOKENS, TIMES, Tally
from ferrox_stats.models import DeadLetter, FinishedRequest, Rollup, RollupDelta
from tests.factories import BASE_AT_MS, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]

GROUP = ("model", "route", "replica", "via_api_key", "outcome")
Key = tuple[int, datetime, int, tuple[Any, ...]]


# What each level keeps (written out here, the oracle's own): every label, one of them,
# none, or one and the model (counters only); a label it drops is NULL, replica and
# outcome "".
LEVEL_FIELDS = {
    0: GROUP,
    1: ("model",),
    2: (),
    3: ("via_api_key",),
    4: ("replica",),
    5: ("route",),
    6: ("outcome",),
    7: ("model", "via_api_key"),
    8: ("model", "replica"),
    9: ("model", "route"),
    10: ("model", "outcome"),
}
DROPPED = {"model": None, "route": None, "replica": "", "via_api_key": None, "outcome": ""}
MERGED_LEVELS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
COUNTERS_ONLY = (7, 8, 9, 10)  # no distributions


def level_group(level: int, row: dict[str, Any]) -> tuple[Any, ...]:
    """The group an archived row (or a rollup row's fields) counts in at ``level``."""
    kept = LEVEL_FIELDS[level]
    return tuple(row[f] if f in kept else DROPPED[f] for f in GROUP)


@pytest.fixture(autouse=True, params=["psycopg3", "psycopg2"])
def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "psycopg2":
        # No COPY, no arrays bound on the server: the statements SQLite takes too.
        monkeypatch.setattr(batch, "copies", lambda: False)
        monkeypatch.setattr(rollups, "binds_arrays", lambda connection: False)
    return str(request.param)


def stored_rollups() -> dict[Key, Rollup]:
    """The rollup rows once every delta is folded (as a usage answer reads them)."""
    fold("default")
    return {
        (r.span_s, r.bucket, r.level, tuple(getattr(r, f) for f in GROUP)): r
        for r in Rollup.objects.all()
    }


def group_rows() -> Any:
    """The level-0 rollup rows: one per group (the merged levels left out), once every
    delta is folded."""
    fold("default")
    return Rollup.objects.filter(level=0)


def expected_rollups() -> dict[Key, dict[str, Any]]:
    """A GROUP BY over the archived rows at each level: counters in SQL, distributions
    from the rows."""
    expected: dict[Key, dict[str, Any]] = {}
    every = (0, *MERGED_LEVELS)
    spans = ((60, TruncMinute, every), (3600, TruncHour, every), (DAY, TruncDay, MERGED_LEVELS))
    for span, trunc, levels in spans:
        for level in levels:
            fields = LEVEL_FIELDS[level]
            grouped = (
                FinishedRequest.objects.annotate(at=trunc("finished_at", tzinfo=UTC))
                .values("at", *fields)
                .annotate(
                    requests=Count("id"),
                    prompt=Sum("prompt_tokens"),
                    completion=Sum("completion_tokens"),
                    cached=Sum("cached_tokens"),
                    errors=Count("id", filter=Q(outcome="error")),
                    aborted=Count("id", filter=Q(outcome="aborted")),
                )
                .order_by()
            )
            for g in grouped:
                key = (span, g["at"], level, level_group(level, {**DROPPED, **g}))
                expected[key] = {
                    "requests": g["requests"],
                    "prompt_tokens": g["prompt"] or 0,
                    "completion_tokens": g["completion"] or 0,
                    "cached_tokens": g["cached"] or 0,
                    "errors": g["errors"],
                    "aborted": g["aborted"],
                    "aborts": Counter(),
                    "duration": Distribution(),
                    "ttft": Distribution(),
                    "tpot": Distribution(),
                }
        for row in FinishedRequest.objects.annotate(at=trunc("finished_at", tzinfo=UTC)).values():
            for level in levels:
                cell = expected[(span, row["at"], level, level_group(level, row))]
                if row["aborted"] is not None:
                    cell["aborts"][row["aborted"]] += 1
                if level in COUNTERS_ONLY:
                    continue
                for name, ms in (("duration", row["duration_ms"]), ("ttft", row["ttft_ms"])):
                    if ms is not None:
                        cell[name].add(ms / 1000.0)
                decode, completion = row["decode_ms"], row["completion_tokens"]
                if decode is not None and completion is not None and completion > 1:
                    cell["tpot"].add(decode / 1000.0 / (completion - 1))
    return expected


def assert_same_tally(got: Tally, want: Tally) -> None:
    """Equal counters and buckets; distributions' float sums up to their addition order."""
    assert got.wire() == want.wire()
    for name in ("duration", "ttft", "tpot"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a.zeros, a.counts) == (b.zeros, b.counts), name
        assert math.isclose(a.total, b.total, rel_tol=1e-9, abs_tol=1e-12), name


def assert_rollups_match_archive() -> None:
    expected = expected_rollups()
    stored = stored_rollups()
    assert set(stored) == set(expected)
    for key, row in stored.items():
        want = expected[key]
        tally = stored_tally(row)
        assert row.group_key == group_key(key[3], key[2])  # type: ignore[arg-type]
        assert row.out_of_range == 0
        for name in (
            "requests",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "errors",
            "aborted",
        ):
            assert getattr(row, name) == want[name], (key, name)
        assert tally.aborts == dict(want["aborts"])
        for name in ("duration", "ttft", "tpot"):
            got, exp = getattr(tally, name), want[name]
            # Counts exactly; the float sum up to the order of its additions.
            assert (got.zeros, got.counts) == (exp.zeros, exp.counts), (key, name)
            assert math.isclose(got.total, exp.total, rel_tol=1e-9, abs_tol=1e-12)
        # A merged hour or day row's percentiles are its distributions'.
        want_percentiles = [
            [want[name].count, *want[name].quantiles(PERCENTILES)] for name in TIMES
        ]
        compact = json.dumps(want_percentiles, separators=(",", ":"))
        # Minutes keep none (their answers parse), nor the levels of counters alone.
        unkept = row.level in (0, *COUNTERS_ONLY) or row.span_s == 60
        assert row.percentiles == ("" if unkept else compact), key


# Few values per label, nulls among them, so groups collide and NULL groups form.
labels = st.sampled_from
record_fields = st.fixed_dictionaries(
    {
        "request_id": st.sampled_from([None, *[f"r{i}" for i in range(8)]]),
        "at_ms": st.integers(0, 3 * 3600 * 1000).map(lambda ms: BASE_AT_MS + ms),
        "model": labels([None, "", "m1", "m2"]),
        "route": labels([None, "/v1/chat/completions", "/v1/completions"]),
        "replica": labels(["r1", "r2"]),
        "via_api_key": labels([None, "team-a", "team-b"]),
        "status": labels([None, 200, 200, 429, 500]),
        "aborted": labels([None, None, None, "client_disconnect", "timeout"]),
        "error": labels([None, None, "boom"]),
        "prompt_tokens": st.none() | st.integers(0, 100_000),
        "completion_tokens": st.none() | st.integers(0, 4096),
        "cached_tokens": st.none() | st.integers(0, 1000),
        "ttft_ms": st.none() | st.just(0.0) | st.floats(0.001, 60_000),
        "duration_ms": st.none() | st.just(0.0) | st.floats(0.001, 600_000),
        "decode_ms": st.none() | st.floats(0.0, 600_000),
    }
)
# A record the archive refuses (a dead letter): no replica, a negative time or count.
dead_fields = st.sampled_from([{"replica": None}, {"duration_ms": -1.0}, {"prompt_tokens": -5}])
item = st.builds(
    lambda fields, dead, seq: Pending(seq, make_record(**{**fields, **(dead or {})}), "inst"),
    record_fields,
    st.none() | st.none() | st.none() | dead_fields,
    st.none() | st.integers(0, 12),
)


def within_one_minute(item: Pending, minute: int) -> Pending:
    """``item`` moved into the ``minute``-th minute after ``BASE_AT_MS``'s, at the same
    second and millisecond."""
    start = (BASE_AT_MS // 60_000 + minute) * 60_000
    record = item.record._replace(at_ms=start + item.record.at_ms % 60_000)
    return item._replace(record=record)


@settings(
    max_examples=80,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=st.lists(st.lists(item, max_size=12), min_size=1, max_size=4), data=st.data())
def test_rollups_equal_a_group_by_over_the_archived_rows(
    batches: list[list[Pending]], data: st.DataObject
) -> None:
    FinishedRequest.objects.all().delete()
    Rollup.objects.all().delete()
    RollupDelta.objects.all().delete()
    DeadLetter.objects.all().delete()
    # Batches tallied and inserted in pieces (``archive/pace.py``) of any size.
    pieces = data.draw(st.integers(1, 13), label="records per piece")
    with (
        mock.patch.object(rollups, "PACED_RECORDS", pieces),
        mock.patch.object(batch, "PACED_ROWS", pieces),
    ):
        write_and_fold(batches, data)
    assert_rollups_match_archive()


def write_and_fold(batches: list[list[Pending]], data: st.DataObject) -> None:
    written: list[Pending] = []
    for items in batches:
        if data.draw(st.booleans(), label="the batch within one minute"):
            # What a writer flushing every second mostly holds: cells_of tallies the
            # minutes alone and shares them with their hours and days.
            minute = data.draw(st.integers(0, 2), label="its minute")
            items = [within_one_minute(p, minute) for p in items]
        # Replays of items written before (the retry after a lost acknowledgement).
        if written:
            items = items + data.draw(st.lists(st.sampled_from(written), max_size=3))
        write_batch(items)
        written.extend(items)
        if data.draw(st.booleans(), label="a fold after it"):
            # Folds at any moment, of any number of batches, a few deltas at a time.
            fold("default", limit=data.draw(st.integers(1, 40), label="deltas per fold"))


def test_a_batch_whose_commit_failed_counts_once_when_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = [Pending(i, make_record(), "inst") for i in range(5)]
    # Every record new: the batch writes the rollups it tallied before its transaction.
    real = batch.write_rollups

    def then_fail(chunks: Any, using: str) -> None:
        real(chunks, using)  # the rollups written, then the connection lost
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(batch, "write_rollups", then_fail)
    with pytest.raises(OperationalError):
        write_batch(items)
    assert not RollupDelta.objects.exists()
    assert not Rollup.objects.exists()
    monkeypatch.setattr(batch, "write_rollups", real)
    assert write_batch(items).inserted == 5
    # Committed, but the acknowledgement lost: the writer sends it again.
    assert write_batch(items).duplicates == 5
    assert group_rows().get(span_s=3600).requests == 5
    assert_rollups_match_archive()


def test_with_rollups_off_a_batch_writes_none(request: pytest.FixtureRequest) -> None:
    django_settings = request.getfixturevalue("settings")  # (hypothesis has the name here)
    django_settings.FERROX_STATS = {**django_settings.FERROX_STATS, "ROLLUPS": False}
    write_batch([Pending(1, make_record(at_ms=BASE_AT_MS), "inst")])
    assert FinishedRequest.objects.count() == 1
    assert not RollupDelta.objects.exists()
    assert not Rollup.objects.exists()


def test_dead_letters_and_duplicates_are_not_counted() -> None:
    good = make_record(at_ms=BASE_AT_MS)
    items = [
        Pending(1, good, "inst"),
        Pending(2, good, "inst"),  # the same request id again
        Pending(3, make_record(at_ms=BASE_AT_MS, duration_ms=-1.0), "inst"),
        Pending(4, make_record(at_ms=BASE_AT_MS, replica=None), "inst"),
    ]
    result = write_batch(items)
    assert result.outcomes == ["inserted", "duplicate", "dead", "dead"]
    assert [(r.span_s, r.requests) for r in group_rows().order_by("span_s")] == [
        (60, 1),
        (3600, 1),
    ]


def test_a_batch_is_tallied_before_its_transaction_takes_any_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The archive's insert takes the commit-order lock the fleet's writers wait for:
    # the rollups' Python work is done before the batch's transaction begins.
    depths: list[int] = []
    tally = rollups.minute_cells

    def counted(records: Any) -> Any:
        depths.append(len(connection.savepoint_ids))
        return tally(records)

    monkeypatch.setattr(rollups, "minute_cells", counted)
    outside = len(connection.savepoint_ids)
    items = [Pending(i, make_record(at_ms=BASE_AT_MS + i), "inst") for i in range(3)]
    assert write_batch(items).inserted == 3
    assert depths == [outside]
    assert_rollups_match_archive()


@pytest.mark.parametrize("at_ms", [None, 10**18])
def test_a_record_no_cell_can_count_is_a_dead_letter_and_the_rest_counted(
    at_ms: int | None,
) -> None:
    # Tallied before the transaction, such a record fails the tally: the batch then
    # counts, in its transaction, what it inserted.
    good = [make_record(at_ms=BASE_AT_MS + i) for i in range(2)]
    items = [Pending(i, r, "inst") for i, r in enumerate(good)]
    items.append(Pending(9, make_record(at_ms=BASE_AT_MS)._replace(at_ms=at_ms), "inst"))
    assert write_batch(items).outcomes == ["inserted", "inserted", "dead"]
    assert_rollups_match_archive()


def test_a_replayed_ingest_batch_counts_once() -> None:
    records = [make_record(at_ms=BASE_AT_MS + i) for i in range(3)]
    items = [Pending(None, r, "producer-1", ingested=True) for r in records]
    assert write_batch(items).inserted == 3
    assert write_batch(items).duplicates == 3
    assert group_rows().get(span_s=60).requests == 3


def test_null_labels_are_a_group_of_their_own() -> None:
    at = BASE_AT_MS
    write_batch(
        [
            Pending(1, make_record(at_ms=at, model=None, via_api_key=None), "i"),
            Pending(2, make_record(at_ms=at, model="", via_api_key=None), "i"),
            Pending(3, make_record(at_ms=at, model=None, via_api_key=None), "i"),
        ]
    )
    minutes = {r.model: r.requests for r in group_rows().filter(span_s=60)}
    assert minutes == {None: 2, "": 1}


def test_out_of_range_values_are_counted_apart_never_summed() -> None:
    record = make_record(at_ms=BASE_AT_MS, prompt_tokens=MAX_TOKENS + 1, duration_ms=2e12)
    write_batch([Pending(1, record, "i")])
    row = group_rows().get(span_s=60)
    assert (row.requests, row.prompt_tokens, row.out_of_range, row.duration) == (1, 0, 2, "")


def test_rebuilding_a_range_gives_the_rollups_maintenance_gave() -> None:
    at = BASE_AT_MS
    write_batch(
        [Pending(i, make_record(at_ms=at + i * 97_000, model=f"m{i % 3}"), "i") for i in range(90)]
    )
    write_batch([Pending(100, make_record(at_ms=at + 5000, aborted="timeout"), "i")])
    before = {
        k: (r.requests, r.prompt_tokens, r.aborts, r.duration, r.ttft)
        for k, r in stored_rollups().items()
    }
    since = datetime.fromtimestamp(at / 1000, UTC)
    result = rebuild(since, datetime.fromtimestamp((at + 3 * 3600_000) / 1000, UTC), "default")
    assert result.rows == 91
    after = stored_rollups()
    assert set(after) == set(before)
    assert_rollups_match_archive()
    # Idempotent.
    again = rebuild(since, datetime.fromtimestamp((at + 3 * 3600_000) / 1000, UTC), "default")
    assert again.rows == 91
    assert {k: r.requests for k, r in stored_rollups().items()} == {
        k: v[0] for k, v in before.items()
    }


def test_rebuilding_part_of_a_day_makes_the_days_rows_again_from_all_its_hours() -> None:
    # Hours 0-5 archived; hours 2-3 rebuilt: the day's rows (the merged levels') are
    # summed from every hour of the day again, nothing counted twice or lost.
    at = BASE_AT_MS
    write_batch(
        [Pending(i, make_record(at_ms=at + i * 360_000, model=f"m{i % 2}"), "i") for i in range(60)]
    )
    rebuild(
        datetime.fromtimestamp((at + 2 * 3600_000) / 1000, UTC),
        datetime.fromtimestamp((at + 4 * 3600_000) / 1000, UTC),
        "default",
    )
    assert_rollups_match_archive()
    assert {r.requests for r in Rollup.objects.filter(span_s=DAY, level=2)} == {60}


def test_a_rebuild_leaves_hours_before_the_oldest_archived_row() -> None:
    at = BASE_AT_MS + 5 * 3600_000
    write_batch([Pending(1, make_record(at_ms=at), "i")])
    old = make_record(at_ms=BASE_AT_MS)  # its row pruned: only its rollup is left
    upsert(cells_of([old]), "default")
    rebuild(
        datetime.fromtimestamp(BASE_AT_MS / 1000, UTC),
        datetime.fromtimestamp(at / 1000 + 3600, UTC),
        "default",
    )
    assert group_rows().filter(bucket__lt=datetime.fromtimestamp(at / 1000, UTC)).count() == 2
    assert group_rows().count() == 4


def test_the_known_abort_reasons_are_counted_in_columns_any_other_in_the_json() -> None:
    at = BASE_AT_MS
    reasons = ["timeout", "client_disconnect", "client_disconnect", "explicit", "preempted"]
    write_batch([Pending(n, make_record(at_ms=at, aborted=r), "i") for n, r in enumerate(reasons)])
    write_batch([Pending(9, make_record(at_ms=at + 1, aborted="preempted"), "i")])
    row = group_rows().get(span_s=60)
    columns = (row.aborts_client_disconnect, row.aborts_explicit, row.aborts_timeout)
    assert (columns, row.aborts) == ((2, 1, 1), '{"preempted":2}')
    assert stored_tally(row).aborts == {
        "client_disconnect": 2,
        "explicit": 1,
        "timeout": 1,
        "preempted": 2,
    }


def test_an_existing_cell_merges_distributions_under_its_row() -> None:
    at = BASE_AT_MS
    write_batch([Pending(1, make_record(at_ms=at, duration_ms=100.0), "i")])
    write_batch([Pending(2, make_record(at_ms=at + 1, duration_ms=8000.0), "i")])
    row = group_rows().get(span_s=60)
    tally = stored_tally(row)
    assert row.requests == 2
    assert tally.duration.count == 2
    assert tally.duration.quantile(100) == pytest.approx(8.0, rel=1 / 64)
    assert datetime_to_at_ms(row.bucket) == at - at % 60_000


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's arrays")
def test_the_arrays_bound_in_binary_leave_no_prepared_statement_and_fail_as_django() -> None:
    # The upsert binds its arrays on the server, on the batch's connection: prepared
    # only as the connection says (Django's default: never, as a pooler in transaction
    # mode needs), in the batch's transaction, a database error raised as Django's.
    at = BASE_AT_MS
    for n in range(8):  # past psycopg's prepare threshold
        write_batch([Pending(n, make_record(at_ms=at + n, duration_ms=100.0 + n), "i")])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)
    assert group_rows().get(span_s=60).requests == 8
    assert_rollups_match_archive()
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE ferrox_stats_rollupdelta ADD CONSTRAINT few CHECK (requests < 2)"
        )
    with pytest.raises(IntegrityError):
        write_batch([Pending(n, make_record(at_ms=at), "i") for n in (9, 10)])
    assert FinishedRequest.objects.count() == 8  # the batch's transaction rolled back


def test_a_batch_writes_its_minute_cells_as_deltas_and_a_fold_moves_them() -> None:
    at = BASE_AT_MS - BASE_AT_MS % 60_000
    items = [
        Pending(i, make_record(at_ms=at + i * 20_000, model=f"m{i % 2}"), "i") for i in range(6)
    ]
    write_batch(items)
    # Two minutes x two models, level 0 only: no rollup row is touched by the batch.
    assert RollupDelta.objects.count() == 4
    assert not Rollup.objects.exists()
    assert fold("default") == 4
    assert not RollupDelta.objects.exists()
    assert fold("default") == 0
    assert_rollups_match_archive()


def test_a_fold_that_fails_leaves_its_deltas_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    from ferrox_stats.archive import fold as folding

    write_batch([Pending(i, make_record(at_ms=BASE_AT_MS + i), "i") for i in range(3)])
    real = folding.upsert

    def lost(cells: Any, using: str) -> None:
        real(cells, using)  # the rollups written, then the connection lost
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(folding, "upsert", lost)
    with pytest.raises(OperationalError):
        fold("default")
    assert RollupDelta.objects.count() == 1 and not Rollup.objects.exists()
    monkeypatch.setattr(folding, "upsert", real)
    assert fold("default") == 1
    assert_rollups_match_archive()
    assert group_rows().get(span_s=60).requests == 3


def test_a_rebuild_drops_the_deltas_of_the_hours_it_sums_again() -> None:
    at = BASE_AT_MS - BASE_AT_MS % 3600_000
    write_batch([Pending(i, make_record(at_ms=at + i * 600_000), "i") for i in range(12)])
    assert RollupDelta.objects.exists()  # not folded: the rebuild's rows count them
    rebuild(
        datetime.fromtimestamp(at / 1000, UTC),
        datetime.fromtimestamp((at + 3600_000) / 1000, UTC),
        "default",
    )
    # The first hour's deltas went with its rollups; the second's are folded later.
    buckets = {datetime_to_at_ms(d.bucket) // 3600_000 for d in RollupDelta.objects.all()}
    assert buckets == {at // 3600_000 + 1}
    assert_rollups_match_archive()


def _in_thread(target: Any) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row locks")
@pytest.mark.django_db(transaction=True)
def test_a_concurrent_upsert_waits_for_the_row_and_merges_what_it_committed() -> None:
    at = BASE_AT_MS
    # The same cells from both; the second's records in the opposite order.
    first = [
        make_record(at_ms=at + i * 30_000, model=f"m{i % 2}", duration_ms=100.0) for i in range(6)
    ]
    second = [
        make_record(at_ms=at + i * 30_000, model=f"m{i % 2}", duration_ms=9000.0)
        for i in reversed(range(6))
    ]
    first_wrote, release_first = threading.Event(), threading.Event()
    second_pid: list[int] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with transaction.atomic():
                upsert(cells_of(first), "default")
                first_wrote.set()
                assert release_first.wait(30)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            first_wrote.set()

    def two() -> None:
        try:
            assert first_wrote.wait(30)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                second_pid.append(cursor.fetchone()[0])
            with transaction.atomic():
                upsert(cells_of(second), "default")  # waits on the first's row locks
        except BaseException as exc:
            errors.append(exc)

    threads = [_in_thread(one), _in_thread(two)]
    try:
        # The second is blocked on a row the first holds (a condition, not a time).
        assert first_wrote.wait(30)
        for _ in range(3000):
            if second_pid and _waiting_on_a_lock(second_pid[0]):
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the second transaction never waited on the first's rows")
    finally:
        release_first.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    expected = cells_of(first + second)
    stored = {
        (r.span_s, datetime_to_at_ms(r.bucket), r.level, tuple(getattr(r, f) for f in GROUP)): r
        for r in Rollup.objects.all()
    }
    assert set(stored) == set(expected)
    for key, tally in expected.items():
        row = stored[key]
        got = stored_tally(row)
        assert_same_tally(got, tally)
        assert (got.errors, got.aborted) == (tally.errors, tally.aborted)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers")
@pytest.mark.django_db(transaction=True)
def test_writers_on_their_own_connections_lose_no_update() -> None:
    at = BASE_AT_MS
    batches = [
        [
            Pending(
                w * 1000 + b * 10 + i,
                make_record(at_ms=at + (b * 10 + i) * 7000, model=f"m{i % 3}"),
                f"w{w}",
            )
            for i in range(10)
        ]
        for w in range(3)
        for b in range(8)
    ]
    errors: list[BaseException] = []

    def writer(mine: list[list[Pending]]) -> Any:
        def run() -> None:
            try:
                for items in mine:
                    write_batch(items)
            except BaseException as exc:
                errors.append(exc)

        return run

    done = threading.Event()
    folds: list[int | None] = []

    def folder() -> None:
        # Two folders as the writers write: each delta folded once, whoever takes it.
        try:
            while not done.is_set():
                folds.append(fold("default", wait=False, limit=7))
        except BaseException as exc:
            errors.append(exc)

    folders = [_in_thread(folder) for _ in range(2)]
    threads = [_in_thread(writer(batches[w::3])) for w in range(3)]
    for thread in threads:
        thread.join(120)
    done.set()
    for thread in folders:
        thread.join(120)
    assert not errors, errors
    assert any(folds), "no fold took any delta while the writers wrote"
    assert FinishedRequest.objects.count() == 240
    assert_rollups_match_archive()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the fold's advisory lock")
@pytest.mark.django_db(transaction=True)
def test_a_fold_that_need_not_wait_leaves_the_deltas_to_the_fold_holding_the_lock() -> None:
    from ferrox_stats.archive.fold import locked

    write_batch([Pending(1, make_record(at_ms=BASE_AT_MS), "i")])
    holding, release = threading.Event(), threading.Event()

    def other_fold() -> None:
        with transaction.atomic():
            locked("default")
            holding.set()
            assert release.wait(30)

    thread = _in_thread(other_fold)
    try:
        assert holding.wait(30)
        assert fold("default", wait=False) is None
        assert RollupDelta.objects.count() == 1
    finally:
        release.set()
        thread.join(60)
    assert fold("default", wait=False) == 1
    assert_rollups_match_archive()
