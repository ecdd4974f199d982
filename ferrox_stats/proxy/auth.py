"""Who may call the pass-through (an API token with the infer scope), and how."""

from __future__ import annotations

import asyncio

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, JsonResponse

from .. import auth_failures, tokens
from ..breaker import Unavailable
from ..conf import conf
from ..models import ApiToken
from .errors import database_unavailable, error_response, too_many_failures


async def admit(request: HttpRequest, method: str) -> ApiToken | JsonResponse | None:
    """The caller (see ``authorize``), or the error that refuses this request: the wrong
    server, the wrong method, the wrong key."""
    if not isinstance(request, ASGIRequest):
        # Under WSGI an async view gets a new event loop per request: no pooled
        # connection would survive it and a stream would be buffered whole.
        return error_response(
            501,
            "The pass-through needs an ASGI server (uvicorn, daphne, hypercorn).",
            "server_error",
            code="asgi_required",
        )
    if request.method != method:
        return error_response(405, f"{request.method} is not allowed here; use {method}.")
    return await authorize(request)


async def authorize(request: HttpRequest) -> ApiToken | JsonResponse | None:
    """The caller's token, ``None`` for an anonymous caller the settings let in, or the
    error to answer with. A key that is sent is always checked, even when not required."""
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        if not conf.PROXY_REQUIRE_KEY:
            return None
        return error_response(
            401,
            "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
            code="missing_api_key",
        )
    try:
        checked = tokens.recently_checked(secret) or await _checked(
            secret, auth_failures.client_address(request)
        )
    except Unavailable as exc:
        return database_unavailable(exc.retry_after_s)
    if isinstance(checked, JsonResponse):
        return checked
    token = checked
    if token is None:
        # Never echo what was sent: it may be someone's real key.
        return error_response(401, "Incorrect API key provided.", code="invalid_api_key")
    if not token.can_infer:
        return error_response(
            403,
            f"The API key {token.label!r} may not call the pass-through (no infer scope).",
            "permission_error",
            code="insufficient_scope",
        )
    return token


# Checks under way, by event loop and digest, with when each began: a burst of
# requests with a key this process has not checked yet makes one database query, not
# one per request.
_checks: dict[tuple[int, str], tuple[float, asyncio.Future[ApiToken | None]]] = {}


async def _checked(secret: str, address: str) -> ApiToken | JsonResponse | None:
    """The check of ``secret``: joined when one is under way, else started, charged to
    ``address``'s failure budget (a burst with one new key is one attempt, not one per
    request) and settled when it ends; a 429 when the address is over its budget."""
    loop = asyncio.get_running_loop()
    key = (id(loop), tokens.hash_secret(secret))
    found = _checks.get(key)
    if found is None:
        if (refused := auth_failures.admit(address, secret)) is not None:
            return too_many_failures(refused)
        found = (
            loop.time(),
            asyncio.ensure_future(asyncio.wrap_future(tokens.check_in_thread(secret))),
        )
        _checks[key] = found
        found[1].add_done_callback(lambda _: _checks.pop(key, None))
        found[1].add_done_callback(lambda done: _settle(address, done))
    began, check = found
    # A lookup unanswered after LOOKUP_TIMEOUT_S means a stalled database; a caller
    # with a last good answer waits only STALE_WAIT_S of that.
    give_up_at = began + tokens.LOOKUP_TIMEOUT_S
    last_good = tokens.last_good(secret)
    wait = give_up_at - loop.time()
    if last_good is not None:
        wait = min(wait, tokens.STALE_WAIT_S)
    # Shielded: a caller that leaves must not cancel the check the others wait on.
    try:
        return await asyncio.wait_for(asyncio.shield(check), max(0.0, wait))
    except TimeoutError:
        if last_good is not None and loop.time() < give_up_at:
            return last_good  # slow, not yet taken as down: the lookup goes on
        # Answer without the database; the lookup finishes on its own.
        return tokens.unanswered(secret)


def _settle(address: str, done: asyncio.Future[ApiToken | None]) -> None:
    """Tell the failure budget how a check ended: a key that verified refunds its charge,
    one that did not keeps it, and one the database could not answer is not the
    caller's failure (refunded)."""
    if done.cancelled():
        return
    exc = done.exception()
    if isinstance(exc, Unavailable):
        auth_failures.refund(address)
    elif exc is None:
        auth_failures.settle(address, done.result())
