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
- the pass-through's routes served by a lean Django handler (``lean_pass_through``):
  without the project's middleware, each sync-only hook of which is a hop to a thread
  and back under ASGI (about half the latency the pass-through adds with Django's
  default stack), and without a thread started per request (docs/benchmarks.md). Its
  views authenticate by bearer key and are CSRF-exempt, so they need none of that
  middleware; set ``lean_pass_through=False`` if yours must see those requests.

What the lean handler takes is what Django itself would route to the pass-through's
views: a request whose path ends like one of ``ferrox_stats.proxy.urls``' routes is
resolved with the project's URLconf (``ROOT_URLCONF``: any prefix, any number of
includes), and only a match on one of those views is taken; everything else, a
project's own ``/v1/models`` included, goes to ``app``. If the pass-through is not
mounted, nothing is taken. Under ``i18n_patterns`` only ``LANGUAGE_CODE``'s prefix is
taken (no LocaleMiddleware runs); other languages reach the pass-through through
``app``. A project whose middleware picks the URLconf per request (``request.urlconf``)
should turn the lean path off.

What the lean handler keeps from Django's stack: the host is validated against
``ALLOWED_HOSTS`` (``DisallowedHost`` answered 400 by the project's ``handler400``, as
Django answers it), and if ``MIDDLEWARE`` has Django's ``SecurityMiddleware`` (or a
subclass), its hooks run around the view: the HTTPS redirect, HSTS, ``nosniff``,
Referrer-Policy and Cross-Origin-Opener-Policy, exactly as configured. They are called
inline on the event loop (they read settings and set headers), not through the thread
hops ``MiddlewareMixin`` takes under ASGI. The ``request_started`` and
``request_finished`` signals are sent as Django sends them, but on the loop's thread
when only Django's own receivers listen (``_sends_inline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import close_caches
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.handlers.base import reset_urlconf
from django.core.handlers.exception import convert_exception_to_response
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, reset_queries
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponseBase
from django.middleware.security import SecurityMiddleware
from django.urls import ResolverMatch, get_resolver, set_script_prefix
from django.utils.module_loading import import_string

from . import live

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Respond = Callable[[HttpRequest], Awaitable[HttpResponseBase]]

# The scope key that hands the lean handler the match the routing check found.
RESOLVED = "ferrox_stats.resolver_match"


class PassThroughHandler(ASGIHandler):
    """Django's ASGI handler without the project's middleware: host validation, the
    project's ``SecurityMiddleware`` hooks (if it has one), URL resolution, the view,
    and the conversion of an exception to a response (DisallowedHost to a 400, others
    to a 500), nothing else."""

    def load_middleware(self, is_async: bool = False) -> None:
        # What BaseHandler.load_middleware sets up, with settings.MIDDLEWARE left out.
        # ASGIHandler always asks for the async chain.
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        # Each layer converts its own exceptions, as Django wraps each middleware: a
        # DisallowedHost from the host check still gets the security headers, one from
        # the HTTPS redirect does not.
        view: Respond = self._get_response_async  # type: ignore[attr-defined]
        chain = _converting(_validating_host(_converting(view)))
        security = _security_middleware(chain)
        if security is not None:
            chain = _converting(_securing(chain, security))
        self._middleware_chain = chain

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        # The routing check resolved this path already (PassThroughRoutes.match).
        match = request.scope.get(RESOLVED) if isinstance(request, ASGIRequest) else None
        if not isinstance(match, ResolverMatch):
            return super().resolve_request(request)
        request.resolver_match = match
        return match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Django opens a ThreadSensitiveContext per request, so each request's first sync
        # call (the request_started signal) starts a thread of its own. The pass-through's
        # sync work is short (signals, when more than Django's housekeeping listens): it
        # shares asgiref's one thread-sensitive executor instead.
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Django's ``ASGIHandler.handle`` (5.2), with the request_started and
        request_finished signals sent on the loop, not through a thread hop each, when
        only Django's own housekeeping listens (``_sends_inline``)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        await _send(request_started, self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            assert error_response is not None  # create_request gives one or the other
            body_file.close()
            await self.send_response(error_response, send)
            await _close(error_response)
            return

        async def process_request() -> HttpResponseBase:
            response: HttpResponseBase = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client left mid-send
                await self.send_response(response, send)
            return response

        # As Django: a client that leaves while the view runs cancels it.
        listening = asyncio.ensure_future(self.listen_for_disconnect(receive))
        processing = asyncio.ensure_future(process_request())
        try:
            await asyncio.wait((listening, processing), return_when=asyncio.FIRST_COMPLETED)
            for task in (listening, processing):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                elif not task.cancelled():
                    with contextlib.suppress(RequestAborted):
                        task.result()
            if processing.cancelled():
                await _send(request_finished, self.__class__)
            else:
                await _close(processing.result())
        finally:
            body_file.close()


# Receivers Django connects itself. Each acts on the connections, caches or URLconf of
# the thread it runs on; on the loop's thread, where the pass-through uses no database
# or cache and sets no URLconf, they find nothing to do.
_HOUSEKEEPING = frozenset({close_old_connections, reset_queries, close_caches, reset_urlconf})


def _sends_inline(signal: Signal, sender: type | None) -> bool:
    """Whether ``signal`` can be sent on the loop: only Django's housekeeping listens.

    Through ``asend`` those receivers are one thread hop (150-400 µs, more than the rest
    of the pass-through's own work) to tidy the shared sync thread's connections, which
    the pass-through never uses (its token check has a thread of its own that tidies
    its connection around each query). Any other receiver is called as Django calls it.
    """
    try:
        sync, asynchronous = signal._live_receivers(sender)
    except (AttributeError, TypeError, ValueError):  # another Django's internals
        return False
    return not asynchronous and all(receiver in _HOUSEKEEPING for receiver in sync)


async def _send(signal: Signal, sender: type, **named: Any) -> None:
    if _sends_inline(signal, sender):
        signal.send(sender=sender, **named)
    else:
        await signal.asend(sender=sender, **named)


async def _close(response: HttpResponseBase) -> None:
    """``response.close()``: its resources, then request_finished."""
    # The sender response.close() names: the handler's class (None for an early error).
    if _sends_inline(request_finished, getattr(response, "_handler_class", None)):
        response.close()
    else:
        await sync_to_async(response.close)()


def _converting(get_response: Respond) -> Respond:
    # convert_exception_to_response keeps an async callable async.
    return cast(Respond, convert_exception_to_response(get_response))


def _validating_host(get_response: Respond) -> Respond:
    async def validated(request: HttpRequest) -> HttpResponseBase:
        # What CommonMiddleware does first in Django's stack: raises DisallowedHost for a
        # host ALLOWED_HOSTS does not list.
        request.get_host()
        return await get_response(request)

    return validated


def _security_middleware(get_response: Respond) -> SecurityMiddleware | None:
    """The project's SecurityMiddleware (the first in MIDDLEWARE that is one), if any."""
    for dotted in settings.MIDDLEWARE:
        factory = import_string(dotted)
        if isinstance(factory, type) and issubclass(factory, SecurityMiddleware):
            return factory(get_response)
    return None


def _securing(get_response: Respond, security: SecurityMiddleware) -> Respond:
    async def secured(request: HttpRequest) -> HttpResponseBase:
        # Inline: both hooks only read settings and the request and set headers, so
        # they need none of the thread hops MiddlewareMixin would take under ASGI.
        redirect = security.process_request(request)
        response = redirect if redirect is not None else await get_response(request)
        # Typed for HttpResponse; it only sets headers, which a stream has too.
        return security.process_response(request, response)  # type: ignore[arg-type]

    return secured


class PassThroughRoutes:
    """Which requests Django would route to the pass-through's views.

    A path that does not end like one of ``ferrox_stats.proxy.urls``' routes is not,
    without more work; one that does is resolved with the project's URLconf (about
    10 µs, and the lean handler reuses the match), which gives every prefix and
    include for free, follows ``ROOT_URLCONF`` when it changes, and takes nothing
    where the pass-through is not mounted."""

    def __init__(self) -> None:
        from .proxy import urls

        self.views = frozenset(pattern.callback for pattern in urls.urlpatterns)
        self.endings = tuple(str(pattern.pattern) for pattern in urls.urlpatterns)

    def match(self, scope: Scope) -> ResolverMatch | None:
        """The match on one of the pass-through's views, if ``scope`` is routed to one."""
        path: str = scope["path"]
        if not path.endswith(self.endings):
            return None
        try:
            match = get_resolver().resolve(_path_info(path, get_script_prefix(scope)))
        except Exception:
            # No match (Resolver404), or a URLconf that fails: Django's own handler
            # answers it, with the project's middleware and error handling.
            return None
        return match if match.func in self.views else None


def _path_info(path: str, script_name: str) -> str:
    """The path Django resolves (``request.path_info``): ``path`` below the script
    prefix, as Django 6's ASGIRequest takes it."""
    base = script_name.rstrip("/")
    if base and (path.startswith(f"{base}/") or path == base):
        return path[len(base) :]
    return path


async def shut_down() -> None:
    """Drain the archive queue (within ARCHIVE_SHUTDOWN_DEADLINE_S), write the
    heartbeat's clean-shutdown mark, and close the pass-through's upstream connections."""
    # live.shutdown closes the sink, then stops the heartbeat; a process that never
    # recorded has nothing to stop (and builds no recorder here).
    await asyncio.to_thread(live.shutdown)
    # Clients exist only if the pass-through ran (it needs aiohttp, the [proxy] extra).
    clients = sys.modules.get("ferrox_stats.proxy.clients")
    if clients is not None:
        await clients.aclose_clients()


def wrap(
    app: App,
    *,
    lean_pass_through: bool = True,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> App:
    """``app`` with the lifespan protocol and, unless told otherwise, the requests Django
    would route to the pass-through's views (wherever the URLconf mounts them) served
    without the project's middleware but with host validation and its
    SecurityMiddleware. ``on_shutdown`` runs first at shutdown (stop your own
    background work there). Call it after Django is set up (``get_asgi_application()``).

    Raises ``ImproperlyConfigured`` with the system checks' messages when
    ``FERROX_STATS`` is invalid, so the server does not start (servers run no checks).
    """
    from .checks import validate_settings  # imports models: after django.setup()

    validate_settings()
    lean = (PassThroughHandler(), PassThroughRoutes()) if lean_pass_through else None

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send, on_shutdown)
        elif (
            lean is not None
            and scope["type"] == "http"
            and (match := lean[1].match(scope)) is not None
        ):
            await lean[0]({**scope, RESOLVED: match}, receive, send)
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
