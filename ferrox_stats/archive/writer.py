"""The write-behind archiver: a bounded queue on the request path, a thread that drains it.

``submit`` only appends to a bounded in-process queue (a full queue drops the *new*
record and counts it). A background thread, started lazily on the first submit (so
after any fork, never in ``ready()``), writes a batch when one fills or an interval
passes. A record leaves the queue only after its batch committed; a batch that could
not commit stays at the head and is retried with backoff, and the database is probed
meanwhile so the batch goes as soon as it answers again (``retry.py``). On interpreter exit
(``atexit``) and at ASGI lifespan shutdown (``ferrox_stats.asgi.wrap``) the queue is drained
within a deadline; the writer takes no signal handler: the server's own SIGTERM handling
(a clean exit, or the lifespan) is what leads there.

The thread holds a database connection only while it has work: it closes it after an
interval with nothing to write, after a failed batch, and when it stops. (Django's
``CONN_MAX_AGE`` is applied by request signals, which this thread never sees; a
connection per batch would be the other extreme, a new connection every second.) At
every instant::

    accepted == persisted + pending + dropped (by reason) + dead_lettered
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice, repeat

from django.db import connections

from ..conf import conf
from ..core.requests import Record, as_record
from .batch import write_batch
from .fold import fold
from .retry import PROBE, RETRY, Retry
from .rows import Pending

logger = logging.getLogger(__name__)

# Reasons a record is dropped instead of archived.
QUEUE_FULL = "queue_full"  # the bounded queue was full when it arrived
CLOSED = "closed"  # it arrived after the writer was closed for shutdown
SHUTDOWN_DEADLINE = "shutdown_deadline"  # still queued when the shutdown deadline passed


@dataclass(frozen=True)
class ArchiveHealth:
    """The archive's accounting; ``accepted`` equals the sum of the four outcomes."""

    accepted: int
    persisted: int
    duplicates: int  # of ``persisted``: already archived, not written again
    pending: int
    dropped: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    failed_attempts: int = 0
    last_error: str | None = None
    queue_max: int = 0


class ArchiveWriter:
    """A ``live.RecordSink`` that archives finished records behind the request path."""

    takes_rows = True
    """The recorder hands it a tracker's record as a row (``live.RecordSink``); its queue
    keeps it so, and its thread reads each as a ``Record`` for its batch."""

    def __init__(
        self,
        *,
        instance: str | None = None,
        using: str = "default",
        queue_max: int = 100_000,
        batch_size: int = 1000,
        interval_s: float = 1.0,
        retry_max_s: float = 30.0,
        probe_s: float = 1.0,
        shutdown_deadline_s: float = 10.0,
        fold_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        autostart: bool = True,
    ) -> None:
        self.instance = instance
        self.using = using
        self.queue_max = queue_max
        self.batch_size = batch_size
        self.interval_s = interval_s
        self.retry_max_s = retry_max_s
        self.probe_s = probe_s
        self.shutdown_deadline_s = shutdown_deadline_s
        self.fold_s = fold_s
        self._monotonic = monotonic
        # Tests drive flush_once()/drain() themselves with autostart=False.
        self.autostart = autostart
        self._queue = _Queue()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._written = threading.Condition(self._lock)
        # Only one batch is in the database at a time, whoever writes it.
        self._write_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._accepted = 0
        self._persisted = 0
        self._duplicates = 0
        self._dead_lettered = 0
        self._dropped: dict[str, int] = {}
        self._failed_attempts = 0
        self._last_error: str | None = None
        # Rollup deltas this writer committed that no fold of its own has taken yet
        # (another process's fold may have), and when it last folded.
        self._unfolded = False
        self._folded_at: float | None = None
        self._folding = False

    # -- the request path ------------------------------------------------------------

    def submit(self, seq: int | None, record: Record, instance: str | None = None) -> bool:
        """Queue a record (or a row of its fields) for the archive; never blocks on the
        database.

        Returns whether it was queued (a full or closed queue drops it, counted).
        """
        with self._lock:
            self._accepted += 1
            if self._stopping.is_set():
                self._dropped[CLOSED] = self._dropped.get(CLOSED, 0) + 1
                return False
            if len(self._queue) >= self.queue_max:
                self._dropped[QUEUE_FULL] = self._dropped.get(QUEUE_FULL, 0) + 1
                return False
            self._queue.append(seq, record, instance or self.instance)
            # The writer waits only while fewer than a batch are queued (checked under
            # this lock), so waking it as the queue reaches a batch is enough; a
            # notify() on every submit of a long queue cost ~0.5 µs each.
            if len(self._queue) == self.batch_size:
                self._wake.notify()
        if self._thread is None and self.autostart:
            self.start()
        return True

    # -- accounting ------------------------------------------------------------------

    def health(self) -> ArchiveHealth:
        with self._lock:
            return ArchiveHealth(
                accepted=self._accepted,
                persisted=self._persisted,
                duplicates=self._duplicates,
                pending=len(self._queue),
                dropped=dict(self._dropped),
                dead_lettered=self._dead_lettered,
                failed_attempts=self._failed_attempts,
                last_error=self._last_error,
                queue_max=self.queue_max,
            )

    # -- writing ---------------------------------------------------------------------

    def flush_once(self) -> int:
        """Write the batch at the head of the queue; return how many records left it.

        Raises what the database raised if the batch could not commit; the batch then
        stays at the head of the queue.
        """
        with self._write_lock:
            with self._lock:
                batch = self._queue.head(self.batch_size)
            if not batch:
                return 0
            try:
                result = write_batch(batch, self.using)
            except Exception as exc:
                with self._lock:
                    self._failed_attempts += 1
                    self._last_error = type(exc).__name__
                # A broken connection is replaced on the next attempt (unless a caller's
                # transaction owns it, as when a test drives the writer itself).
                connection = connections[self.using]
                if not connection.in_atomic_block:
                    connection.close()
                raise
            with self._lock:
                # Only this writer removes from the head, so these are the batch's items.
                self._queue.drop_head(len(batch))
                self._unfolded = self._unfolded or bool(result.inserted and conf.ROLLUPS)
                self._persisted += result.inserted + result.duplicates
                self._duplicates += result.duplicates
                self._dead_lettered += len(result.dead)
                self._last_error = None
                self._folding = True
            try:
                # The rollup deltas, when due, in the batch's turn: whoever waits for
                # the queue to drain also waits for this (a host's test tearing its
                # database down never races a fold), and no fold runs on its own time.
                self.fold_if_due()
            finally:
                with self._lock:
                    self._folding = False
                    self._written.notify_all()
            for item, reason in result.dead:
                logger.error(
                    "ferrox_stats: dead-lettered record %s/%s: %s",
                    item.record.replica,
                    item.record.request_id,
                    reason,
                )
            return len(batch)

    def fold_if_due(self, *, now: bool = False) -> int | None:
        """Fold the rollup deltas (``archive/fold.py``) if this writer left some and
        ``fold_s`` passed since it last folded (or ``now``), unless another process is
        folding; return how many it folded (``None``: it did not fold). A fold that
        fails is logged and left to the next: the deltas wait in their table, and the
        batches go on."""
        if not self._unfolded:
            return None
        at = self._monotonic()
        if not now and self._folded_at is not None and at - self._folded_at < self.fold_s:
            return None
        try:
            folded = fold(self.using, wait=False)
        except Exception:
            logger.warning("ferrox_stats: rollup fold failed; it is retried", exc_info=True)
            self._folded_at = at
            connection = connections[self.using]
            if not connection.in_atomic_block:
                connection.close()
            return None
        if folded is not None:
            # Another process folding (None) may have started before this writer's
            # last batch committed: then this one folds at its next chance.
            self._unfolded = False
            self._folded_at = at
        return folded

    def wait_until_drained(self, timeout_s: float) -> bool:
        """Block until the queue is empty (written by whoever writes), at most ``timeout_s``."""
        with self._lock:
            return self._written.wait_for(lambda: not self._queue and not self._folding, timeout_s)

    def drain(self, deadline_s: float | None = None) -> bool:
        """Write until the queue is empty or ``deadline_s`` passes; return whether it emptied."""
        deadline = self._monotonic() + (
            self.shutdown_deadline_s if deadline_s is None else deadline_s
        )
        backoff = 0.05
        while self.health().pending:
            if self._monotonic() >= deadline:
                return False
            try:
                self.flush_once()
                backoff = 0.05
            except Exception:
                time.sleep(min(backoff, max(0.0, deadline - self._monotonic())))
                backoff = min(backoff * 2, 1.0)
        return True

    # -- the background thread ---------------------------------------------------------

    def start(self) -> None:
        """Start the background writer (idempotent); done lazily by the first ``submit``."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name="ferrox-stats-archiver", daemon=True
            )
            self._thread.start()
        atexit.register(self.close)

    def _run(self) -> None:
        retry = Retry(self.retry_max_s, self.probe_s)
        while not self._stopping.is_set():
            if retry.waiting:
                # After a failure wait out the backoff, however full the queue is,
                # probing the database meanwhile.
                if self._stopping.wait(retry.wait_s(self._monotonic())):
                    break
                due = retry.due(self._monotonic())
                if due == PROBE:
                    retry.probed(self._monotonic(), self.probe())
                if due != RETRY:
                    continue
            else:
                with self._lock:
                    if len(self._queue) < self.batch_size and not self._stopping.is_set():
                        self._wake.wait(self.interval_s)
                    idle = not self._queue
                if idle:
                    # A whole interval with nothing to write: give the connection back,
                    # so an idle process holds none (a test database can be dropped).
                    # What it left unfolded waits for its next batch, its stop, or a
                    # usage answer (``fold.fold_abandoned``).
                    self._close_connection()
                    continue
            if self._stopping.is_set():
                break
            try:
                while self.flush_once() == self.batch_size and not self._stopping.is_set():
                    pass
                retry.succeeded()
            except Exception:
                logger.warning(
                    "ferrox_stats: archive batch failed; it stays queued and is retried",
                    exc_info=True,
                )
                retry.failed(self._monotonic())
        self._close_connection()

    def _close_connection(self) -> None:
        """Close this thread's connection to the archive's database, if it has one."""
        connection = connections[self.using]
        if connection.connection is not None and not connection.in_atomic_block:
            connection.close()

    def probe(self) -> bool:
        """Whether the archive's database answers (a connection and ``SELECT 1``)."""
        connection = connections[self.using]
        try:
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except Exception:
            if not connection.in_atomic_block:
                connection.close()
            return False

    def close(self, deadline_s: float | None = None, *, drain: bool = True) -> bool:
        """Stop the thread, drain the queue within the deadline, count what is left.

        Returns whether everything was written. Records still pending at the deadline
        are counted as dropped by ``shutdown_deadline``; later submits are too. With
        ``drain=False`` (a test's teardown) nothing more is written: the thread finishes
        the batch it is writing and what is still queued is dropped as ``closed``.
        Either way the thread's database connection is closed once it has stopped.
        """
        deadline = self._monotonic() + (
            self.shutdown_deadline_s if deadline_s is None else deadline_s
        )
        with self._lock:
            self._stopping.set()
            self._wake.notify_all()
        atexit.unregister(self.close)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - self._monotonic()))
        if not drain:
            with self._write_lock, self._lock:
                left = len(self._queue)
                self._queue.clear()
                if left:
                    self._dropped[CLOSED] = self._dropped.get(CLOSED, 0) + left
            return left == 0
        emptied = self.drain(max(0.0, deadline - self._monotonic()))
        # What this process wrote, folded before it goes (unless another is folding).
        self.fold_if_due(now=True)
        if not emptied:
            with self._lock:
                left = len(self._queue)
                self._queue.clear()
                self._dropped[SHUTDOWN_DEADLINE] = self._dropped.get(SHUTDOWN_DEADLINE, 0) + left
            logger.error("ferrox_stats: %d records not archived before the shutdown deadline", left)
        return emptied

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()


class _Queue:
    """The records waiting to be written, oldest first, as three parallel deques.

    Not a deque of ``Pending``: a tuple per record would be one more object for the
    garbage collector on every submit, and every full collection walks all of them. A
    backlog of 100 000 records cost a submit about 1 µs more that way.
    """

    __slots__ = ("_instances", "_records", "_seqs")

    def __init__(self) -> None:
        self._seqs: deque[int | None] = deque()
        self._records: deque[Record] = deque()
        self._instances: deque[str | None] = deque()

    def __len__(self) -> int:
        return len(self._records)

    def append(self, seq: int | None, record: Record, instance: str | None) -> None:
        self._seqs.append(seq)
        self._records.append(record)
        self._instances.append(instance)

    def head(self, n: int) -> list[Pending]:
        """The oldest ``n`` (or fewer) records, left in the queue."""
        # tuple.__new__ in C, not Pending's own __new__ in Python: 0.2 µs a record less.
        fields = zip(
            islice(self._seqs, n),
            # A tracker's record comes as a row (``takes_rows``): read as a Record here,
            # in the writer's thread, for the batch alone.
            map(as_record, islice(self._records, n)),
            islice(self._instances, n),
            repeat(False),  # ingested: the server's own records
            strict=False,
        )
        return list(map(tuple.__new__, repeat(Pending), fields))

    def drop_head(self, n: int) -> None:
        for _ in range(n):
            self._seqs.popleft()
            self._records.popleft()
            self._instances.popleft()

    def clear(self) -> None:
        self._seqs.clear()
        self._records.clear()
        self._instances.clear()


def from_settings(instance: str | None = None) -> ArchiveWriter:
    """The default ``ARCHIVE_SINK``: a writer configured by ``FERROX_STATS``."""
    return ArchiveWriter(
        instance=instance,
        using=conf.ARCHIVE_DATABASE,
        queue_max=conf.ARCHIVE_QUEUE_MAX,
        batch_size=conf.ARCHIVE_BATCH_SIZE,
        interval_s=conf.ARCHIVE_FLUSH_INTERVAL_S,
        retry_max_s=conf.ARCHIVE_RETRY_MAX_S,
        shutdown_deadline_s=conf.ARCHIVE_SHUTDOWN_DEADLINE_S,
        fold_s=conf.ROLLUP_FOLD_S,
    )
