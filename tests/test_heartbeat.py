"""The heartbeat publisher (``ferrox_stats.heartbeat``): ticks driven by hand, and the
thread ``live`` starts with an archiving recorder."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.db.models import QuerySet
from django.test.utils import CaptureQueriesContext

from ferrox_stats import heartbeat as heartbeat_module
from ferrox_stats import host_state, live
from ferrox_stats.archive.rows import at_ms_to_datetime
from ferrox_stats.core.distribution import Distribution
from ferrox_stats.core.requests import Record
from ferrox_stats.heartbeat import PRUNE_BATCH, PRUNE_EVERY_S, Heartbeat
from ferrox_stats.models import Instance
from ferrox_stats.state import STATE_VERSION
from tests.asgi_server import wait_for
from tests.conftest import FakeClock
from tests.states import archive_counts, save, state_doc

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL")


class Documents:
    """Stands in for ``state.process_state``: the recorder's identity at its clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.pending = 0
        self.dropped: dict[str, int] = {}
        self.calls: list[str] = []

    def __call__(self, recorder: live.Recorder, *, stopped: bool = False) -> dict[str, Any]:
        self.calls.append(threading.current_thread().name)
        return state_doc(
            recorder.instance,
            at_ms=self.clock.wall_ms(),
            started_ms=1_767_225_000_000,
            stopped=stopped,
            completed=7,
            archive=archive_counts(accepted=7, pending=self.pending, dropped=self.dropped),
        )


@pytest.fixture
def documents(clock: FakeClock) -> Documents:
    return Documents(clock)


@pytest.fixture
def publisher(documents: Documents) -> Heartbeat:
    recorder = live.Recorder(replica="gpu-1", clock=documents.clock, instance="gpu-1/100/abc")
    return Heartbeat(recorder, interval_s=2.0, document=documents)


# -- one tick ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_tick_writes_the_instance_row_and_the_next_one_updates_it(
    publisher: Heartbeat, clock: FakeClock
) -> None:
    assert publisher.publish_once()
    row = Instance.objects.get()
    assert (row.instance, row.replica, row.host, row.pid) == (
        "gpu-1/100/abc",
        "gpu-1",
        "host-gpu-1",
        100,
    )
    assert row.last_seen == at_ms_to_datetime(clock.wall)
    assert row.started_at == at_ms_to_datetime(1_767_225_000_000)
    assert (row.heartbeat_s, row.stopped) == (2.0, False)
    assert row.document()["serving"]["completed"] == 7

    clock.advance(2.0)
    assert publisher.publish_once()
    row = Instance.objects.get()  # still one row
    assert row.last_seen == at_ms_to_datetime(clock.wall)
    assert (publisher.beats, publisher.failures) == (2, 0)


@pytest.mark.django_db
def test_a_tick_is_one_statement(publisher: Heartbeat, clock: FakeClock) -> None:
    publisher.publish_once()  # the first tick also looks for old rows
    clock.advance(2.0)
    with CaptureQueriesContext(connection) as queries:
        publisher.publish_once()
    [query] = queries.captured_queries
    assert query["sql"].startswith("INSERT") and "ON CONFLICT" in query["sql"]


@pytest.mark.django_db
def test_stop_without_a_thread_writes_the_clean_shutdown_mark(
    publisher: Heartbeat, documents: Documents
) -> None:
    publisher.publish_once()
    documents.dropped = {"shutdown_deadline": 4}
    assert publisher.stop()
    row = Instance.objects.get()
    assert row.stopped is True
    # The final heartbeat carries the archive's final counts, drops included.
    assert row.document()["archive"]["dropped"] == {"shutdown_deadline": 4}


# -- failures ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_database_failure_is_counted_logged_once_and_the_next_tick_succeeds(
    publisher: Heartbeat,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = True
    real = QuerySet.bulk_create

    def bulk_create(self: QuerySet[Any], *args: Any, **kwargs: Any) -> Any:
        if down:
            raise OperationalError("connection refused")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(QuerySet, "bulk_create", bulk_create)
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.heartbeat"):
        assert not publisher.publish_once()
        clock.advance(2.0)
        assert not publisher.publish_once()
        assert (publisher.beats, publisher.failures) == (0, 2)
        assert publisher.last_error is not None and "OperationalError" in publisher.last_error
        assert not Instance.objects.exists()
        down = False
        clock.advance(2.0)
        assert publisher.publish_once()
    assert (publisher.beats, publisher.failures, publisher.last_error) == (1, 2, None)
    assert Instance.objects.get().last_seen == at_ms_to_datetime(clock.wall)
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "was not written" in w]) == 1  # once per outage
    assert any("written again" in w for w in warnings)


@pytest.mark.django_db
def test_a_document_that_cannot_be_built_is_a_failed_tick(publisher: Heartbeat) -> None:
    def broken(recorder: live.Recorder, *, stopped: bool = False) -> dict[str, Any]:
        raise RuntimeError("bug")

    publisher._document = broken
    assert not publisher.publish_once()
    assert publisher.failures == 1 and not Instance.objects.exists()


@pytest.mark.django_db
def test_the_host_file_failing_never_stops_the_database_heartbeat(
    publisher: Heartbeat, monkeypatch: pytest.MonkeyPatch
) -> None:
    published: list[dict[str, Any]] = []

    def publish(doc: dict[str, Any]) -> None:
        published.append(doc)
        raise OSError("disk full")

    monkeypatch.setattr(heartbeat_module, "_host_publish", lambda: publish)
    assert publisher.publish_once()
    assert publisher.publish_once()
    assert len(published) == 2 and publisher.host_failures == 2
    assert Instance.objects.count() == 1


@pytest.mark.django_db
def test_a_tick_publishes_one_document_to_the_host_file_and_the_row(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = live.Recorder(replica="gpu-1", clock=clock, instance="gpu-1/100/abc")
    for ms in (10.0, 20.0, 4000.0):
        recorder.ingested(Record(model="m", route="/x", duration_ms=ms, ttft_ms=ms / 4))
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(heartbeat_module, "_host_publish", lambda: published.append)

    assert Heartbeat(recorder, interval_s=2.0).publish_once()

    [doc] = published
    assert (doc["version"], doc["resolution"]) == (STATE_VERSION, "octave")
    [cell] = recorder.breakdown.cells().values()
    assert [c["duration"] for c in doc["breakdown"]] == [cell.duration.octaves()]
    # The row: the same document without its per-label cells, the latency at full resolution.
    state = Instance.objects.get().document()
    assert "breakdown" not in state and state["at_ms"] == doc["at_ms"]
    assert state["latency"] == doc["latency"]
    assert Distribution.from_dense(state["latency"]["duration_s"]) == cell.duration


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_through_a_real_outage_ticks_fail_then_resume(
    publisher: Heartbeat, clock: FakeClock
) -> None:
    from tests.faults import PASS, REFUSE, fault_proxy, route_through

    db = connection.settings_dict
    target = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    results: list[bool] = []

    def tick_on_a_thread() -> None:
        # As the publisher's thread does: its own connection, closed after the tick.
        def run() -> None:
            try:
                results.append(publisher.publish_once())
            finally:
                publisher._close_connection()

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)

    with fault_proxy(target) as proxy, route_through(proxy):
        tick_on_a_thread()
        proxy.mode = REFUSE
        clock.advance(2.0)
        tick_on_a_thread()
        proxy.mode = PASS
        clock.advance(2.0)
        tick_on_a_thread()
    assert results == [True, False, True]
    assert publisher.failures == 1
    assert Instance.objects.get().last_seen == at_ms_to_datetime(clock.wall)


# -- pruning ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_rows_unseen_for_instance_keep_s_are_pruned_in_bounded_batches(
    documents: Documents, clock: FakeClock
) -> None:
    keep_s = 3600.0
    old = clock.wall - int(keep_s * 1000) - 1
    for n in range(PRUNE_BATCH + 5):
        save(state_doc(f"gone/{n}/x", at_ms=old - n, stopped=n % 2 == 0))
    save(state_doc("recent-stop/1/x", at_ms=clock.wall - 60_000, stopped=True))
    save(state_doc("recent-lost/1/x", at_ms=clock.wall - int(keep_s * 1000) + 1))
    recorder = live.Recorder(replica="gpu-1", clock=clock, instance="gpu-1/100/abc")
    publisher = Heartbeat(recorder, interval_s=2.0, keep_s=keep_s, document=documents)

    publisher.publish_once()
    assert publisher.pruned == PRUNE_BATCH  # one batch per tick at most
    publisher.publish_once()  # a full batch: the next tick looks again
    assert publisher.pruned == PRUNE_BATCH + 5
    assert sorted(Instance.objects.values_list("instance", flat=True)) == [
        "gpu-1/100/abc",
        "recent-lost/1/x",
        "recent-stop/1/x",
    ]
    # Then only once a minute.
    save(state_doc("gone-later/1/x", at_ms=old))
    clock.advance(PRUNE_EVERY_S / 2)
    publisher.publish_once()
    assert Instance.objects.filter(instance="gone-later/1/x").exists()
    clock.advance(PRUNE_EVERY_S / 2)
    publisher.publish_once()
    assert not Instance.objects.filter(instance="gone-later/1/x").exists()


# -- the thread, started with the recorder ---------------------------------------------

ARCHIVING = {
    "REPLICA": "test-replica",
    "ARCHIVE_SINK": "ferrox_stats.archive.writer.from_settings",
    "ARCHIVE_FLUSH_INTERVAL_S": 3600,  # records stay queued until the test says
    "HEARTBEAT_S": 3600.0,  # one heartbeat at start; the rest are driven by the test
    "INSTANCE_LOST_S": 4 * 3600.0,
    "INSTANCE_KEEP_S": 4 * 3600.0,
}


@pytest.fixture
def archiving(settings: Any, documents: Documents) -> Iterator[Documents]:
    settings.FERROX_STATS = ARCHIVING
    try:
        yield documents
    finally:
        live.shutdown(flush=False)


@pytest.mark.parametrize(
    "overrides",
    [{"HEARTBEAT_S": None}, {"ARCHIVE_SINK": None, "HEARTBEAT_S": None}, {"RING_CAPACITY": 0}],
    ids=["disabled", "no-archive-disabled", "settings-refused"],
)
def test_no_heartbeat_with_heartbeat_s_none_or_settings_refused(
    settings: Any, overrides: dict[str, Any]
) -> None:
    settings.FERROX_STATS = {**ARCHIVING, **overrides}
    try:
        live.reset()
        assert live.current_heartbeat() is None
        assert not [t for t in threading.enumerate() if t.name == "ferrox-stats-heartbeat"]
    finally:
        live.shutdown(flush=False)


def test_without_an_archive_the_heartbeat_writes_the_host_file_and_no_row(
    settings: Any, tmp_path: Path, clock: FakeClock
) -> None:
    # ARCHIVE_SINK = None: no database, but /metrics still needs this worker's file, and
    # its breakdown is folded here, not on its request path.
    where = tmp_path / "metrics"
    settings.FERROX_STATS = {
        **ARCHIVING,
        "ARCHIVE_SINK": None,
        "METRICS_DIR": str(where),
    }
    host_state.reset()
    try:
        recorder = live.reset(clock)
        publisher = live.current_heartbeat()
        assert publisher is not None and publisher.running and publisher.using is None
        recorder.ingested(Record(model="m", route="/x", duration_ms=1500.0))
        # No django_db mark: pytest-django fails any query this tick would make.
        assert publisher.publish_once() and publisher.beats == 0
        [name] = [p.name for p in where.iterdir() if not p.name.startswith(".")]
        written = json.loads((where / name).read_text())
        assert written["instance"] == recorder.instance and written["stopped"] is False
        assert written["breakdown"]["requests"] == [1]  # by column (octave.columns)
        assert not recorder.breakdown._queue  # folded by the heartbeat, not by a request
        live.shutdown(flush=False)
        assert not publisher.running
        assert json.loads((where / name).read_text())["stopped"] is True
    finally:
        live.shutdown(flush=False)
        host_state.reset()


@pytest.mark.django_db(transaction=True)
def test_the_recorder_starts_its_heartbeat_and_shutdown_writes_the_mark(
    archiving: Documents, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    monkeypatch.setattr(Heartbeat, "document", _stand_in(archiving))
    recorder = live.reset(clock)
    publisher = live.current_heartbeat()
    assert publisher is not None and publisher.running
    publisher.nudge()  # the first tick, without waiting out HEARTBEAT_S
    assert wait_for(lambda: publisher.beats == 1, 30)
    row = Instance.objects.get()
    assert row.instance == recorder.instance and row.stopped is False
    assert row.heartbeat_s == 3600.0
    live.shutdown(flush=True)
    assert not publisher.running
    assert Instance.objects.get().stopped is True
    # Every tick ran on the heartbeat's thread, none on this one.
    assert set(archiving.calls) == {"ferrox-stats-heartbeat"}


def _stand_in(documents: Documents) -> Any:
    def document(self: Heartbeat, *, stopped: bool = False) -> dict[str, Any]:
        return documents(self.recorder, stopped=stopped)

    return document


@pytest.mark.django_db(transaction=True)
def test_a_tracked_request_never_touches_the_database_on_its_thread(
    archiving: Documents, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    monkeypatch.setattr(Heartbeat, "document", _stand_in(archiving))
    with CaptureQueriesContext(connection) as queries:
        live.reset(clock)  # as the first track() does on a request thread
        publisher = live.current_heartbeat()
        assert publisher is not None
        with live.track(model="m") as t:
            t.finish(status=200)
        publisher.nudge()  # the first tick, without waiting out HEARTBEAT_S
        assert wait_for(lambda: publisher.beats == 1, 30)
    assert queries.captured_queries == []
    assert archiving.calls == ["ferrox-stats-heartbeat"]


@pytest.mark.django_db(transaction=True)
def test_a_shutdown_that_drops_records_leaves_its_counts_in_the_final_heartbeat(
    archiving: Documents, clock: FakeClock
) -> None:
    recorder = live.reset(clock)  # the real state document, this time
    publisher = live.current_heartbeat()
    assert publisher is not None
    publisher.nudge()  # the first tick, without waiting out HEARTBEAT_S
    assert wait_for(lambda: publisher.beats == 1, 30)
    for n in range(3):
        with live.track(model="m", request_id=f"queued-{n}") as t:
            t.finish(status=200, prompt_tokens=10, completion_tokens=5)
    live.shutdown(flush=False)  # what is queued is dropped, as at a failed drain
    row = Instance.objects.get()
    assert row.instance == recorder.instance and row.stopped is True
    state = row.document()
    assert state["stopped"] is True
    assert state["serving"]["completed"] == 3
    assert state["archive"]["accepted"] == 3
    assert (state["archive"]["pending"], state["archive"]["dropped"]) == (0, {"closed": 3})
    # The row keeps the latency distributions, not the per-label breakdown.
    assert "breakdown" not in state
    duration = state["latency"]["duration_s"]
    assert duration["zeros"] + sum(duration["counts"]) == 3


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_forked_child_heartbeats_as_its_own_instance(
    archiving: Documents, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    import os

    monkeypatch.setattr(Heartbeat, "document", _stand_in(archiving))
    parent = live.reset(clock)
    parent_beat = live.current_heartbeat()
    assert parent_beat is not None
    parent_beat.nudge()
    assert wait_for(lambda: parent_beat.beats == 1, 30)
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads did not come along
        code = 1
        try:
            child = live.get_recorder()
            beat = live.current_heartbeat()
            if child is not parent and beat is not None and beat is not parent_beat:
                beat.nudge()
                if wait_for(lambda: beat.beats == 1, 30):
                    live.shutdown(flush=False)
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    rows = dict(Instance.objects.values_list("pid", "stopped"))
    assert rows == {os.getpid(): False, pid: True}
    assert parent_beat.running  # the parent's heartbeat is untouched


@pytest.mark.django_db(transaction=True)
def test_a_recorder_gone_within_its_first_interval_writes_nothing(
    archiving: Documents, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    # A host's test builds a recorder and drops it in well under HEARTBEAT_S: no
    # background write may meet the test's open transaction.
    monkeypatch.setattr(Heartbeat, "document", _stand_in(archiving))
    live.reset(clock)
    publisher = live.current_heartbeat()
    assert publisher is not None and publisher.running
    live.shutdown(flush=False)
    assert not publisher.running
    assert archiving.calls == [] and not Instance.objects.exists()


@pytest.mark.django_db
def test_a_recorder_gone_within_its_first_interval_after_recording_leaves_its_host_counts(
    publisher: Heartbeat, settings: Any, tmp_path: Path
) -> None:
    # A worker recycled before its first tick (gunicorn --max-requests under load): no
    # row, as for any instance that never announced itself, but its host's /metrics
    # keeps what it served.
    settings.FERROX_STATS = {**settings.FERROX_STATS, "METRICS_DIR": str(tmp_path)}
    host_state.reset()
    try:
        with publisher.recorder.track(model="m") as t:
            t.finish(status=200)
        assert publisher.stop()
        assert not Instance.objects.exists()
        assert host_state.host_totals().state["serving"]["completed"] == 7  # its document's
    finally:
        host_state.reset()
