"""Serving a project with ferrox_stats under ASGI (uvicorn, daphne, hypercorn)::

    # asgi.py
    from django.core.asgi import get_asgi_application
    from ferrox_stats.asgi import wrap

    application = wrap(get_asgi_application())

``wrap`` adds two things Django's ASGI handler lacks:

- the lifespan protocol: at shutdown, after the last request, the archive's write-behind
  queue is drained and the pass-through's upstream connections are closed. Without it a
  SIGTERM loses what is queued: uvicorn ends it by raising the signal again with the
  default handler, so ``atexit`` never runs;
- the pass-through's paths served by a lean Django handler (``lean_pass_through``):
  without the project's middleware, each sync-only hook of which is a hop to a thread
  and back under ASGI (about half the latency the pass-through adds with Django's
  default stack), and without a thread started per request (docs/benchmarks.md). Its
  views authenticate by bearer key and are CSRF-exempt, so they need none of that
  middleware; set ``lean_pass_through=False`` if yours must see those requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response

from . import live
from .proxy.clients import aclose_clients

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# The pass-through's paths, as ``ferrox_stats.proxy.urls`` names them under its mount.
PASS_THROUGH_PATHS = ("v1/chat/completions", "v1/completions", "v1/embeddings", "v1/models")


class PassThroughHandler(ASGIHandler):
    """Django's ASGI handler with no middleware: URL resolution, the view, and the
    conversion of an exception to a 500, nothing else."""

    def load_middleware(self, is_async: bool = False) -> None:
        # What BaseHandler.load_middleware sets up, with settings.MIDDLEWARE left out.
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        get_response = (
            self._get_response_async  # type: ignore[attr-defined]
            if is_async
            else self._get_response  # type: ignore[attr-defined]
        )
        self._middleware_chain = convert_exception_to_response(get_response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Django opens a ThreadSensitiveContext per request, so each request's first sync
        # call (the request_started signal) starts a thread of its own. The pass-through's
        # sync work is short (signals; a token check on a cache miss): it shares asgiref's
        # one thread-sensitive executor instead.
        await self.handle(scope, receive, send)


async def shut_down() -> None:
    """Drain the archive queue (within ARCHIVE_SHUTDOWN_DEADLINE_S) and close the
    pass-through's upstream connections."""
    close = getattr(live.get_recorder().sink, "close", None)
    if callable(close):
        await asyncio.to_thread(close)
    await aclose_clients()


def wrap(
    app: App,
    *,
    lean_pass_through: bool = True,
    mount: str = "/",
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> App:
    """``app`` with the lifespan protocol and, unless told otherwise, the pass-through
    (mounted at ``mount``) served without middleware. ``on_shutdown`` runs first at
    shutdown (stop your own background work there).

    Raises ``ImproperlyConfigured`` with the system checks' messages when
    ``FERROX_STATS`` is invalid, so the server does not start (servers run no checks).
    """
    from .checks import validate_settings  # imports models: after django.setup()

    validate_settings()
    lean = PassThroughHandler() if lean_pass_through else None
    prefix = mount if mount.endswith("/") else f"{mount}/"
    lean_paths = frozenset(prefix + path for path in PASS_THROUGH_PATHS)

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send, on_shutdown)
        elif lean is not None and scope["type"] == "http" and scope["path"] in lean_paths:
            await lean(scope, receive, send)
        else:
            await app(scope, receive, send)

    return application


async def _lifespan(
    receive: Receive, send: Send, on_shutdown: Callable[[], Awaitable[None]] | None
) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if on_shutdown is not None:
                await on_shutdown()
            await shut_down()
            await send({"type": "lifespan.shutdown.complete"})
            return
