"""The recorder's request path takes no lock: requests queue their reports and every
read folds them first (``live.Recorder.fold``). Whatever the interleaving of requests
and reads, or of requests on several threads, the counters, rates, ring and breakdown
are those of each report applied as it came."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferrox_stats import live
from ferrox_stats.core.requests import Record
from ferrox_stats.core.serving import ServingStats
from tests.conftest import FakeClock

TRACKERS = 3

# One step: (what, which tracker, a number). Reads are the subject's only folds.
step = st.one_of(
    st.tuples(st.just("begin"), st.integers(0, TRACKERS - 1), st.just(0)),
    st.tuples(st.just("tokens"), st.integers(0, TRACKERS - 1), st.integers(0, 3)),
    st.tuples(st.just("prompt"), st.integers(0, TRACKERS - 1), st.integers(0, 50)),
    st.tuples(st.just("first"), st.integers(0, TRACKERS - 1), st.just(0)),
    st.tuples(st.just("abort"), st.integers(0, TRACKERS - 1), st.integers(0, 1)),
    st.tuples(st.just("finish"), st.integers(0, TRACKERS - 1), st.integers(0, 200)),
    st.tuples(st.just("fail"), st.integers(0, TRACKERS - 1), st.just(0)),
    st.tuples(st.just("bare"), st.just(0), st.integers(0, 9)),
    st.tuples(st.just("ingest"), st.just(0), st.integers(0, 9)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 3000)),
    st.tuples(st.just("read"), st.just(0), st.just(0)),
)


class Feeder:
    """Drives one recorder (and, for the counters, a ``ServingStats`` fed as the
    recorder's own was before it queued) through the steps."""

    def __init__(self, recorder: live.Recorder, clock: FakeClock) -> None:
        self.recorder = recorder
        self.clock = clock
        self.reference = ServingStats()
        self.trackers: list[live.Tracker | None] = [None] * TRACKERS

    def do(self, what: str, i: int, n: int) -> None:
        recorder, reference, clock = self.recorder, self.reference, self.clock
        tracker = self.trackers[i]
        if what == "begin" and tracker is None:
            tracker = self.trackers[i] = recorder.track(model=f"m{i}", route="/v1/x")
            tracker.begin()
            reference.begin(i)
        elif what == "advance":
            clock.advance(n / 1000)
        elif what == "bare":
            recorder.finished(Record(model="bare", duration_ms=float(n), completion_tokens=n))
        elif what == "ingest":
            record = Record(
                model="in", duration_ms=1.0, prompt_tokens=n, aborted="timeout" if n % 3 else None
            )
            recorder.ingested(record)
            reference.count_finished(record.aborted, False)
            reference.observe_tokens(clock.monotonic(), n, 0)
        elif tracker is None:
            return
        elif what == "tokens":
            tracker.tokens(completion=n)
            reference.observe_tokens(clock.monotonic(), 0, n)
        elif what == "prompt":
            tracker.tokens(prompt=n)
            reference.observe_tokens(clock.monotonic(), n, 0)
        elif what == "first":
            tracker.first_token()
        elif what == "abort":
            reason = ("explicit", "timeout")[n]
            tracker.abort(reason)
            reference.abort(i, reason)
        elif what in ("finish", "fail"):
            seen = tracker._completion_seen
            if what == "fail":
                tracker.close(RuntimeError("boom"))
            else:
                tracker.finish(status=200, completion_tokens=n)
            if n > seen:
                reference.observe_tokens(clock.monotonic(), 0, n - seen)
            reference.finish(i, error=what == "fail")
            self.trackers[i] = None


def state(recorder: live.Recorder, now: float) -> dict[str, Any]:
    serving = recorder.serving.snapshot(now)
    return {
        "serving": serving,
        # The samples themselves, in order: the same (time, amount) as each came.
        "decode": list(recorder.serving.decode._samples),
        "prefill": list(recorder.serving.prefill._samples),
        "rows": recorder.stats.ring.rows(),
        "recorded_total": recorder.stats.recorded_total,
        "cells": recorder.breakdown.to_wire(),
        "breakdown_errors": recorder.breakdown_errors,
    }


def counters(stats: ServingStats, now: float) -> tuple[Any, ...]:
    snap = stats.snapshot(now)
    return (
        snap.active,
        snap.completed,
        snap.aborts,
        snap.prompt_tokens_total,
        snap.completion_tokens_total,
        snap.decode,
        snap.prefill,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=60), st.integers(1, 4), st.integers(1, 8))
# An end's token extras, then a later mid-stream delta, folded in one batch.
@example(
    [
        ("begin", 0, 0),
        ("finish", 0, 5),
        ("advance", 0, 10),
        ("begin", 1, 0),
        ("tokens", 1, 2),
        ("read", 0, 0),
    ],
    4,
    8,
)
def test_any_interleaving_of_requests_and_reads_reads_as_each_report_applied_at_once(
    steps: list[tuple[str, int, int]], fold_every: int, max_pending: int
) -> None:
    subject_clock, sequential_clock = FakeClock(), FakeClock()
    subject = live.Recorder(clock=subject_clock, capacity=16)
    # Small queues, so the requests' own folds (the last resort) happen too.
    subject.fold_every, subject._fold_at = fold_every, fold_every
    subject.max_pending = max(max_pending, fold_every)
    sequential = live.Recorder(clock=sequential_clock, capacity=16)
    feeders = Feeder(subject, subject_clock), Feeder(sequential, sequential_clock)
    for what, i, n in steps:
        for feeder in feeders:
            feeder.do(what, i, n)
        sequential.fold()  # the reference: every report folded as it comes
        if what == "read":
            now = subject_clock.monotonic()
            assert state(subject, now) == state(sequential, now)
    now = subject_clock.monotonic()
    assert state(subject, now) == state(sequential, now)
    # And the counters are the ones the locked ServingStats calls give.
    assert counters(subject.serving, now) == counters(feeders[0].reference, now)
    reference = feeders[0].reference
    assert list(subject.serving.decode._samples) == list(reference.decode._samples)
    assert list(subject.serving.prefill._samples) == list(reference.prefill._samples)
    assert len(subject._pending) == 0 and subject._early == {}


def test_a_request_reads_its_own_record_right_after_it_finished(
    recorder: live.Recorder,
) -> None:
    for n in range(3):
        with recorder.track(request_id=f"r{n}") as t:
            seq = t.finish(status=200)
        page = recorder.stats.since(seq, 10)
        assert [(s, row.request_id) for s, row in page.rows] == [(n, f"r{n}")]
        assert recorder.serving.snapshot(0.0).completed == n + 1


def test_a_read_waits_for_a_fold_another_thread_has_begun(clock: FakeClock) -> None:
    # The folder has taken the queue (it is empty) but not yet put the record in the
    # ring: a read must wait for that fold, not take the empty queue for "all folded".
    recorder = live.Recorder(clock=clock, capacity=16)
    taken, release = threading.Event(), threading.Event()
    settle = recorder._settle

    def held_settle(*args: Any) -> None:
        taken.set()
        release.wait(timeout=30)
        settle(*args)

    recorder._settle = held_settle  # type: ignore[method-assign]
    with recorder.track(request_id="r") as t:
        seq = t.finish(status=200)
    assert seq == 0
    folder = threading.Thread(target=recorder.fold)
    folder.start()
    assert taken.wait(timeout=30)
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.append(recorder.stats.recorded_total))
    reader.start()
    release.set()
    reader.join()
    folder.join()
    assert seen == [1]


@pytest.fixture
def impatient(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> live.Recorder:
    """A recorder on the fake clock whose reads wait for a missing seq three times,
    without sleeping."""
    monkeypatch.setattr(live, "_SEQ_WAIT_ATTEMPTS", 3)
    monkeypatch.setattr(live, "_SEQ_WAIT_S", 0.0)
    return live.Recorder(clock=clock)


def test_the_ring_never_shows_a_seq_before_the_ones_below_it_arrived(
    impatient: live.Recorder,
) -> None:
    # A request that took its seq and has not queued its record yet (another thread,
    # preempted between the two): the record after it waits in the recorder.
    recorder = impatient
    recorder.finished(Record(request_id="a"))
    late_seq = next(recorder._seqs)
    assert recorder.finished(Record(request_id="c")) == late_seq + 1
    page = recorder.stats.since(0, 10)
    assert [row.request_id for _, row in page.rows] == ["a"]
    assert page.recorded_total == 1
    assert recorder.seq_waits == 1  # the read gave up waiting, and showed no gap
    # The late request queues its record: both appear, in seq order, each once.
    recorder._pending.append((0.0, 0, 0, 0, late_seq, Record(request_id="b")))
    page = recorder.stats.since(0, 10)
    assert [(seq, row.request_id) for seq, row in page.rows] == [(0, "a"), (1, "b"), (2, "c")]


def test_a_seq_whose_record_never_comes_is_given_up_and_holds_nothing_back(
    impatient: live.Recorder, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A request that died between taking its seq and queueing its record (an
    # asynchronous exception there): without giving its seq up, every record after it
    # would stay out of the ring, held in memory, and every read would wait for it.
    recorder = impatient
    recorder.finished(Record(request_id="a"))
    lost_seq = next(recorder._seqs)
    recorder.finished(Record(request_id="c"))
    assert [row.request_id for _, row in recorder.stats.since(0, 10).rows] == ["a"]
    clock.advance(live.SEQ_LOST_AFTER_S - 0.001)
    assert recorder.stats.recorded_total == 1  # not yet: a thread may only be slow
    clock.advance(0.001)
    recorder.finished(Record(request_id="d"))
    rows = recorder.stats.since(0, 10).rows
    assert [(seq, row.request_id, row.error) for seq, row in rows] == [
        (0, "a", None),
        (lost_seq, None, live.LOST_RECORD),
        (2, "c", None),
        (3, "d", None),
    ]
    assert (recorder.seqs_lost, recorder.records_late, len(recorder._early)) == (1, 0, 0)
    assert [r.getMessage() for r in caplog.records if "never reached" in r.getMessage()] == [
        "ferrox_stats: 1 request record(s) never reached this process's ring (seq 1 on); "
        "their places read 'record_lost' (later ones only counted, in Recorder.seqs_lost)"
    ]
    # The record comes after all: counted as a finished request, its place stays taken.
    recorder._pending.append((0.0, 0, 0, live.COUNTS_COMPLETED, lost_seq, Record(request_id="b")))
    recorder.finished(Record(request_id="e"))
    assert [row.request_id for _, row in recorder.stats.since(4, 10).rows] == ["e"]
    assert recorder.records_late == 1
    assert recorder.serving.snapshot(0.0).completed == 1


def test_a_gap_found_again_later_starts_its_own_wait(
    impatient: live.Recorder, clock: FakeClock
) -> None:
    recorder = impatient
    first = next(recorder._seqs)
    recorder.finished(Record(request_id="b"))
    recorder.fold()
    clock.advance(live.SEQ_LOST_AFTER_S / 2)
    recorder._pending.append((0.0, 0, 0, 0, first, Record(request_id="a")))  # only slow
    second = next(recorder._seqs)
    recorder.finished(Record(request_id="d"))
    recorder.fold()
    clock.advance(live.SEQ_LOST_AFTER_S / 2)  # 10 s since the first gap, 5 s this one's
    assert [row.request_id for _, row in recorder.stats.since(0, 10).rows] == ["a", "b"]
    assert (recorder.seqs_lost, second) == (0, 2)


def test_the_queue_stays_bounded_when_nobody_reads(clock: FakeClock) -> None:
    recorder = live.Recorder(clock=clock)
    recorder.fold_every = recorder._fold_at = 8
    for _ in range(100):
        with recorder.track() as t:
            t.tokens(completion=1)
            t.finish(status=200)
        assert len(recorder._pending) < 8
    assert recorder.request_folds == 100 * 2 // 8
    assert (recorder.stats.recorded_total, recorder.serving.snapshot(0.0).completed) == (100, 100)


def test_once_readers_fold_requests_leave_the_queue_to_them_up_to_max_pending(
    clock: FakeClock,
) -> None:
    recorder = live.Recorder(clock=clock)
    recorder.fold_every, recorder.max_pending = 4, 16
    recorder.fold()  # a reader
    for _ in range(15):
        recorder.finished(Record())
    assert (len(recorder._pending), recorder.request_folds) == (15, 0)
    recorder.finished(Record())  # the 16th: the readers fell behind
    assert (len(recorder._pending), recorder.request_folds) == (0, 1)
    for _ in range(4):
        recorder.finished(Record())  # until a reader folds again, every fold_every
    assert (len(recorder._pending), recorder.request_folds) == (0, 2)


def test_an_abort_after_the_end_counts_nothing(recorder: live.Recorder) -> None:
    with recorder.track() as t:
        t.finish(status=200)
    t.abort("timeout")
    snap = recorder.serving.snapshot(0.0)
    assert (snap.active, snap.completed, snap.aborts) == (0, 1, {})
    assert recorder.stats.ring.rows()[0].aborted is None


@pytest.mark.usefixtures("frequent_thread_switches")
def test_feeder_threads_and_a_poller_see_every_record_once_in_seq_order(
    clock: FakeClock,
) -> None:
    threads, per_thread = 6, 1500
    recorder = live.Recorder(clock=clock, capacity=threads * per_thread)
    recorder.fold_every = recorder._fold_at = 64  # requests fold too, now and then
    barrier = threading.Barrier(threads + 1)
    finished: dict[int, str] = {}
    polled: list[tuple[int, str | None]] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def feed(worker: int) -> None:
        barrier.wait()
        try:
            serve(worker)
        except BaseException as exc:  # re-raised on the test's thread
            failures.append(exc)

    def serve(worker: int) -> None:
        for n in range(per_thread):
            with recorder.track(request_id=f"{worker}-{n}") as t:
                t.tokens(prompt=2)
                t.tokens(completion=3)
                if n % 10 == 0:
                    t.abort("explicit")
                seq = t.finish(status=200, completion_tokens=5)
            assert seq is not None
            finished[seq] = f"{worker}-{n}"
            if n % 50 == 0:
                # Read-your-writes, on this thread, whatever the others are doing.
                assert recorder.stats.recorded_total > seq

    def poll() -> None:
        cursor = 0
        barrier.wait()
        while True:
            last = done.is_set()  # every feeder ended before this poll began
            page = recorder.stats.since(cursor, 256)
            if page.missed or page.reset:
                failures.append(AssertionError(f"a poll missed rows: {page}"))
            polled.extend((seq, row.request_id) for seq, row in page.rows)
            cursor = page.next_cursor
            if last and not page.rows:
                return

    workers = [threading.Thread(target=feed, args=(w,)) for w in range(threads)]
    poller = threading.Thread(target=poll)
    for thread in [*workers, poller]:
        thread.start()
    for thread in workers:
        thread.join()
    done.set()
    poller.join()
    assert failures == []
    total = threads * per_thread
    assert [seq for seq, _ in polled] == list(range(total))
    assert dict(polled) == finished
    snap = recorder.serving.snapshot(clock.monotonic())
    aborted = threads * (per_thread // 10)
    assert (snap.active, snap.completed, snap.aborts) == (
        0,
        total - aborted,
        {"explicit": aborted},
    )
    assert (snap.prompt_tokens_total, snap.completion_tokens_total) == (2 * total, 5 * total)
    assert recorder.seq_waits == 0
