"""Live traffic for the demo, played in the server process, where the dashboard reads it.

The in-process tracker records into the recorder of the process that serves the pages,
so this traffic cannot come from another process: it starts on the first request this
server answers (after any fork, never in ``ready()``), once, for a bounded time, and
``stop()`` ends it (the ASGI app's shutdown, project/asgi.py). Engines elsewhere are what
``manage.py ferrox_stats_loadgen --ingest-url …`` plays, and clients of the pass-through
what ``--openai-url …`` plays.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

from loadgen import LoadGenerator

logger = logging.getLogger(__name__)

# What Django hands a middleware: the rest of the chain, sync or async.
GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]

_lock = threading.Lock()
_started_in: int | None = None  # the pid that started it: a forked child starts its own
_running: tuple[LoadGenerator, threading.Thread] | None = None


def start_once(duration_s: float, concurrency: int = 6) -> bool:
    """Start the traffic unless this process already did; returns whether it started."""
    global _started_in, _running
    with _lock:
        if _started_in == os.getpid():
            return False
        _started_in = os.getpid()
        generator = LoadGenerator(duration_s=duration_s, concurrency=concurrency)

        def play() -> None:
            report = generator.run()
            logger.info("demo traffic finished: %s", report.line())

        thread = threading.Thread(target=play, name="demo-traffic", daemon=True)
        _running = (generator, thread)
    thread.start()
    return True


def stop(timeout_s: float = 5.0) -> None:
    """End this process's traffic, if it plays any: what is in flight ends as client
    aborts, recorded before this returns (within ``timeout_s``)."""
    with _lock:
        running = _running if _started_in == os.getpid() else None
    if running is not None:
        generator, thread = running
        generator.stop()
        thread.join(timeout_s)


def _wanted() -> bool:
    # getattr: the type checker reads the test settings, which have no demo.
    return getattr(settings, "DEMO_TRAFFIC", False) and _started_in != os.getpid()


@sync_and_async_middleware
def start_on_first_request(get_response: GetResponse) -> GetResponse:
    """Middleware: the first request (the demo script's readiness probe) starts the traffic.

    Sync and async: under ASGI an async chain keeps async views (the pass-through) on the
    event loop, where a sync middleware would put each request through a thread.
    """
    if iscoroutinefunction(get_response):
        get_async = cast(Callable[[HttpRequest], Awaitable[HttpResponseBase]], get_response)

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            if _wanted():
                start_once(getattr(settings, "DEMO_TRAFFIC_S", 3600.0))  # only starts a thread
            return await get_async(request)

        return markcoroutinefunction(async_middleware)

    get_sync = cast(Callable[[HttpRequest], HttpResponseBase], get_response)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        if _wanted():
            start_once(getattr(settings, "DEMO_TRAFFIC_S", 3600.0))
        return get_sync(request)

    return middleware
