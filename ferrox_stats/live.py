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
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .core.breakdown import Breakdown
from .core.rate import LastKnown, gauge_problem, pool_occupancy
from .core.requests import Record, Stats, Summary
from .core.serving import ServingSnapshot, ServingStats
from .tracker import DISCONNECT_EXCEPTIONS, ClientDisconnected, Tracker

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
        self.serving = ServingStats(window_s, sample_cap, min_span_s)
        self.stats = Stats(capacity, max_page, self.instance)
        # Per (model, route, outcome) distributions: what heartbeats and /metrics publish.
        self.breakdown = Breakdown(max_models=max_models, max_routes=max_routes)
        self.breakdown_errors = 0  # records the breakdown refused (a bug, not a request's)
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

    def finished(self, record: Record) -> int:
        """Put a finished record in the ring and hand it to the sink; return its seq.

        Kept as given, on the request path; what shows or stores it replaces a lone
        surrogate (which nothing could encode) by U+FFFD (``core.requests.encodable``).
        """
        seq = self.stats.record(record)
        try:
            self.breakdown.observe(record)
        except Exception:
            self._breakdown_failed()
        sink = self.sink
        if sink is not None:
            try:
                sink.submit(seq, record)
            except Exception:
                # The request path never fails because the archive did; the sink
                # counts its own drops, this counts a sink that broke its contract
                # (logged the first time, with its traceback).
                self.sink_errors += 1
                if self.sink_errors == 1:
                    logger.exception(
                        "ferrox_stats: the archive sink raised; the record is kept in "
                        "memory only (later failures are only counted, in sink_errors)"
                    )
        return seq

    def ingested(self, record: Record) -> int:
        """A request another process served and reported here (already archived).

        It enters the ring and the counters like one served here, without the sink.
        """
        self.serving.count_finished(record.aborted, record.error is not None)
        self.serving.observe_tokens(
            self.clock.monotonic(), record.prompt_tokens or 0, record.completion_tokens or 0
        )
        try:
            self.breakdown.observe(record)
        except Exception:
            self._breakdown_failed()
        return self.stats.record(record)

    def _breakdown_failed(self) -> None:
        # A record the breakdown cannot count (a negative or infinite time in a host's
        # own Record) must not fail the request that finished. Called in an except block.
        self.breakdown_errors += 1
        if self.breakdown_errors == 1:
            logger.exception(
                "ferrox_stats: a record could not be counted in the breakdown (later "
                "ones are only counted, in Recorder.breakdown_errors)"
            )

    def snapshot(self) -> LiveSnapshot:
        now = self.clock.monotonic()
        return LiveSnapshot(
            instance=self.instance,
            replica=self.replica,
            uptime_s=now - self.started_at,
            serving=self.serving.snapshot(now),
            summary=self.stats.summary(),
            recorded_total=self.stats.recorded_total,
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
