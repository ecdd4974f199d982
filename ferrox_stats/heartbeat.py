"""This process's heartbeat: its state document, published every ``HEARTBEAT_S``.

One daemon thread per recorder (``live._build`` starts it with the recorder; a forked
child builds its own recorder, hence its own thread). Each tick, off the request path:

1. ``state.process_state(recorder)``: the process's counters, rate windows,
   distributions and archive accounting, read at one instant (and, first, the records
   the request path queued since the last tick folded into the breakdown): the
   per-label cells at power-of-two resolution, the latency merged over them at full
   resolution (state document version 2);
2. ``host_state.publish(doc)``: the host-local file ``/metrics`` merges (works with the
   database down), the document as it is;
3. one upsert of the process's ``Instance`` row (``INSERT … ON CONFLICT DO UPDATE``,
   on SQLite and PostgreSQL alike), on ``ARCHIVE_DATABASE``: the document without its
   per-label cells, with three latency distributions (``fleet_rows.pack``);
4. now and then, a bounded delete of rows of instances gone for ``INSTANCE_KEEP_S``.

A recorder without an archive (``ARCHIVE_SINK = None``) heartbeats host-only
(``using=None``): steps 1 and 2, no database. Its host file stays fresh for ``/metrics``
and its breakdown is folded here rather than on its request path.

A tick that fails is counted (``failures``, ``host_failures``), logged once per outage,
and simply retried at the next tick: a heartbeat is a whole state, so nothing queues.
The thread keeps its database connection between ticks (one per process, like a
request thread's with ``CONN_MAX_AGE``): reconnecting every tick cost a quarter of the
tick's CPU (``bench/fleet.py``) and a server backend each time. It closes it after a
failed tick (the next one reconnects) and when it stops.

``stop()`` ends the thread and writes one last heartbeat with ``stopped=True``:
``live._stop`` calls it after the archive sink closed, so that heartbeat carries the
sink's final accounting, records dropped at shutdown included.

Nothing here is shared with the request path but what ``process_state`` reads; the
publisher's own lock is held across I/O, and only the publisher's threads take it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections

from .archive.rows import at_ms_to_datetime

if TYPE_CHECKING:
    from .live import Recorder

logger = logging.getLogger(__name__)

__all__ = ["Heartbeat", "instance_row"]

# Rows one prune deletes at most, and how often (seconds of heartbeat wall time) the
# publisher looks for old rows: a fleet that restarts every worker once a minute
# leaves far fewer than 100 rows a minute.
PRUNE_BATCH = 100
PRUNE_EVERY_S = 60.0
# Seconds ``stop()`` waits for the thread to write the final heartbeat.
STOP_TIMEOUT_S = 5.0

# Every column but the key: what the upsert overwrites.
UPDATED = [
    "replica",
    "host",
    "pid",
    "started_at",
    "last_seen",
    "heartbeat_s",
    "stopped",
    "state",
    "latency_counts",
]


def instance_row(doc: dict[str, Any], heartbeat_s: float) -> Any:
    """The ``Instance`` row a state document is published as (``fleet_rows.pack``: the
    document without its breakdown as JSON text, its latency counts packed)."""
    from .fleet_rows import pack
    from .models import Instance

    state, latency_counts = pack(doc)
    return Instance(
        instance=doc["instance"],
        replica=doc["replica"],
        host=doc["host"],
        pid=doc["pid"],
        started_at=at_ms_to_datetime(doc["started_ms"]),
        last_seen=at_ms_to_datetime(doc["at_ms"]),
        heartbeat_s=heartbeat_s,
        stopped=bool(doc["stopped"]),
        state=state,
        latency_counts=latency_counts,
    )


def _host_publish() -> Callable[[dict[str, Any]], object]:
    """``host_state.publish`` (the /metrics files), imported when first used:
    ``host_state`` imports ``state``, which imports ``live``, which starts heartbeats."""
    from .host_state import publish

    return publish


class Heartbeat:
    """Publishes one recorder's state every ``interval_s``; see the module docstring.

    Tests drive it without the thread: ``publish_once()`` is one tick, at the
    recorder's clock. ``document`` is ``state.process_state`` unless given.
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        interval_s: float,
        using: str | None = "default",
        keep_s: float = 86400.0,
        document: Callable[..., dict[str, Any]] | None = None,
    ) -> None:
        self.recorder = recorder
        self.interval_s = interval_s
        self.using = using
        self.keep_s = keep_s
        self._document = document
        self.beats = 0  # heartbeats written to the database
        self.failures = 0  # ticks whose database write failed
        self.host_failures = 0  # ticks whose host file could not be written
        self.pruned = 0  # old rows deleted
        self.last_error: str | None = None
        self._next_prune_ms: int | None = None
        self._publish_lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()  # set to tick now (stop, nudge)
        self._thread: threading.Thread | None = None
        self._final_written: bool | None = None

    # -- one tick --------------------------------------------------------------------

    def document(self, *, stopped: bool = False) -> dict[str, Any]:
        """The state document this tick publishes."""
        if self._document is not None:
            return self._document(self.recorder, stopped=stopped)
        from .state import process_state

        return process_state(self.recorder, stopped=stopped)

    def publish_once(self, *, stopped: bool = False) -> bool:
        """One heartbeat: the document, the host file, the row; return whether the row
        was written (host-only: True). Never raises: failures are counted and logged
        once per outage."""
        with self._publish_lock:
            try:
                doc = self.document(stopped=stopped)
            except Exception:
                self._failed("the state document could not be built")
                return False
            self._publish_to_host(doc)
            if self.using is None:
                return True  # host-only: this process writes no row
            try:
                self._upsert(doc)
                self._prune(doc["at_ms"])
            except Exception as exc:
                self._failed(f"the database refused it ({type(exc).__name__})")
                return False
            if self.last_error is not None:
                logger.warning("ferrox_stats: heartbeats are written again")
            self.last_error = None
            self.beats += 1
            return True

    def _publish_to_host(self, doc: dict[str, Any]) -> None:
        try:
            _host_publish()(doc)
        except Exception:
            self.host_failures += 1
            if self.host_failures == 1:
                logger.warning(
                    "ferrox_stats: the heartbeat could not write the host's state file "
                    "(later failures are only counted, in host_failures)",
                    exc_info=True,
                )

    def _upsert(self, doc: dict[str, Any]) -> None:
        from .models import Instance

        assert self.using is not None
        # One statement: INSERT … ON CONFLICT (instance) DO UPDATE (update_or_create
        # would be a SELECT and then an UPDATE or INSERT, racing nobody but costing two).
        Instance.objects.using(self.using).bulk_create(
            [instance_row(doc, self.interval_s)],
            update_conflicts=True,
            unique_fields=["instance"],
            update_fields=UPDATED,
        )

    def _prune(self, now_ms: int) -> None:
        """Delete up to ``PRUNE_BATCH`` rows unseen for ``keep_s``, once a minute.

        ``INSTANCE_KEEP_S >= INSTANCE_LOST_S`` (check E061), so each is stopped or lost.
        """
        if self._next_prune_ms is not None and now_ms < self._next_prune_ms:
            return
        from .models import Instance

        assert self.using is not None
        rows = Instance.objects.using(self.using)
        cutoff = at_ms_to_datetime(now_ms) - timedelta(seconds=self.keep_s)
        old = list(
            rows.filter(last_seen__lt=cutoff)
            .order_by("last_seen")
            .values_list("instance", flat=True)[:PRUNE_BATCH]
        )
        if old:
            deleted, _ = rows.filter(instance__in=old, last_seen__lt=cutoff).delete()
            self.pruned += deleted
        # A full batch may have left more: look again at the next tick.
        self._next_prune_ms = now_ms + (0 if len(old) == PRUNE_BATCH else int(PRUNE_EVERY_S * 1000))

    def _failed(self, what: str) -> None:
        self.failures += 1
        if self.last_error is None:
            logger.warning(
                "ferrox_stats: a heartbeat was not written: %s; retried every %ss "
                "(failures are counted in Heartbeat.failures)",
                what,
                self.interval_s,
                exc_info=True,
            )
        self.last_error = what

    # -- the thread ------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (idempotent). Its first heartbeat is written one interval
        later (``nudge()`` asks for it at once): a recorder that lives less than that —
        a host's test builds one per test — writes nothing at all, so no background
        write meets a test's open transaction (on SQLite's shared in-memory database
        one would fail the test's own writes)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name="ferrox-stats-heartbeat", daemon=True
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self.interval_s)
                self._wake.clear()
                if self._stopping.is_set():
                    break
                if not self.publish_once():
                    # A broken connection is replaced at the next tick.
                    self._close_connection()
            self._final_written = self._publish_final()
        finally:
            self._close_connection()

    def nudge(self) -> None:
        """Ask the thread for a heartbeat now rather than at the end of the interval."""
        self._wake.set()

    def _publish_final(self) -> bool:
        # An instance that never announced itself has no shutdown to mark in the
        # database (a host's per-test recorder writes no row behind the test). If it
        # recorded anything, its host's files still get its last counts: a worker
        # recycled within its first interval (gunicorn --max-requests under load) would
        # otherwise take what it served out of the host's /metrics counters.
        if not (self.beats or self.failures):
            if self.recorder.stats.recorded_total:
                self._publish_final_to_host()
            return True
        return self.publish_once(stopped=True)

    def _publish_final_to_host(self) -> None:
        with self._publish_lock:
            try:
                doc = self.document(stopped=True)
            except Exception:
                self._failed("the state document could not be built")
                return
            self._publish_to_host(doc)

    def _close_connection(self) -> None:
        if self.using is None:
            return
        connection = connections[self.using]
        if connection.connection is not None and not connection.in_atomic_block:
            connection.close()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """End the thread and write the final heartbeat (``stopped=True``) unless none
        was ever attempted; return whether it was written (or not needed). Call it
        after the archive sink closed.

        The thread writes it, so the caller's database connection is left alone; a
        publisher whose thread never ran (tests) writes it here.
        """
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return self._publish_final()
        thread.join(timeout_s)
        if thread.is_alive():
            logger.warning(
                "ferrox_stats: the final heartbeat was not written within %ss; this "
                "instance will read as lost",
                timeout_s,
            )
            return False
        return bool(self._final_written)
