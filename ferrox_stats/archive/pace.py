"""The archive's long steps let the serving threads run: ``pace()`` between their pieces.

The archive writer runs on a thread of the serving process, and the Python parts of its
work (a batch's rows and rollups prepared, its insert on SQLite, a rollup fold's sums and
merges) hold the GIL for tens of milliseconds at a time. CPython makes a thread give the
GIL to one that waits for it only after the switch interval (5 ms, process-wide and the
host's to set): a request whose socket became ready meanwhile waits up to that, each time
it needs the GIL back (issue 13: the pass-through's p99).

So those steps call ``pace()`` between pieces of their work. Once ``STEP_S`` passed since
a thread's last pause, it sleeps ``PAUSE_S``: the sleep releases the GIL and lasts long enough
for a thread woken by that release to take it. Waiting for a step's GIL then takes about
``STEP_S``, not the switch interval; a thread that waits for nothing costs the writer
``PAUSE_S`` of wall time per ``STEP_S`` (no CPU).

Not inside ``lock_held()``: on PostgreSQL a batch's transaction holds the archive's
commit-order lock from its first insert on (a rebuild's, from its start), and the
fleet's other writers wait for it, so nothing in that transaction pauses. (On SQLite a
batch's insert pauses while it holds the file's write lock: only another process's
writer on that host waits for it.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

STEP_S = 0.001
"""A thread's time between two pauses, at most (the GIL wait it leaves a request)."""

PAUSE_S = 0.00005
"""How long a pause lasts: time for the thread its release woke to take the GIL before
this one wants it back. (In ``bench/gil_wait.py`` pauses of 0, 20, 50 and 100 µs all
cut the waits alike on this machine; a zero pause leaves the handover to a race.)"""

_thread = threading.local()  # per thread: ``due``, when it pauses next; ``held``


def pace() -> None:
    """Pause (``PAUSE_S``) if this thread ran ``STEP_S`` since it last did, unless it is
    inside ``lock_held()``; else only read the clock."""
    if getattr(_thread, "held", False):
        return
    now = time.perf_counter()
    due = getattr(_thread, "due", None)
    if due is None:
        _thread.due = now + STEP_S
    elif now >= due:
        time.sleep(PAUSE_S)
        _thread.due = time.perf_counter() + STEP_S


@contextmanager
def lock_held(held: bool = True) -> Iterator[None]:
    """This thread does not pause inside (if ``held``): it holds a lock other processes
    wait for."""
    outer = getattr(_thread, "held", False)
    _thread.held = outer or held
    try:
        yield
    finally:
        _thread.held = outer
