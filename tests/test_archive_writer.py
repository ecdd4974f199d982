"""The write-behind archiver (``ferrox_stats.archive.writer``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError

from ferrox_stats import live
from ferrox_stats.archive import writer as writer_module
from ferrox_stats.archive.writer import ArchiveHealth, ArchiveWriter
from ferrox_stats.models import DeadLetter, FinishedRequest
from tests.conftest import FakeClock
from tests.factories import make_record


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
