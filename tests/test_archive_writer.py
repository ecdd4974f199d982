"""The write-behind archiver (``ferrox_stats.archive.writer``)."""

from __future__ import annotations

import itertools
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection

from ferrox_stats import live
from ferrox_stats.archive import writer as writer_module
from ferrox_stats.archive.writer import ArchiveHealth, ArchiveWriter
from ferrox_stats.models import DeadLetter, FinishedRequest, Rollup, RollupDelta
from tests.conftest import FakeClock
from tests.factories import BASE_AT_MS, make_record


def assert_identity(health: ArchiveHealth) -> None:
    """Nothing lost silently: every accepted record is accounted for exactly once."""
    assert health.accepted == (
        health.persisted + health.pending + sum(health.dropped.values()) + health.dead_lettered
    )


def ticking() -> Iterator[float]:
    # A monotonic clock that moves one second per reading: deadlines pass without waiting.
    return itertools.count(0.0, 1.0)


@pytest.fixture
def writer() -> Iterator[ArchiveWriter]:
    w = ArchiveWriter(instance="inst", batch_size=4, queue_max=10, autostart=False)
    yield w


@pytest.mark.django_db
def test_submitted_records_are_persisted_in_batches(writer: ArchiveWriter) -> None:
    records = [make_record() for _ in range(10)]
    for seq, record in enumerate(records):
        assert writer.submit(seq, record)
    assert writer.health().pending == 10
    assert writer.flush_once() == 4  # one batch at a time
    assert writer.drain(deadline_s=60)
    health = writer.health()
    assert (health.persisted, health.pending, health.dropped) == (10, 0, {})
    assert_identity(health)
    assert list(FinishedRequest.objects.order_by("seq").values_list("seq", flat=True)) == list(
        range(10)
    )


@pytest.mark.django_db
def test_a_trackers_record_queued_as_a_row_is_archived_as_its_record(
    writer: ArchiveWriter,
) -> None:
    # The recorder hands the writer (which takes rows) a tracker's record as an exact
    # tuple of Record's fields (live.RecordSink): the row the archive keeps is the same.
    record = make_record(model="m", via_api_key="k")
    assert writer.takes_rows
    assert writer.submit(7, tuple(record))  # type: ignore[arg-type]
    assert writer.flush_once() == 1
    stored = FinishedRequest.objects.get()
    assert (stored.seq, stored.model, stored.via_api_key) == (7, "m", "k")
    assert stored.request_id == record.request_id


def test_a_full_queue_drops_the_new_record_and_counts_it(writer: ArchiveWriter) -> None:
    accepted = [writer.submit(seq, make_record()) for seq in range(13)]
    assert accepted == [True] * 10 + [False] * 3
    health = writer.health()
    assert (health.pending, health.dropped) == (10, {"queue_full": 3})
    assert_identity(health)


@pytest.mark.django_db
def test_a_batch_that_cannot_commit_stays_at_the_head_and_is_retried(
    writer: ArchiveWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [make_record() for _ in range(6)]
    for seq, record in enumerate(records):
        writer.submit(seq, record)
    real_write = writer_module.write_batch

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(writer_module, "write_batch", unreachable)
    with pytest.raises(OperationalError):
        writer.flush_once()
    health = writer.health()
    assert (health.pending, health.persisted, health.failed_attempts) == (6, 0, 1)
    assert health.last_error == "OperationalError"
    assert_identity(health)

    monkeypatch.setattr(writer_module, "write_batch", real_write)
    assert writer.drain(deadline_s=60)
    assert list(FinishedRequest.objects.order_by("seq").values_list("request_id", flat=True)) == [
        r.request_id for r in records
    ]
    assert writer.health().last_error is None


@pytest.mark.django_db
def test_a_row_that_can_never_be_written_is_dead_lettered(writer: ArchiveWriter) -> None:
    writer.submit(0, make_record())
    writer.submit(1, make_record(status=999))
    writer.submit(2, make_record())
    assert writer.drain(deadline_s=60)
    health = writer.health()
    assert (health.persisted, health.dead_lettered) == (2, 1)
    assert_identity(health)
    assert DeadLetter.objects.get().payload["seq"] == 1


@pytest.mark.django_db
def test_replayed_records_count_as_persisted_duplicates(writer: ArchiveWriter) -> None:
    record = make_record()
    writer.submit(0, record)
    writer.submit(1, record)
    assert writer.drain(deadline_s=60)
    health = writer.health()
    assert (health.persisted, health.duplicates) == (2, 1)
    assert FinishedRequest.objects.count() == 1


@pytest.mark.django_db
def test_close_drains_the_queue(writer: ArchiveWriter) -> None:
    for seq in range(7):
        writer.submit(seq, make_record())
    assert writer.close(deadline_s=60)
    assert FinishedRequest.objects.count() == 7
    # After close, new records are refused and counted, not queued forever.
    assert not writer.submit(7, make_record())
    health = writer.health()
    assert health.dropped == {"closed": 1}
    assert_identity(health)


def test_what_is_left_at_the_shutdown_deadline_is_counted_as_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ticking()
    writer = ArchiveWriter(batch_size=4, autostart=False, monotonic=lambda: next(clock))

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(writer_module, "write_batch", unreachable)
    monkeypatch.setattr(writer_module.time, "sleep", lambda s: None)
    for seq in range(5):
        writer.submit(seq, make_record())
    assert not writer.close(deadline_s=5)
    health = writer.health()
    assert (health.pending, health.dropped) == (0, {"shutdown_deadline": 5})
    assert_identity(health)


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_the_writer_folds_its_rollup_deltas_after_a_batch_at_most_every_fold_s() -> None:
    clock = FakeClock()
    writer = ArchiveWriter(batch_size=4, fold_s=5.0, autostart=False, monotonic=clock.monotonic)
    assert writer.fold_if_due() is None  # nothing written: no fold
    writer.submit(0, make_record(at_ms=BASE_AT_MS))
    writer.flush_once()  # its first batch: folded at once
    assert not RollupDelta.objects.exists()
    writer.submit(1, make_record(at_ms=BASE_AT_MS + 1))
    clock.advance(4.9)
    writer.flush_once()
    assert RollupDelta.objects.count() == 1  # not due
    assert writer.fold_if_due() is None
    clock.advance(0.1)
    assert writer.fold_if_due() == 1
    assert writer.fold_if_due(now=True) is None  # nothing of its own left
    assert Rollup.objects.get(span_s=60, level=0).requests == 2


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_a_writer_that_stops_folds_what_it_wrote_first() -> None:
    clock = FakeClock()
    writer = ArchiveWriter(batch_size=4, fold_s=5.0, autostart=False, monotonic=clock.monotonic)
    writer.submit(0, make_record(at_ms=BASE_AT_MS))
    writer.flush_once()  # folded
    writer.submit(1, make_record(at_ms=BASE_AT_MS + 1))  # its fold not due when written
    assert writer.close(deadline_s=30)
    assert not RollupDelta.objects.exists()
    assert Rollup.objects.get(span_s=60, level=0).requests == 2


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_a_fold_that_fails_is_logged_and_the_batches_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreachable(using: str, wait: bool = True) -> int | None:
        raise OperationalError("could not connect to server")

    real = writer_module.fold
    monkeypatch.setattr(writer_module, "fold", unreachable)
    clock = FakeClock()
    writer = ArchiveWriter(batch_size=4, fold_s=5.0, autostart=False, monotonic=clock.monotonic)
    writer.submit(0, make_record(at_ms=BASE_AT_MS))
    assert writer.flush_once() == 1  # the batch committed; its fold failed
    assert "rollup fold failed" in caplog.text
    writer.submit(1, make_record(at_ms=BASE_AT_MS + 1))
    assert writer.flush_once() == 1  # the batches go on
    assert writer.health().persisted == 2
    monkeypatch.setattr(writer_module, "fold", real)
    assert writer.fold_if_due() is None  # retried after fold_s, not at once
    clock.advance(5.0)
    assert writer.fold_if_due() == 2  # nothing was lost meanwhile
    assert Rollup.objects.get(span_s=60, level=0).requests == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("rollups_on")
def test_the_background_thread_folds_before_it_reports_the_queue_drained() -> None:
    # A host's test that waits for the queue to drain, then tears its database down,
    # must never race a fold: the thread folds in a batch's turn, not on its own time.
    writer = ArchiveWriter(instance="inst", batch_size=5, interval_s=0.05, fold_s=3600)
    try:
        for seq in range(3):
            writer.submit(seq, make_record(at_ms=BASE_AT_MS + seq))
        assert writer.wait_until_drained(timeout_s=30)
        assert not RollupDelta.objects.exists()  # its first batch: folded
        assert Rollup.objects.get(span_s=60, level=0).requests == 3
        for seq in range(3, 5):
            writer.submit(seq, make_record(at_ms=BASE_AT_MS + seq))
        assert writer.wait_until_drained(timeout_s=30)
        assert RollupDelta.objects.count() == 1  # within fold_s: left for later
    finally:
        writer.close(deadline_s=30)
    assert not RollupDelta.objects.exists()  # folded as it stopped
    assert Rollup.objects.get(span_s=60, level=0).requests == 5


@pytest.mark.django_db(transaction=True)
def test_the_background_thread_writes_a_full_batch_without_being_asked() -> None:
    writer = ArchiveWriter(instance="inst", batch_size=5, interval_s=3600)
    try:
        for seq in range(5):
            writer.submit(seq, make_record())
        assert writer.wait_until_drained(timeout_s=30)
        assert FinishedRequest.objects.count() == 5
    finally:
        writer.close(deadline_s=30)


@pytest.mark.django_db(transaction=True)
def test_the_background_thread_wakes_for_each_batch_that_fills_again() -> None:
    # It is woken as the queue reaches a batch (not on every submit beyond that): the
    # queue fills past a batch, empties, and fills to a batch again.
    writer = ArchiveWriter(instance="inst", batch_size=5, interval_s=3600)
    try:
        for seq in range(12):
            writer.submit(seq, make_record())
        assert writer.wait_until_drained(timeout_s=30)
        for seq in range(12, 17):
            writer.submit(seq, make_record())
        assert writer.wait_until_drained(timeout_s=30)
        assert FinishedRequest.objects.count() == 17
    finally:
        writer.close(deadline_s=30)


@pytest.mark.django_db(transaction=True)
def test_the_recorder_hands_every_tracked_request_to_the_archive(
    clock: FakeClock, settings: Any
) -> None:
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "ARCHIVE_SINK": "ferrox_stats.archive.writer.from_settings",
        "ARCHIVE_BATCH_SIZE": 3,
        "ARCHIVE_FLUSH_INTERVAL_S": 3600,
    }
    recorder = live.reset(clock)
    sink = recorder.sink
    assert isinstance(sink, ArchiveWriter)
    try:
        for n in range(3):
            with recorder.track(model="m", request_id=f"req-{n}") as t:
                t.finish(status=200, completion_tokens=n)
        assert sink.wait_until_drained(timeout_s=30)
        rows = list(FinishedRequest.objects.order_by("seq").entries())
        assert [row["request_id"] for row in rows] == ["req-0", "req-1", "req-2"]
        assert {row["replica"] for row in rows} == {"test-replica"}
        assert set(FinishedRequest.objects.values_list("instance", flat=True)) == {
            recorder.instance
        }
        assert recorder.snapshot().archive.persisted == 3
    finally:
        sink.close(deadline_s=30)
        live.reset()


# -- the thread's connection, reset, shutdown, signals --------------------------------------

ARCHIVING = {
    "REPLICA": "test-replica",
    "ARCHIVE_SINK": "ferrox_stats.archive.writer.from_settings",
    "ARCHIVE_FLUSH_INTERVAL_S": 3600,
}


def other_sessions_writing_the_archive() -> int:
    """Sessions on this test database, other than the test's own, whose last statement
    touched the archive's table (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND query ILIKE %s",
            ["%ferrox_stats_finishedrequest%"],
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts PostgreSQL sessions")
@pytest.mark.django_db(transaction=True)
def test_an_idle_writer_gives_its_connection_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # Persistent connections, as hosts configure them: the thread is on its own.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    writer = ArchiveWriter(instance="idle", batch_size=1, interval_s=0.05)
    try:
        writer.submit(0, make_record())
        assert writer.wait_until_drained(timeout_s=30)
        # Nothing more to write: within a few intervals the thread holds no connection
        # (it used to keep it until the process exited).
        with writer._lock:
            closed = writer._written.wait_for(
                lambda: other_sessions_writing_the_archive() == 0, timeout=30
            )
        assert closed
        assert writer.running
    finally:
        writer.close(deadline_s=30)
    assert FinishedRequest.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("flush", [True, False])
def test_reset_stops_the_old_writer_writing_or_dropping_its_queue(
    settings: Any, flush: bool
) -> None:
    settings.FERROX_STATS = {**ARCHIVING, "ARCHIVE_BATCH_SIZE": 1000}
    old = live.reset()
    sink = old.sink
    assert isinstance(sink, ArchiveWriter)
    try:
        for n in range(3):
            with old.track(model="m", request_id=f"queued-{n}") as t:
                t.finish(status=200)
        assert sink.running and sink.health().pending == 3
        new = live.reset(flush=flush)
        assert new is not old
        assert not sink.running  # the thread was joined, not leaked
        health = sink.health()
        assert health.pending == 0
        assert_identity(health)
        if flush:
            assert (health.persisted, health.dropped) == (3, {})
            assert FinishedRequest.objects.count() == 3
        else:
            assert (health.persisted, health.dropped) == (0, {"closed": 3})
            assert FinishedRequest.objects.count() == 0
    finally:
        live.shutdown(flush=False)


@pytest.mark.django_db(transaction=True)
def test_shutdown_stops_the_recorder_and_the_next_track_builds_a_new_one(settings: Any) -> None:
    settings.FERROX_STATS = ARCHIVING
    first = live.reset()
    try:
        with live.track(model="m") as t:
            t.finish(status=200)
        sink = first.sink
        assert isinstance(sink, ArchiveWriter) and sink.running
        live.shutdown(flush=True)
        assert not sink.running
        assert FinishedRequest.objects.count() == 1
        assert live.get_recorder() is not first
    finally:
        live.shutdown(flush=False)


@pytest.mark.django_db(transaction=True)
def test_tracking_from_the_main_thread_leaves_the_signal_handlers_alone(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert threading.current_thread() is threading.main_thread()
    settings.FERROX_STATS = ARCHIVING
    # As in a fresh process (``manage.py shell``, a host's command): SIGTERM untouched.
    monkeypatch.setattr(writer_module, "_sigterm_installed", False, raising=False)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    interrupt = signal.getsignal(signal.SIGINT)
    try:
        recorder = live.reset()
        with live.track(model="m") as t:
            t.finish(status=200)
        assert isinstance(recorder.sink, ArchiveWriter) and recorder.sink.running
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is interrupt
    finally:
        live.shutdown(flush=False)
        signal.signal(signal.SIGTERM, previous)
