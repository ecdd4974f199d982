"""The archive partitioned by day on PostgreSQL (``archive/partitions.py``, migration 0013).

Most tests run in the test's transaction, so the partitions they make are rolled back
with it; the one that needs a second session to see its partitions commits them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from ferrox_stats.archive import partitions, retention
from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.queries import CommitCursor
from ferrox_stats.archive.retention import prune
from ferrox_stats.archive.rows import Pending, datetime_to_at_ms
from ferrox_stats.models import FinishedRequest
from tests.factories import archive, make_record

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the archive in one plain table"
)

DAY = date(2026, 3, 10)
MIDNIGHT = datetime(2026, 3, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)


def at(moment: datetime, **fields: Any) -> Any:
    return make_record(at_ms=datetime_to_at_ms(moment), **fields)


def homes() -> dict[str, str]:
    """Each archived row's request id -> the partition it is stored in."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT request_id, tableoid::regclass::text FROM {partitions.PARENT}")
        return dict(cursor.fetchall())


def days(*offsets: int) -> list[date]:
    return [DAY + timedelta(days=n) for n in offsets]


def no_legacy_partition() -> None:
    """Drop a ``_legacy`` partition another test left (one that migrates back past 0013
    and forward over rows makes it, MINVALUE to tomorrow): it would cover every day."""
    for partition in partitions.partitions():
        if partition.name.endswith("_legacy"):
            partitions.drop(partition)


@pytest.fixture(autouse=True)
def _forgotten() -> Iterator[None]:
    partitions.forget()
    yield
    partitions.forget()


# -- one meaning of "the same record" everywhere ----------------------------------------


@pytest.mark.django_db
def test_a_replay_is_a_duplicate_and_the_same_id_at_another_moment_is_another_record() -> None:
    first = at(MIDNIGHT, request_id="r-1")
    assert archive([first]).outcomes == ["inserted"]
    # The same record again (a replay, a retry): same id, same moment.
    replay = Pending(None, first, "other-instance")
    assert write_batch([replay]).outcomes == ["duplicate"]
    # The same id finishing at another moment is a record of its own, on every database.
    later = Pending(None, first._replace(at_ms=first.at_ms + 1), "other-instance")
    assert write_batch([later, later]).outcomes == ["inserted", "duplicate"]
    assert FinishedRequest.objects.filter(request_id="r-1").count() == 2


@pytest.mark.django_db
def test_an_instance_seq_resent_is_a_duplicate_only_at_the_same_moment() -> None:
    record = at(MIDNIGHT, request_id=None)
    assert write_batch([Pending(7, record, "p-1")]).outcomes == ["inserted"]
    assert write_batch([Pending(7, record, "p-1")]).outcomes == ["duplicate"]
    moved = record._replace(at_ms=record.at_ms + 5)
    assert write_batch([Pending(7, moved, "p-1")]).outcomes == ["inserted"]


def test_sqlite_keeps_one_plain_table() -> None:
    if connection.vendor == "postgresql":
        pytest.skip("SQLite's")
    assert partitions.is_partitioned() is False
    assert partitions.partitions() == []


# -- making partitions -------------------------------------------------------------------


@postgresql_only
@pytest.mark.django_db
def test_the_migration_leaves_a_partitioned_archive_with_a_default_partition() -> None:
    assert partitions.is_partitioned()
    found = {p.name: p for p in partitions.partitions()}
    assert found[partitions.DEFAULT].default


@postgresql_only
@pytest.mark.django_db
def test_make_days_makes_each_day_once_and_rows_go_to_their_day() -> None:
    no_legacy_partition()
    made = partitions.make_days(days(0, 1))
    assert made.created == [partitions.day_name(d) for d in days(0, 1)]
    assert partitions.make_days(days(1, 0)).created == []  # made already
    archive([at(MIDNIGHT, request_id="a"), at(MIDNIGHT - timedelta(milliseconds=1),
             request_id="b"), at(MIDNIGHT + timedelta(days=1), request_id="c"),
             at(MIDNIGHT + timedelta(days=2), request_id="d")])  # fmt: skip
    assert homes() == {
        "a": "ferrox_stats_finishedrequest_p20260310",
        "b": partitions.DEFAULT,  # the day before has no partition
        "c": "ferrox_stats_finishedrequest_p20260311",
        "d": partitions.DEFAULT,
    }
    ranges = {p.name: (p.lower, p.upper) for p in partitions.partitions()}
    assert ranges["ferrox_stats_finishedrequest_p20260310"] == (MIDNIGHT, MIDNIGHT + 24 * HOUR)


@postgresql_only
@pytest.mark.django_db
def test_a_day_the_default_partition_holds_rows_of_is_left_to_it() -> None:
    no_legacy_partition()
    archive([at(MIDNIGHT + HOUR, request_id="early")])
    made = partitions.make_days(days(0, 1))
    assert made.created == [partitions.day_name(DAY + timedelta(days=1))]
    assert made.skipped == {
        partitions.day_name(DAY): "the default partition holds rows of that day"
    }
    # Nothing is lost: the row stays where it was, and the day's later rows join it.
    archive([at(MIDNIGHT + 2 * HOUR, request_id="later")])
    assert homes() == {"early": partitions.DEFAULT, "later": partitions.DEFAULT}


@postgresql_only
@pytest.mark.django_db
def test_keep_ahead_makes_yesterday_to_two_days_ahead_once_a_day() -> None:
    no_legacy_partition()
    now = MIDNIGHT + 13 * HOUR
    partitions.keep_ahead(now=now)
    names = {p.name for p in partitions.partitions()}
    assert {partitions.day_name(d) for d in days(-1, 0, 1, 2)} <= names
    assert partitions.day_name(DAY + timedelta(days=3)) not in names
    with CaptureQueriesContext(connection) as queries:
        partitions.keep_ahead(now=now + 10 * HOUR)  # the same UTC day: nothing to do
    assert queries.captured_queries == []
    partitions.keep_ahead(now=now + 11 * HOUR)  # the next day
    assert partitions.day_name(DAY + timedelta(days=3)) in {p.name for p in partitions.partitions()}


@postgresql_only
@pytest.mark.django_db
def test_keep_ahead_never_fails_a_batch_and_tries_again_later(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    no_legacy_partition()
    attempts: list[int] = []

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        raise OperationalError("connection refused (injected)")

    monkeypatch.setattr(partitions, "make_days", unreachable)
    clock = [1000.0]
    monkeypatch.setattr(partitions.time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.archive"):
        assert archive([at(MIDNIGHT, request_id="kept")]).outcomes == ["inserted"]
    assert "could not make the archive's partitions" in caplog.text
    assert homes() == {"kept": partitions.DEFAULT}
    archive([at(MIDNIGHT)])
    assert len(attempts) == 1  # not again on every batch
    clock[0] += partitions.RETRY_S
    archive([at(MIDNIGHT)])
    assert len(attempts) == 2


# -- reading across partitions ----------------------------------------------------------


@postgresql_only
@pytest.mark.django_db
def test_history_pages_and_the_commit_cursor_cross_partitions_unchanged() -> None:
    no_legacy_partition()
    partitions.make_days(days(0, 1, 2))
    moments = [MIDNIGHT + n * 5 * HOUR for n in range(-2, 14)]  # the day before: DEFAULT
    batches = [moments[1::3], moments[::3], moments[2::3]]  # committed out of time order
    written: list[str] = []
    for batch in batches:
        records = [at(m, request_id=f"r{moments.index(m):02d}") for m in batch]
        archive(records)
        written += [r.request_id for r in records]
    assert len(set(homes().values())) == 4

    expected = [f"r{n:02d}" for n in reversed(range(len(moments)))]
    seen, cursor = [], None
    while True:
        page = FinishedRequest.objects.newest_first(cursor, 3)
        seen += [entry["request_id"] for entry in page.entries]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == expected

    followed, after = [], None
    for _ in range(10):
        page = FinishedRequest.objects.committed_after(after, 4)
        followed += [entry["request_id"] for entry in page.entries]
        if page.next_cursor == after:
            break
        after = page.next_cursor
    assert followed == written
    assert isinstance(after, CommitCursor)


# -- retention by dropping partitions ---------------------------------------------------


def _analyse() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {partitions.PARENT}")


@postgresql_only
@pytest.mark.django_db
def test_prune_drops_the_days_before_the_cutoff_and_keeps_the_day_it_falls_in() -> None:
    no_legacy_partition()
    partitions.make_days(days(-3, -2, -1, 0, 1))
    cutoff = MIDNIGHT + 12 * HOUR
    archive([at(MIDNIGHT - timedelta(days=d) + HOUR, request_id=f"gone-{d}") for d in (1, 2, 3)])
    archive([at(MIDNIGHT + HOUR, request_id="same-day-early"),
             at(cutoff + HOUR, request_id="same-day-late"),
             at(MIDNIGHT - timedelta(days=400), request_id="default-old"),
             at(MIDNIGHT + timedelta(days=30), request_id="default-new")])  # fmt: skip
    _analyse()
    dry = prune(cutoff, batch_size=10, dry_run=True)
    result = prune(cutoff, batch_size=10)
    dropped = tuple(partitions.day_name(d) for d in days(-3, -2, -1))
    assert (result.partitions, result.partition_rows, result.partitions_busy) == (dropped, 3, ())
    # Outside day partitions rows go one by one, as before; the cutoff's day stays whole.
    assert result.finished_requests == 1
    assert dry == replace(result, dry_run=True)
    assert sorted(homes()) == ["default-new", "same-day-early", "same-day-late"]
    assert {p.name for p in partitions.partitions()}.isdisjoint(dropped)


@postgresql_only
@pytest.mark.django_db
def test_the_prune_command_says_which_partitions_it_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_legacy_partition()
    partitions.make_days(days(-2, -1))
    archive([at(MIDNIGHT - 20 * HOUR), at(MIDNIGHT - 30 * HOUR)])
    _analyse()
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: MIDNIGHT + timedelta(days=1))
    out = StringIO()
    call_command("ferrox_stats_prune", "--older-than", "1d", stdout=out)
    assert out.getvalue().splitlines()[1] == (
        "Dropped 2 partitions wholly older than the cutoff, about 2 finished requests: "
        "ferrox_stats_finishedrequest_p20260308, ferrox_stats_finishedrequest_p20260309."
    )


@pytest.fixture
def other_session() -> Iterator[psycopg.Connection[Any]]:
    s = connection.settings_dict
    params = {"dbname": s["NAME"], "user": s["USER"], "password": s["PASSWORD"],
              "host": s["HOST"], "port": s["PORT"]}  # fmt: skip
    with psycopg.connect(**{k: v for k, v in params.items() if v}) as conn:
        yield conn


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_partition_a_reader_holds_is_kept_whole_for_the_next_prune(
    other_session: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    no_legacy_partition()
    # Made before the timeout is shortened: attaching waits for the DEFAULT partition's
    # lock (autovacuum there yields only after deadlock_timeout, 1 s).
    busy = partitions.day_name(DAY - timedelta(days=1))
    assert partitions.make_days(days(-1)).created == [busy]
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT_MS", 50)
    monkeypatch.setattr(retention, "_sleep", lambda s: None)
    try:
        archive([at(MIDNIGHT - HOUR, request_id="held")])
        # A long read (an export, say) holds the partition while the prune runs.
        other_session.execute(f"SELECT count(*) FROM {busy}")
        result = prune(MIDNIGHT, batch_size=10)
        assert (result.partitions, result.partitions_busy) == ((), (busy,))
        # Its rows are not deleted one by one instead: they wait for the next prune.
        assert result.finished_requests == 0
        assert list(homes()) == ["held"]
        other_session.rollback()
        assert prune(MIDNIGHT, batch_size=10).partitions == (busy,)
    finally:
        other_session.rollback()
        for p in partitions.partitions():
            if p.daily:
                partitions.drop(p)


# -- the command -------------------------------------------------------------------------


@postgresql_only
@pytest.mark.django_db
def test_the_partitions_command_makes_days_ahead_and_lists_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_legacy_partition()
    from django.utils import timezone

    monkeypatch.setattr(timezone, "now", lambda: MIDNIGHT + HOUR)
    out = StringIO()
    call_command("ferrox_stats_partitions", "--days", "3", stdout=out)
    assert out.getvalue().splitlines() == [
        f"Created {partitions.day_name(d)}." for d in days(-1, 0, 1, 2, 3)
    ]
    out = StringIO()
    call_command("ferrox_stats_partitions", "--days", "1", stdout=out)
    assert out.getvalue() == "Every day from 2026-03-09 to 2026-03-11 has its partition already.\n"
    out = StringIO()
    call_command("ferrox_stats_partitions", "--list", stdout=out)
    assert (
        "ferrox_stats_finishedrequest_p20260310  2026-03-10T00:00:00+00:00 .. "
        "2026-03-11T00:00:00+00:00  rows unknown (not analysed yet)"
    ) in out.getvalue().splitlines()
    assert out.getvalue().splitlines()[-1].startswith(f"{partitions.DEFAULT}  DEFAULT")


@pytest.mark.django_db
def test_the_partitions_command_refuses_bad_input_and_an_unpartitioned_archive() -> None:
    with pytest.raises(CommandError, match="--days must be between 0 and 366, got -1"):
        call_command("ferrox_stats_partitions", "--days", "-1")
    if connection.vendor != "postgresql":
        with pytest.raises(CommandError, match="The archive is not partitioned"):
            call_command("ferrox_stats_partitions")


@postgresql_only
@pytest.mark.django_db
def test_a_partition_detached_by_an_interrupted_prune_is_dropped_by_the_next() -> None:
    no_legacy_partition()
    partitions.make_days(days(-1))
    archive([at(MIDNIGHT - HOUR, request_id="out")])
    [day] = [p for p in partitions.partitions() if p.name.endswith("20260309")]
    partitions.detach(day)  # ... and the prune stopped before it dropped the table
    assert homes() == {}  # out of the archive already
    assert partitions.detached() == [day.name]
    result = prune(MIDNIGHT - timedelta(days=30), batch_size=10)
    assert result.partitions == (day.name,)
    assert partitions.detached() == []


@postgresql_only
def test_drop_detached_drops_only_the_archives_own_tables() -> None:
    with pytest.raises(ValueError, match="auth_user is not one of the archive's partitions"):
        partitions.drop_detached("auth_user")
