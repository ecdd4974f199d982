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
hops ``MiddlewareMixin`` takes under ASGI.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponseBase
from django.middleware.security import SecurityMiddleware
from django.urls import ResolverMatch, get_resolver
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
        # sync work is short (signals; a token check on a cache miss): it shares asgiref's
        # one thread-sensitive executor instead.
        await self.handle(scope, receive, send)


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
    # Clients exist only if the pass-through ran (it needs httpx, the [proxy] extra).
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
