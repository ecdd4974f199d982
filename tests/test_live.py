"""The process recorder and the in-process tracker (``ferrox_stats.live``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ferrox_stats import live
from ferrox_stats.conf import DEFAULTS
from ferrox_stats.core.requests import Record
from ferrox_stats.state import process_state
from tests.conftest import FakeClock


def only_record(recorder: live.Recorder) -> Record:
    rows = recorder.stats.ring.rows()
    assert len(rows) == 1
    return rows[0]


def test_a_streamed_request_is_timed_from_arrival_on_the_injected_clock(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track(route="/v1/chat/completions", model="m", stream=True) as t:
        assert recorder.serving.active == 1
        clock.advance(0.010)
        t.started()
        t.tokens(prompt=40)
        clock.advance(0.090)
        t.tokens(completion=1)
        for _ in range(10):
            clock.advance(0.020)
            t.tokens(completion=1)
        clock.advance(0.005)
        seq = t.finish(status=200, finish_reason="stop", request_id="chatcmpl-1")
    record = only_record(recorder)
    assert seq == 0
    assert record.request_id == "chatcmpl-1"
    assert record.queue_ms == pytest.approx(10)
    assert record.ttft_ms == pytest.approx(100)
    assert record.decode_ms == pytest.approx(200)
    assert record.duration_ms == pytest.approx(305)
    assert record.prompt_tokens == 40
    assert record.completion_tokens == 11
    assert record.at_ms == clock.wall
    assert record.replica == "test-replica"
    assert (record.status, record.finish_reason, record.aborted, record.error) == (
        200,
        "stop",
        None,
        None,
    )
    snapshot = recorder.snapshot()
    assert snapshot.serving.active == 0
    assert snapshot.serving.completed == 1
    assert snapshot.serving.aborts == {}
    assert (snapshot.serving.prompt_tokens_total, snapshot.serving.completion_tokens_total) == (
        40,
        11,
    )


def test_totals_known_only_at_the_end_are_counted_once(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track() as t:
        t.tokens(completion=5)
        clock.advance(1)
        t.finish(status=200, prompt_tokens=30, completion_tokens=20)
    serving = recorder.serving.snapshot(clock.now)
    assert (serving.prompt_tokens_total, serving.completion_tokens_total) == (30, 20)
    record = only_record(recorder)
    assert (record.prompt_tokens, record.completion_tokens) == (30, 20)
    # The decode loop ran until the end, where the rest of the tokens were reported.
    assert record.decode_ms == pytest.approx(1000)


def test_a_request_with_no_token_information_reports_none_not_zero(
    recorder: live.Recorder,
) -> None:
    with recorder.track(route="/v1/models") as t:
        t.finish(status=200)
    record = only_record(recorder)
    assert (record.prompt_tokens, record.completion_tokens, record.ttft_ms) == (None, None, None)
    assert (record.decode_ms, record.queue_ms) == (None, None)


def test_an_exception_ends_the_request_as_an_error_without_its_message(
    recorder: live.Recorder,
) -> None:
    with pytest.raises(RuntimeError), recorder.track(model="m") as t:
        t.tokens(completion=3)
        raise RuntimeError("CANARY prompt text that must never be stored")
    record = only_record(recorder)
    assert record.error == "RuntimeError"
    assert record.status == 500
    assert "CANARY" not in repr(record)
    serving = recorder.serving.snapshot(0)
    assert (serving.active, serving.completed, serving.aborts) == (0, 1, {"error": 1})


def test_a_status_set_before_the_exception_is_kept(recorder: live.Recorder) -> None:
    with pytest.raises(TimeoutError), recorder.track() as t:
        t.status = 504
        raise TimeoutError
    assert only_record(recorder).status == 504


def test_a_client_that_goes_away_mid_stream_is_an_abort_with_partial_tokens(
    recorder: live.Recorder,
) -> None:
    def stream() -> Iterator[str]:
        with recorder.track(stream=True) as t:
            for chunk in ("a", "b", "c", "d"):
                t.tokens(completion=1)
                yield chunk
            t.finish(status=200, finish_reason="stop")

    chunks = stream()
    assert [next(chunks), next(chunks)] == ["a", "b"]
    chunks.close()  # what the server does when the client disconnects
    record = only_record(recorder)
    assert (record.aborted, record.error, record.completion_tokens) == (
        "client_disconnect",
        None,
        2,
    )
    serving = recorder.serving.snapshot(0)
    assert (serving.active, serving.completed) == (0, 0)
    assert serving.aborts == {"client_disconnect": 1}
    assert serving.completion_tokens_total == 2


def test_cancelling_an_async_request_is_a_client_disconnect(recorder: live.Recorder) -> None:
    entered = asyncio.Event()

    async def handler() -> None:
        async with recorder.track(stream=True) as t:
            t.tokens(completion=1)
            entered.set()
            await asyncio.Event().wait()  # never set: the task is cancelled here

    async def main() -> None:
        task = asyncio.create_task(handler())
        await entered.wait()
        assert recorder.serving.active == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert only_record(recorder).aborted == "client_disconnect"
    assert recorder.serving.active == 0


def test_async_requests_finish_like_sync_ones(recorder: live.Recorder) -> None:
    async def handler() -> None:
        async with recorder.track(model="m") as t:
            t.finish(status=200, completion_tokens=4)

    asyncio.run(handler())
    assert only_record(recorder).completion_tokens == 4
    assert recorder.serving.snapshot(0).completed == 1


def test_client_disconnected_raised_by_a_feeder_is_an_abort(recorder: live.Recorder) -> None:
    with pytest.raises(live.ClientDisconnected), recorder.track():
        raise live.ClientDisconnected
    assert only_record(recorder).aborted == "client_disconnect"


@pytest.mark.parametrize(("args", "reason"), [((), "explicit"), (("timeout",), "timeout")])
def test_an_explicit_abort_takes_a_reason(
    recorder: live.Recorder, args: tuple[str, ...], reason: str
) -> None:
    with recorder.track() as t:
        t.abort(*args)
        assert recorder.serving.active == 1  # still in flight until it ends
    assert only_record(recorder).aborted == reason
    assert recorder.serving.snapshot(0).aborts == {reason: 1}


def test_an_aborted_requests_terminal_error_is_not_counted_again(
    recorder: live.Recorder,
) -> None:
    with pytest.raises(ValueError), recorder.track() as t:
        t.abort("timeout")
        raise ValueError
    record = only_record(recorder)
    assert (record.aborted, record.error) == ("timeout", "ValueError")
    serving = recorder.serving.snapshot(0)
    assert (serving.completed, serving.aborts, serving.active) == (0, {"timeout": 1}, 0)


def test_leaving_without_finish_records_what_is_known(recorder: live.Recorder) -> None:
    with recorder.track(route="/v1/completions"):
        pass
    record = only_record(recorder)
    assert (record.route, record.status, record.error) == ("/v1/completions", None, None)
    assert recorder.serving.snapshot(0).completed == 1


def test_a_tracker_ends_once(recorder: live.Recorder) -> None:
    with recorder.track() as t:
        assert t.finish(status=200) == 0
        assert t.finish(status=500) is None
    assert recorder.stats.recorded_total == 1
    with pytest.raises(RuntimeError):
        t.begin()


def test_finish_before_begin_is_refused_and_leaks_nothing(recorder: live.Recorder) -> None:
    t = recorder.track()
    with pytest.raises(RuntimeError):
        t.finish(status=200)
    assert recorder.serving.active == 0
    assert recorder.stats.recorded_total == 0


class ListSink:
    def __init__(self) -> None:
        self.received: list[tuple[int, Record]] = []

    def submit(self, seq: int, record: Record) -> None:
        self.received.append((seq, record))


class BrokenSink:
    def submit(self, seq: int, record: Record) -> None:
        raise OSError("archive unavailable")


def test_finished_records_are_handed_to_the_sink_with_their_seq(clock: FakeClock) -> None:
    sink = ListSink()
    recorder = live.Recorder(clock=clock, sink=sink)
    for _ in range(3):
        with recorder.track() as t:
            t.finish(status=200)
    assert [seq for seq, _ in sink.received] == [0, 1, 2]
    assert [r for _, r in sink.received] == recorder.stats.ring.rows()


def test_a_broken_sink_never_fails_the_request(clock: FakeClock) -> None:
    recorder = live.Recorder(clock=clock, sink=BrokenSink())
    with recorder.track() as t:
        t.finish(status=200)
    assert recorder.sink_errors == 1
    assert recorder.serving.active == 0
    assert recorder.stats.recorded_total == 1


class RowSink(ListSink):
    takes_rows = True


def test_a_tracked_request_leaves_no_record_the_collector_keeps_tracking(
    clock: FakeClock,
) -> None:
    # A Record (a tuple subclass) is never untracked: each one the ring or a queue holds
    # through two young collections counts toward a full collection of the whole heap.
    # The recorder keeps a tracker's record as an exact tuple of atomic values instead,
    # which the collector untracks; what reads it back gets a Record.
    recorder = live.Recorder(clock=clock, sink=RowSink())
    with recorder.track(route="/v1/chat/completions", model="m", via_api_key="k") as t:
        clock.advance(0.25)
        t.finish(status=200, prompt_tokens=3, completion_tokens=2)
    (report,) = recorder._pending
    row = report[-1]
    assert type(row) is tuple and len(row) == len(Record._fields)
    gc.collect()
    assert not gc.is_tracked(row)
    assert not gc.is_tracked(report)
    record = only_record(recorder)
    assert type(record) is Record
    assert tuple(record) == row
    assert (record.model, record.via_api_key, record.duration_ms) == ("m", "k", 250.0)
    assert recorder.sink.received == [(0, row)]


def test_a_sink_that_does_not_take_rows_gets_each_record_as_a_record(clock: FakeClock) -> None:
    sink = ListSink()
    recorder = live.Recorder(clock=clock, sink=sink)
    with recorder.track(model="m") as t:
        t.finish(status=200)
    recorder.finished(Record(model="given"))
    assert [type(r) for _, r in sink.received] == [Record, Record]
    assert [r.model for _, r in sink.received] == ["m", "given"]


def test_finished_and_ingested_records_feed_the_breakdown(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track(route="/v1/completions", model="m") as t:
        clock.advance(0.5)
        t.finish(status=200, prompt_tokens=4)
    recorder.ingested(Record(route="/v1/completions", model="m", error="E", duration_ms=250.0))
    cells = recorder.breakdown.cells()
    assert {key: cell.requests for key, cell in cells.items()} == {
        ("m", "/v1/completions", "ok"): 1,
        ("m", "/v1/completions", "error"): 1,
    }
    assert cells["m", "/v1/completions", "ok"].duration.total == 0.5
    assert cells["m", "/v1/completions", "error"].duration.count_at_most(0.25) == 1


def test_once_the_state_is_read_requests_leave_the_fold_to_its_readers(clock: FakeClock) -> None:
    # The heartbeat reads the state every HEARTBEAT_S: the requests in between only queue.
    # (The reports wait in the recorder's queue; the breakdown gets them when it is read.)
    recorder = live.Recorder(clock=clock)
    breakdown = recorder.breakdown
    process_state(recorder)
    for _ in range(breakdown.fold_every * 3):
        recorder.finished(Record(model="m", duration_ms=1.0))
    assert (breakdown.request_folds, recorder.request_folds) == (0, 0)
    assert len(recorder._pending) == breakdown.fold_every * 3
    process_state(recorder)
    assert len(recorder._pending) == len(breakdown._queue) == 0
    [cell] = breakdown.cells().values()
    assert cell.requests == cell.duration.count == breakdown.fold_every * 3


def test_a_record_the_breakdown_refuses_is_counted_there(clock: FakeClock) -> None:
    recorder = live.Recorder(clock=clock)
    for _ in range(2):
        recorder.finished(Record(duration_ms=-1.0))
    assert recorder.breakdown.cells() == {}
    assert (recorder.breakdown.refused, recorder.stats.recorded_total) == (2, 2)


def test_a_breakdown_that_raises_is_logged_once_and_never_fails_the_request(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = live.Recorder(clock=clock)

    def broken(records: object) -> None:
        raise RuntimeError("a bug of ours")

    # What the recorder hands the breakdown its records with (when it folds them).
    monkeypatch.setattr(recorder.breakdown, "observe_many", broken)
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.live"):
        for _ in range(2):
            with recorder.track() as t:
                t.finish(status=200)
        recorder.ingested(Record())
    assert (recorder.breakdown_errors, recorder.stats.recorded_total) == (3, 3)
    assert recorder.serving.active == 0
    [logged] = caplog.records
    assert "breakdown" in logged.getMessage()


def test_gauges_read_none_until_reported_and_after_their_max_age(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    assert (recorder.snapshot().pool_occupancy, recorder.snapshot().queue_depth) == (None, None)
    recorder.observe_gauges(pool_used=0, pool_total=0)  # a pool of 0 is no report
    assert recorder.snapshot().pool_occupancy is None
    recorder.observe_gauges(pool_used=1024, pool_total=4096, queue_depth=0)
    assert recorder.snapshot().pool_occupancy == 0.25
    assert recorder.snapshot().queue_depth == 0  # zero is a measurement
    recorder.observe_gauges(queue_depth=3)  # a report without the pool keeps the pool
    assert recorder.snapshot().pool_occupancy == 0.25
    clock.advance(61)
    assert recorder.snapshot().pool_occupancy is None


@pytest.mark.parametrize(
    "report",
    [
        {"queue_depth": 1e30},
        {"queue_depth": float("nan")},
        {"queue_depth": -1},
        {"queue_depth": True},
        {"pool_used": 1e300, "pool_total": 1e300},
        {"pool_used": float("inf"), "pool_total": float("inf")},
        {"pool_used": 5, "pool_total": 4},
        {"pool_used": 5, "pool_total": 0},
        {"pool_used": "5", "pool_total": 8},
    ],
)
def test_an_impossible_gauge_report_is_ignored_whole_and_counted_never_raised(
    recorder: live.Recorder, caplog: pytest.LogCaptureFixture, report: dict[str, object]
) -> None:
    recorder.observe_gauges(pool_used=1, pool_total=4, queue_depth=2)
    for _ in range(3):
        recorder.observe_gauges(**report)  # type: ignore[arg-type]
    snapshot = recorder.snapshot()
    assert (snapshot.pool_occupancy, snapshot.queue_depth) == (0.25, 2)
    assert recorder.gauges_refused == 3
    # One warning per recorder, not one per report: a host may report on every request.
    warnings = [r for r in caplog.records if r.name == "ferrox_stats.live"]
    assert [r.levelname for r in warnings] == ["WARNING"]
    assert "Ignored a gauge report" in warnings[0].getMessage()


def test_gauges_up_to_their_maxima_are_measurements(recorder: live.Recorder) -> None:
    recorder.observe_gauges(pool_used=2**53, pool_total=2**53, queue_depth=1e9)
    snapshot = recorder.snapshot()
    assert (snapshot.pool_occupancy, snapshot.queue_depth, recorder.gauges_refused) == (1, 1e9, 0)


def test_the_recorder_is_built_from_settings(settings: object, clock: FakeClock) -> None:
    settings.FERROX_STATS = {  # type: ignore[attr-defined]
        "RING_CAPACITY": 8,
        "MAX_PAGE": 4,
        "RATE_WINDOW_S": 2.0,
        "REPLICA": "gpu-7",
        "LABEL_MAX_MODELS": 3,
        # No heartbeat thread: the recorder the last reset() builds outlives the test,
        # and its heartbeat would publish this process's state into later tests'
        # METRICS_DIR every 2 s (two of tests/test_host_state.py's failed in CI so).
        "HEARTBEAT_S": None,
    }
    recorder = live.reset(clock)
    try:
        assert recorder.stats.ring.capacity == 8
        assert recorder.breakdown.max_models == 3
        assert recorder.stats.max_page == 4
        assert recorder.serving.decode.window_s == 2.0
        assert recorder.replica == "gpu-7"
        assert recorder.instance.startswith("gpu-7/")
        assert live.get_recorder() is recorder
    finally:
        live.reset()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_gets_its_own_recorder(recorder: live.Recorder) -> None:
    assert live.get_recorder() is recorder
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, leave without the parent's cleanup
        try:
            child = live.get_recorder()
            own = child is not recorder and child.instance != recorder.instance
            os.write(write, b"1" if own and live.get_recorder() is child else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"1"
    assert live.get_recorder() is recorder  # the parent keeps its own


def test_uptime_comes_from_the_injected_clock(recorder: live.Recorder, clock: FakeClock) -> None:
    clock.advance(42)
    assert recorder.snapshot().uptime_s == 42


def test_eight_threads_of_tracked_requests_keep_every_counter_exact() -> None:
    threads, per_thread = 8, 100_000
    recorder = live.Recorder(capacity=1024)
    start = threading.Barrier(threads)

    def serve(worker: int) -> None:
        start.wait()
        for i in range(per_thread):
            t = recorder.track(model=f"m{worker}")
            t.begin()
            t.tokens(prompt=2, completion=1)
            if i % 10 == 0:
                t.abort("explicit")
            t.finish(status=200, error="EngineError" if i % 10 == 1 else None)

    workers = [threading.Thread(target=serve, args=(w,)) for w in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    total = threads * per_thread
    snapshot = recorder.serving.snapshot(recorder.clock.monotonic())
    assert snapshot.active == 0
    assert snapshot.aborts == {"explicit": total // 10, "error": total // 10}
    assert snapshot.completed == total - total // 10
    assert snapshot.prompt_tokens_total == 2 * total
    assert snapshot.completion_tokens_total == total
    assert recorder.stats.recorded_total == total
    cells = recorder.breakdown.cells()
    assert sum(cell.requests for cell in cells.values()) == total
    assert sum(cell.input_tokens for cell in cells.values()) == 2 * total
    assert {model for model, _, _ in cells} == {f"m{w}" for w in range(threads)}


# -- telemetry never raises into the host's code ------------------------------------------


def track_one(model: str) -> None:
    """What a host's inference view does."""
    with live.track(route="/v1/chat/completions", model=model) as t:
        t.tokens(completion=1)
        t.finish(status=200)


@pytest.mark.parametrize(
    ("value", "check_id"),
    [
        ({"ARCHIVE_SINK": "nope.module.fn"}, "ferrox_stats.E007"),
        ({"GAUGE_MAX_AGE_S": -1}, "ferrox_stats.E005"),
        ({"RING_CAPACITY": 0, "MAX_PAGE": 1}, "ferrox_stats.E002"),
    ],
)
def test_invalid_settings_never_fail_the_hosts_request(
    settings: Any, caplog: pytest.LogCaptureFixture, value: dict[str, Any], check_id: str
) -> None:
    settings.FERROX_STATS = {"REPLICA": "test-replica", **value}
    live.shutdown(flush=False)
    try:
        with caplog.at_level(logging.ERROR, logger="ferrox_stats.live"):
            track_one("m")
            track_one("m")
        # Recorded in memory, with the defaults, and said once, with the check's words.
        recorder = live.get_recorder()
        assert recorder.stats.recorded_total == 2
        assert recorder.sink is None
        assert recorder.stats.ring.capacity == DEFAULTS["RING_CAPACITY"]
        [logged] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert check_id in logged.getMessage()
    finally:
        live.reset()


def refusing_sink(*, instance: str) -> live.RecordSink:
    raise RuntimeError("the archive's alias is gone")


def test_a_sink_that_cannot_be_built_leaves_recording_in_memory(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.FERROX_STATS = {
        "REPLICA": "test-replica",
        "RING_CAPACITY": 8,
        "MAX_PAGE": 4,
        "ARCHIVE_SINK": f"{__name__}.refusing_sink",
        "HEARTBEAT_S": None,  # (see test_the_recorder_is_built_from_settings)
    }
    live.shutdown(flush=False)
    try:
        with caplog.at_level(logging.ERROR, logger="ferrox_stats.live"):
            track_one("m")
        recorder = live.get_recorder()
        assert (recorder.sink, recorder.stats.recorded_total) == (None, 1)
        assert recorder.stats.ring.capacity == 8  # the rest of the settings hold
        assert "could not be built" in caplog.text
        assert "the archive's alias is gone" in caplog.text
    finally:
        live.reset()


def test_a_sink_that_raises_is_logged_once_and_counted(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = live.Recorder(clock=clock, sink=BrokenSink())
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.live"):
        for _ in range(3):
            with recorder.track() as t:
                t.finish(status=200)
    assert (recorder.sink_errors, recorder.stats.recorded_total) == (3, 3)
    [logged] = caplog.records
    assert logged.exc_info is not None and isinstance(logged.exc_info[1], OSError)
