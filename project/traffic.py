"""Live traffic for the demo, played in the server process, where the dashboard reads it.

The in-process tracker records into the recorder of the process that serves the pages,
so this traffic cannot come from another process: it starts on the first request this
server answers (after any fork, never in ``ready()``), once, for a bounded time.
Engines elsewhere are what ``manage.py ferrox_stats_loadgen --ingest-url …`` plays.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from ferrox_stats.loadgen import LoadGenerator

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_started_in: int | None = None  # the pid that started it: a forked child starts its own


def start_once(duration_s: float, concurrency: int = 6) -> bool:
    """Start the traffic unless this process already did; returns whether it started."""
    global _started_in
    with _lock:
        if _started_in == os.getpid():
            return False
        _started_in = os.getpid()

    def play() -> None:
        report = LoadGenerator(duration_s=duration_s, concurrency=concurrency).run()
        logger.info("demo traffic finished: %s", report.line())

    threading.Thread(target=play, name="demo-traffic", daemon=True).start()
    return True


def start_on_first_request(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: the first request (the demo script's readiness probe) starts the traffic."""

    def middleware(request: HttpRequest) -> HttpResponse:
        # getattr: the type checker reads the test settings, which have no demo.
        if getattr(settings, "DEMO_TRAFFIC", False) and _started_in != os.getpid():
            start_once(getattr(settings, "DEMO_TRAFFIC_S", 3600.0))
        return get_response(request)

    return middleware
