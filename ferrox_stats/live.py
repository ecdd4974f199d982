"""This process's recorder, and the in-process feeder that tracks one request.

The recorder holds the core objects and is the one place that reads clocks. It is
built lazily from settings on first use (and again in a forked child, which must not
share its parent's ring); ``reset()`` rebuilds it for tests.

Feeding it from code that serves or proxies inference::

    with live.track(route="/v1/chat/completions", model="llama-3-8b", stream=True) as t:
        for chunk in engine.stream(...):
            t.tokens(completion=chunk.n_tokens)     # the first one stamps TTFT
            yield chunk
        t.finish(status=200, finish_reason="stop", prompt_tokens=n_prompt)

``async with`` works the same. An exception inside ends the request with an error;
cancellation, ``GeneratorExit`` (the client went away mid-stream) or
``ClientDisconnected`` end it as aborted by ``client_disconnect``.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat, starmap
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol, cast

from .core.breakdown import DEFAULT_FOLD_EVERY, DEFAULT_MAX_QUEUED, Breakdown
from .core.rate import LastKnown, gauge_problem, pool_occupancy
from .core.requests import Record, Stats, Summary, as_record
from .core.serving import ServingSnapshot, ServingStats
from .tracker import (
    COUNTS_COMPLETED,
    COUNTS_ERROR,
    COUNTS_INGESTED,
    COUNTS_NOTHING,
    DISCONNECT_EXCEPTIONS,
    ClientDisconnected,
    Tracker,
)

if TYPE_CHECKING:
    from .heartbeat import Heartbeat

logger = logging.getLogger(__name__)

__all__ = [
    "DISCONNECT_EXCEPTIONS",
    "ClientDisconnected",
    "Clock",
    "LiveSnapshot",
    "RecordSink",
    "Recorder",
    "SystemClock",
    "Tracker",
    "current_heartbeat",
    "get_recorder",
    "reset",
    "shutdown",
    "track",
]


# How long a reader waits for a record whose seq its request already took: that request
# runs the next few bytecodes as soon as it gets the GIL, so this is rarely reached (a
# thread preempted there on a loaded host); then the read goes on without it and the
# records after it wait, in seq order, for a later read.
_SEQ_WAIT_ATTEMPTS = 1000
_SEQ_WAIT_S = 0.0001
# A seq missing this long (the recorder's clock) is lost: its request died between
# taking it and queueing its record (an asynchronous exception, a MemoryError). Its
# place in the ring gets LOST_RECORD so the records after it are not held back forever
# (nor every read made to wait); the record, should it come after all, is counted and
# archived but not put in the ring (``records_late``).
SEQ_LOST_AFTER_S = 10.0
# What a lost seq's place in the ring says (``Record.error``): a request ended there,
# its record did not reach the ring.
LOST_RECORD = "record_lost"


# A finished report's fields (``Recorder.end``): (now, prompt, completion, counts, seq, record).
_COUNTS = itemgetter(3)
_SEQ = itemgetter(4)
_RECORD = itemgetter(5)


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def wall_ms(self) -> int:
        """Epoch milliseconds."""


class SystemClock:
    """The real clocks."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def wall_ms() -> int:
        return time.time_ns() // 1_000_000


class RecordSink(Protocol):
    """Where finished records go after the ring: the archive plugs in here.

    ``submit`` is called on the request path, so it must not block (hand the record
    to a bounded queue and return). A sink may also have ``close(deadline_s=None, *,
    drain=True)`` (stop, writing what is queued unless ``drain=False``) and ``health()``.

    A sink whose ``takes_rows`` is true is handed a tracker's record as the recorder
    keeps it, a row (an exact tuple of ``Record``'s fields; ``core.requests.as_record``
    reads it), so that no ``Record`` outlives the request in its queue; any other sink
    gets the ``Record``.
    """

    def submit(self, seq: int, record: Record) -> object: ...


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """Everything this process knows right now, read at one instant."""

    instance: str
    replica: str
    uptime_s: float
    serving: ServingSnapshot
    summary: Summary
    recorded_total: int
    pool_occupancy: float | None
    queue_depth: float | None
    sink_errors: int
    archive: Any  # the sink's ``health()``, when it reports one (``ArchiveHealth``)
    gauges_refused: int = 0  # gauge reports ignored as impossible


def new_instance_id(replica: str) -> str:
    """Names one recorder: its replica, process, and a random epoch (pids get reused)."""
    return f"{replica}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


class Recorder:
    """This process's telemetry: serving counters, the ring of finished requests, gauges."""

    def __init__(
        self,
        *,
        capacity: int = 1024,
        max_page: int = 256,
        window_s: float = 5.0,
        sample_cap: int = 4096,
        min_span_s: float = 1.0,
        gauge_max_age_s: float | None = 60.0,
        max_models: int = 20,
        max_routes: int = 20,
        replica: str = "local",
        clock: Clock | None = None,
        sink: RecordSink | None = None,
        instance: str | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.replica = replica
        self.instance = instance or new_instance_id(replica)
        self._serving = ServingStats(window_s, sample_cap, min_span_s)
        # Its in-flight dict, which a Tracker's begin and end use directly (see there).
        self._inflight = self._serving._inflight
        self._stats = Stats(capacity, max_page, self.instance)
        # Per (model, route, outcome) distributions: what heartbeats and /metrics publish.
        self._breakdown = Breakdown(max_models=max_models, max_routes=max_routes)
        self._breakdown_errors = 0  # records the breakdown refused (a bug, not a request's)
        # The request path takes no lock (see ``fold``): a request takes its seq from
        # ``_seqs`` and appends one tuple to ``_pending``, both atomic in CPython; mid-
        # stream token deltas are a tuple there too. Readers fold it, in order, into
        # the counters, the rate windows, the ring and the breakdown, under _fold_lock.
        self._seqs = itertools.count()
        self._pending: deque[tuple[Any, ...]] = deque()
        # Records folded whose seq is past one still on its way to _pending (its request
        # took the seq and has not appended yet): the ring gets them in seq order.
        self._early: dict[int, Record] = {}
        self._fold_lock = threading.Lock()
        self.fold_every = DEFAULT_FOLD_EVERY
        self.max_pending = DEFAULT_MAX_QUEUED
        # Pending reports at which a request folds them itself: fold_every until a reader
        # folds, then max_pending until a request had to again (as ``Breakdown`` does).
        self._fold_at = self.fold_every
        self.request_folds = 0
        self.seq_waits = 0  # reader folds that gave up waiting for a seq's record
        self.seqs_lost = 0  # seqs given up after SEQ_LOST_AFTER_S: LOST_RECORD in the ring
        self.records_late = 0  # records that came after their seq was given up
        # The lowest missing seq, and when a fold first found it missing.
        self._gap: tuple[int, float] | None = None
        self.pool_occupancy: LastKnown[float] = LastKnown(gauge_max_age_s)
        self.queue_depth: LastKnown[float] = LastKnown(gauge_max_age_s)
        self.gauges_refused = 0  # gauge reports ignored as impossible
        self._gauge_lock = threading.Lock()
        self.sink = sink
        self.sink_errors = 0
        self.started_at = self.clock.monotonic()
        self.started_ms = self.clock.wall_ms()

    def track(
        self,
        *,
        route: str | None = None,
        model: str | None = None,
        stream: bool | None = None,
        request_id: str | None = None,
        client: str | None = None,
        via_api_key: str | None = None,
    ) -> Tracker:
        """A tracker for one request; it begins when entered (or on ``begin()``)."""
        return Tracker(self, route, model, stream, request_id, client, via_api_key)

    def observe_gauges(
        self,
        *,
        pool_used: float | None = None,
        pool_total: float | None = None,
        queue_depth: float | None = None,
    ) -> None:
        """A report of values only some reports carry; what it lacks is left as it was.

        A report that cannot be a measurement (see ``core.rate.gauge_problem``: not a
        finite number from 0 to its maximum, or ``pool_used > pool_total``) is ignored
        whole and counted in ``gauges_refused``, with one warning per recorder: this
        is called on the host's request path, so it never raises.
        """
        if problem := gauge_problem(pool_used, pool_total, queue_depth):
            with self._gauge_lock:
                self.gauges_refused += 1
                first = self.gauges_refused == 1
            if first:
                logger.warning(
                    "Ignored a gauge report: %s (later ones are only counted, in "
                    "Recorder.gauges_refused).",
                    problem,
                )
            return
        now = self.clock.monotonic()
        self.pool_occupancy.observe(now, pool_occupancy(pool_used, pool_total))
        self.queue_depth.observe(now, queue_depth)

    # -- the request path: no lock, one append ---------------------------------------

    def finished(self, record: Record) -> int:
        """Put a finished record in the ring and hand it to the sink; return its seq.

        Kept as given, on the request path; what shows or stores it replaces a lone
        surrogate (which nothing could encode) by U+FFFD (``core.requests.encodable``).
        It counts in no serving counter (a ``Tracker``'s end does, through ``end``).
        """
        return self.end(record, COUNTS_NOTHING, 0.0, 0, 0)

    def end(self, record: Record, counts: int, now: float, prompt: int, completion: int) -> int:
        """A request's terminal report: its record, what it ``counts`` in the serving
        counters (``tracker.COUNTS_NOTHING``, ``_COMPLETED``, ``_ERROR`` or ``_INGESTED``)
        and the token deltas first known ``now``. Queue it, hand it to the sink, return
        its seq."""
        seq = next(self._seqs)
        pending = self._pending
        pending.append((now, prompt, completion, counts, seq, record))
        if len(pending) >= self._fold_at:
            self._fold_on_request(len(pending))
        if self.sink is not None:
            self._submit(seq, record)
        return seq

    def _submit(self, seq: int, record: Record | tuple[Any, ...]) -> None:
        sink = self.sink
        try:
            # A tracker's record is a row (``Tracker._end``): a sink that does not take
            # rows gets it as a ``Record``.
            sink.submit(  # type: ignore[union-attr]
                seq,
                cast(Record, record) if getattr(sink, "takes_rows", False) else as_record(record),
            )
        except Exception:
            # The request path never fails because the archive did; the sink counts
            # its own drops, this counts a sink that broke its contract (logged the
            # first time, with its traceback).
            self.sink_errors += 1
            if self.sink_errors == 1:
                logger.exception(
                    "ferrox_stats: the archive sink raised; the record is kept in "
                    "memory only (later failures are only counted, in sink_errors)"
                )

    def observe_tokens(self, now: float, prompt: int = 0, completion: int = 0) -> None:
        """Token deltas seen at ``now`` (``ServingStats.observe_tokens``, queued)."""
        # ``not >= 0`` also refuses NaN, which would poison the rates.
        if not (prompt >= 0 and completion >= 0):
            raise ValueError(f"token deltas must be >= 0, got {prompt!r}, {completion!r}")
        if not (prompt or completion):
            return
        pending = self._pending
        pending.append((now, prompt, completion))
        if len(pending) >= self._fold_at:
            self._fold_on_request(len(pending))

    def ingested(self, record: Record) -> int:
        """A request another process served and reported here (already archived).

        It enters the ring and the counters like one served here, without the sink.
        """
        prompt, completion = record.prompt_tokens or 0, record.completion_tokens or 0
        if not (prompt >= 0 and completion >= 0):
            raise ValueError(f"token deltas must be >= 0, got {prompt!r}, {completion!r}")
        # The clock is read before the seq is taken: nothing that can raise (a host's
        # clock) may come between a seq and its report, or the ring would wait on a gap.
        now = self.clock.monotonic()
        seq = next(self._seqs)
        self._pending.append((now, prompt, completion, COUNTS_INGESTED, seq, record))
        return seq

    def _fold_on_request(self, queued: int) -> None:
        # The last resort: no reader folded for _fold_at reports. Unless another thread
        # is folding (it takes these too); only a queue twice max_pending (a reader
        # holding the lock that long) waits for it, so the queue stays bounded.
        if self._fold_lock.acquire(blocking=queued >= 2 * self.max_pending):
            try:
                self.request_folds += 1
                self._fold_locked(wait=False)
                # No reader folded for that long: fold small, cache-warm batches.
                self._fold_at = self.fold_every
            finally:
                self._fold_lock.release()

    # -- readers fold ------------------------------------------------------------------

    def fold(self) -> None:
        """Fold what requests queued into the counters, rates, ring and breakdown.

        Every reader does this first (``serving``, ``stats``, ``breakdown`` and
        ``snapshot`` are read through it), so a read sees every request that finished
        before it began, in this process.
        """
        # A folder holds the lock from taking the queue until its records are in the
        # ring: a queue found empty may be one another thread is folding, so a reader
        # waits for that fold too (else it could miss a request that finished before it).
        if self._pending or self._early or self._fold_lock.locked():
            with self._fold_lock:
                self._fold_locked(wait=True)
        else:
            # Readers fold: requests leave the queue to them (up to max_pending).
            self._fold_at = self.max_pending

    @property
    def serving(self) -> ServingStats:
        """The serving counters and rates, with every queued report folded in."""
        self.fold()
        return self._serving

    @property
    def stats(self) -> Stats:
        """The ring of finished records, with every queued one folded in."""
        self.fold()
        return self._stats

    @property
    def breakdown(self) -> Breakdown:
        """The per-label cells, with every queued record handed to them."""
        self.fold()
        return self._breakdown

    @property
    def breakdown_errors(self) -> int:
        """Records the breakdown refused by raising (a bug, not a request's)."""
        self.fold()
        return self._breakdown_errors

    def _fold_locked(self, wait: bool) -> None:
        # With _fold_lock held. ``wait``: a reader waits (briefly) for a record whose
        # seq was taken but not queued yet, so the ring never shows seq n + 1 before n
        # and a request's own read after it finished always sees its record.
        self._fold_at = self.max_pending
        pending = self._pending
        early = self._early
        expected = self._stats.recorded_total
        for _ in range(_SEQ_WAIT_ATTEMPTS):
            # Exactly the reports queued now (only a folder pops), in a C-level pass.
            batch = list(starmap(pending.popleft, repeat((), len(pending))))
            if batch:
                expected = self._settle(batch, early, expected)
            expected = self._expose(early, expected)
            if not early:
                self._gap = None
                return
            if self._gap_given_up(expected):
                expected = self._expose(early, self._fill_gap(early, expected))
                continue
            if not wait:
                return
            # A request is between next(_seqs) and its append: let it run.
            time.sleep(_SEQ_WAIT_S)
        self.seq_waits += 1

    def _gap_given_up(self, missing: int) -> bool:
        """Whether seq ``missing`` has been missing for SEQ_LOST_AFTER_S."""
        now = self.clock.monotonic()
        if self._gap is None or self._gap[0] != missing:
            self._gap = (missing, now)
            return False
        return now - self._gap[1] >= SEQ_LOST_AFTER_S

    def _fill_gap(self, early: dict[int, Record], expected: int) -> int:
        """Give the missing seqs below the first record held LOST_RECORD rows."""
        lost = min(early) - expected
        row = Record(at_ms=self.clock.wall_ms(), replica=self.replica, error=LOST_RECORD)
        first = self._stats.ring.push_many([row] * lost)
        assert first == expected, "only the recorder pushes to its ring"
        if not self.seqs_lost:
            logger.warning(
                "ferrox_stats: %d request record(s) never reached this process's ring "
                "(seq %d on); their places read %r (later ones only counted, in "
                "Recorder.seqs_lost)",
                lost,
                expected,
                LOST_RECORD,
            )
        self.seqs_lost += lost
        self._gap = None
        return expected + lost

    def _settle(self, batch: list[tuple[Any, ...]], early: dict[int, Record], expected: int) -> int:
        """Count ``batch``'s reports and hand its records on; return the seq the ring
        expects next. The usual batch (its seqs follow the ring's last, in order) goes
        into the ring here; any other waits in ``early`` for ``_expose``."""
        # In C-level passes over the batch. The rate windows get their (now, delta)
        # samples in queue order: the order in which the requests reported them, as
        # when each took the lock itself.
        serving = self._serving
        try:
            # Finished reports only (the usual batch): its columns in one pass.
            nows, prompts, completions, counts, seqs, records = zip(*batch, strict=False)
        except ValueError:  # mid-stream token deltas among them (3-tuples)
            prefill = [(item[0], item[1]) for item in batch if item[1]]
            decode = [(item[0], item[2]) for item in batch if item[2]]
            finished = [item for item in batch if len(item) == 6]
            counts = tuple(map(_COUNTS, finished))
            seqs = tuple(map(_SEQ, finished))
            records = tuple(map(_RECORD, finished))
        else:
            prefill = list(compress(zip(nows, prompts, strict=True), prompts))
            decode = list(compress(zip(nows, completions, strict=True), completions))
        errors = counts.count(COUNTS_ERROR)
        with serving.lock:
            serving.observe_many_locked(prefill, decode)
            serving.count_completed_locked(counts.count(COUNTS_COMPLETED) + errors, errors)
            if COUNTS_INGESTED in counts:
                for count, record in zip(counts, records, strict=True):
                    if count == COUNTS_INGESTED:
                        serving.count_finished_locked(record.aborted, record.error is not None)
        if not early and seqs == tuple(range(expected, expected + len(seqs))):
            # The usual fold: no gap, in order, right after the ring's last.
            if records:
                first = self._stats.ring.push_many(records)
                assert first == expected, "only the recorder pushes to its ring"
                expected += len(records)
        elif seqs and min(seqs) < expected:
            # A record whose seq was given up (its place reads LOST_RECORD): counted
            # above, archived by its request, but its place in the ring is taken.
            kept = {seq: r for seq, r in zip(seqs, records, strict=True) if seq >= expected}
            self.records_late += len(seqs) - len(kept)
            early.update(kept)
        else:
            early.update(zip(seqs, records, strict=True))
        try:
            self._breakdown.observe_many(records)
        except Exception:
            self._breakdown_failed(len(records))
        return expected

    def _expose(self, early: dict[int, Record], expected: int) -> int:
        # Push the records from ``expected`` on, in seq order, while there is no gap.
        # Every seq held is >= expected (the lower ones are in the ring), each once.
        if not early:
            return expected
        if min(early) == expected and max(early) == expected + len(early) - 1:
            # The usual fold: no gap, all of them (in C-level passes).
            rows = list(map(early.__getitem__, range(expected, expected + len(early))))
            early.clear()
        else:
            rows = []
            while (record := early.pop(expected + len(rows), None)) is not None:
                rows.append(record)
        if rows:
            first = self._stats.ring.push_many(rows)
            assert first == expected, "only the recorder pushes to its ring"
        return expected + len(rows)

    def _breakdown_failed(self, records: int) -> None:
        # Records the breakdown cannot count (a negative or infinite time in a host's
        # own Record) must not fail the request that finished (nor the read that folds
        # them). Called in an except block.
        first = self._breakdown_errors == 0
        self._breakdown_errors += records
        if first:
            logger.exception(
                "ferrox_stats: a record could not be counted in the breakdown (later "
                "ones are only counted, in Recorder.breakdown_errors)"
            )

    def snapshot(self) -> LiveSnapshot:
        self.fold()
        now = self.clock.monotonic()
        return LiveSnapshot(
            instance=self.instance,
            replica=self.replica,
            uptime_s=now - self.started_at,
            serving=self._serving.snapshot(now),
            summary=self._stats.summary(),
            recorded_total=self._stats.recorded_total,
            pool_occupancy=self.pool_occupancy.get(now),
            queue_depth=self.queue_depth.get(now),
            sink_errors=self.sink_errors,
            gauges_refused=self.gauges_refused,
            archive=health() if callable(health := getattr(self.sink, "health", None)) else None,
        )


# -- the process's recorder ------------------------------------------------------------

_lock = threading.Lock()
_recorder: Recorder | None = None
_recorder_pid: int | None = None
_clock_override: Clock | None = None
_heartbeat: Heartbeat | None = None  # the recorder's publisher, when it has one
_exit_hooked = False


def _build(clock: Clock | None) -> Recorder:
    """The recorder the settings describe. It never raises: it is built on the host's
    request path (the first ``track()``). With settings the checks refuse, it is a
    recorder with the defaults and no archive, and the checks' messages are logged as
    an error; a sink that cannot be built is left out, logged too."""
    from django.utils.module_loading import import_string

    from .checks import describe, settings_errors
    from .conf import DEFAULTS, conf

    try:
        errors = settings_errors()
        replica = conf.REPLICA
    except Exception:
        logger.exception("ferrox_stats: could not read FERROX_STATS")
        errors, replica = [], "local"
    if errors:
        logger.error(
            "%s\nRecording in memory only, with the defaults, until the settings are fixed.",
            describe(errors),
        )
        recorder = Recorder(replica=replica, clock=clock)
        _start_heartbeat(recorder, enabled=False)  # forgets a previous one
        return recorder
    instance = new_instance_id(replica)
    sink: RecordSink | None = None
    if conf.ARCHIVE_SINK:
        try:
            factory: Callable[..., RecordSink] = import_string(conf.ARCHIVE_SINK)
            sink = factory(instance=instance)
        except Exception:
            logger.exception(
                "ferrox_stats: the ARCHIVE_SINK %r could not be built; recording in memory only",
                conf.ARCHIVE_SINK,
            )
    try:
        recorder = Recorder(
            capacity=conf.RING_CAPACITY,
            max_page=conf.MAX_PAGE,
            window_s=conf.RATE_WINDOW_S,
            sample_cap=conf.RATE_SAMPLE_CAP,
            min_span_s=conf.RATE_MIN_SPAN_S,
            gauge_max_age_s=conf.GAUGE_MAX_AGE_S,
            max_models=conf.LABEL_MAX_MODELS,
            replica=replica,
            clock=clock,
            sink=sink,
            instance=instance,
        )
    except Exception:
        # Settings the checks let through and the core still refuses: a bug of ours,
        # which the host's requests must not pay for.
        logger.exception("ferrox_stats: recording in memory only, with the defaults")
        recorder = Recorder(
            capacity=DEFAULTS["RING_CAPACITY"], replica=replica, clock=clock, sink=sink
        )
    _start_heartbeat(recorder)
    return recorder


def _start_heartbeat(recorder: Recorder, *, enabled: bool = True) -> None:
    """Start the recorder's heartbeat thread (``heartbeat.py``), if it has one.

    A recorder with an archive sink heartbeats to the archive's database; one without
    (``ARCHIVE_SINK = None``: this process keeps everything in memory) heartbeats
    host-only: its state file for ``/metrics``, no row, and the fold of its breakdown
    off the request path. ``HEARTBEAT_S = None`` turns it off, and so do settings the
    checks refuse (``enabled=False``). The thread starts here,
    with the recorder (lazily, so after any fork); its ticks never run on a request
    thread.
    """
    global _heartbeat, _exit_hooked
    from .conf import conf

    _heartbeat = None
    try:
        interval = conf.HEARTBEAT_S if enabled else None
        if interval is None:
            return
        from .heartbeat import Heartbeat

        _heartbeat = Heartbeat(
            recorder,
            interval_s=interval,
            using=None if recorder.sink is None else conf.ARCHIVE_DATABASE,
            keep_s=conf.INSTANCE_KEEP_S,
        )
        _heartbeat.start()
    except Exception:
        logger.exception(
            "ferrox_stats: the heartbeat could not start; this process is not in the fleet"
        )
        return
    if not _exit_hooked:
        # A process that exits through the interpreter (gunicorn's sync workers on
        # SIGTERM) leaves its clean-shutdown mark too. Registered after nothing of the
        # sink's, so it runs after the sink's own atexit drain (LIFO) or closes it itself.
        atexit.register(_at_exit)
        _exit_hooked = True


def current_heartbeat() -> Heartbeat | None:
    """This process's heartbeat publisher, if its recorder has one (tests, benches)."""
    return _heartbeat if _recorder_pid == os.getpid() else None


def _at_exit() -> None:
    # Inherited by forked children: ``_stop`` acts only on this process's own recorder.
    shutdown(flush=True)


def get_recorder() -> Recorder:
    """This process's recorder, built from settings on first use and after a fork."""
    global _recorder, _recorder_pid
    # On every tracked request: no os.getpid() here (a system call, ~0.2 µs); a forked
    # child forgets its parent's recorder instead (_forget_the_parents_recorder).
    recorder = _recorder
    if recorder is not None:
        return recorder
    with _lock:
        if _recorder is None:
            _recorder = _build(_clock_override)
            _recorder_pid = os.getpid()
        return _recorder


def _forget_the_parents_recorder() -> None:
    """In a forked child: the parent's recorder (its ring, its queue) is not this
    process's, and its threads are not here; the next ``get_recorder()`` builds one.
    The module lock is new too: another thread of the parent may have held it."""
    global _lock, _recorder, _recorder_pid
    _lock = threading.Lock()
    _recorder = None
    _recorder_pid = None


os.register_at_fork(after_in_child=_forget_the_parents_recorder)


def reset(clock: Clock | None = None, *, flush: bool = False) -> Recorder:
    """Replace this process's recorder with a fresh one (tests; settings changed).

    The old recorder's archive writer is stopped first (its thread joined, its database
    connection closed): what it still queues is written with ``flush=True`` and
    dropped otherwise; its heartbeat then writes its last, stopped, heartbeat.
    ``clock`` is used by this and every later rebuild until the next ``reset()``.
    """
    global _recorder, _recorder_pid, _clock_override
    with _lock:
        _stop(flush)
        _clock_override = clock
        _recorder = _build(clock)
        _recorder_pid = os.getpid()
        return _recorder


def shutdown(*, flush: bool = True) -> None:
    """Stop this process's recorder, if it has one: its archive writer stops (writing
    what is queued with ``flush``, dropping it without) and holds no database
    connection any more; then its heartbeat writes the clean-shutdown mark with the
    archive's final counts. The next ``track()`` builds a new recorder."""
    global _recorder, _recorder_pid
    with _lock:
        _stop(flush)
        _recorder = None
        _recorder_pid = None


def _stop(flush: bool) -> None:
    global _heartbeat
    # A recorder inherited through fork() is the parent's: its threads are not here.
    if _recorder is None or _recorder_pid != os.getpid():
        return
    close = getattr(_recorder.sink, "close", None)
    if callable(close):
        try:
            close() if flush else close(drain=False)
        except Exception:
            logger.warning("ferrox_stats: the archive sink failed to close", exc_info=True)
    # After the sink closed: the last heartbeat carries its final accounting (what was
    # dropped at shutdown included) and the clean-shutdown mark.
    heartbeat, _heartbeat = _heartbeat, None
    if heartbeat is not None:
        heartbeat.stop()


def track(
    *,
    route: str | None = None,
    model: str | None = None,
    stream: bool | None = None,
    request_id: str | None = None,
    client: str | None = None,
    via_api_key: str | None = None,
) -> Tracker:
    """A tracker on this process's recorder; see ``Recorder.track``."""
    return get_recorder().track(
        route=route,
        model=model,
        stream=stream,
        request_id=request_id,
        client=client,
        via_api_key=via_api_key,
    )
