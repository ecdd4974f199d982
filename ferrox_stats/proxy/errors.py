"""OpenAI-style errors, and the short ``error`` values the pass-through records."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, TypeVar

from django.http import HttpResponse, JsonResponse

if TYPE_CHECKING:
    from .upstreams import Upstream

logger = logging.getLogger("ferrox_stats.proxy")

R = TypeVar("R", bound=HttpResponse)

# What a record's ``error`` says when the upstream, not the client, failed it.
UPSTREAM_TIMEOUT = "upstream_timeout"  # silent past PROXY_READ_TIMEOUT_S, or no connection
UPSTREAM_UNREACHABLE = "upstream_unreachable"  # connection refused, reset, DNS …
UPSTREAM_BROKEN = "upstream_broken_stream"  # a stream that ended without its [DONE]
UPSTREAM_STREAM_ERROR = "upstream_stream_error"  # an error event inside a stream


def upstream_status_error(status: int) -> str | None:
    """The error recorded for an upstream answer: 5xx is the engine's failure; a 4xx
    is the client's request, recorded by its status alone."""
    return f"upstream_{status}" if status >= 500 else None


def error_body(
    message: str, type_: str, *, code: str | None = None, param: str | None = None
) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    *,
    code: str | None = None,
    param: str | None = None,
) -> JsonResponse:
    """An OpenAI-shaped error, as the SDKs parse it into ``APIStatusError``."""
    return JsonResponse(error_body(message, type_, code=code, param=param), status=status)


def too_many_failures(wait: int) -> JsonResponse:
    """429 for an address over ``AUTH_FAILURE_RATE``, shaped like OpenAI's rate limit
    (the SDKs raise ``RateLimitError`` and honour ``Retry-After``)."""
    response = error_response(
        429,
        f"Too many failed authentications from this address; retry in {wait} s.",
        "requests",
        code="rate_limit_exceeded",
    )
    response["Retry-After"] = str(wait)
    return response


def database_unavailable(retry_after_s: int) -> JsonResponse:
    """503 with ``Retry-After``: the key could not be checked, the database being down."""
    response = error_response(
        503,
        "The API key cannot be checked right now (the database is unreachable); retry later.",
        "server_error",
        code="database_unavailable",
    )
    response["Retry-After"] = str(retry_after_s)
    # Not one ERROR per refused request: ferrox_stats.tokens logs the outage once.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def sse_error_event(message: str, code: str) -> bytes:
    """An error inside a stream already under way: the SDKs raise it as ``APIError``."""
    body = error_body(message, "server_error", code=code)
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def upstream_failure(response: R, upstream: Upstream, what: str) -> R:
    """``response``, our answer to an upstream's failure, logged as that: a WARNING on
    ``ferrox_stats.proxy`` naming the upstream and what it did, instead of Django's
    ERROR "Internal Server Error: …", which then stays for our own failures."""
    logger.warning("upstream %r %s -> %d to the client", upstream.name, what, response.status_code)
    # django.request logs every response >= 500 as an ERROR unless it is marked as
    # logged already (django.utils.log.log_response, Django 5.2 and 6.0 alike).
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def upstream_refused(upstream: Upstream, status: int) -> JsonResponse:
    """The upstream answered 401/403 to the pass-through's own credentials."""
    response = error_response(
        502,
        f"The upstream {upstream.name!r} refused the pass-through's credentials ({status}); "
        "its API_KEY in PROXY_UPSTREAMS needs fixing.",
        "server_error",
        code="upstream_auth_failed",
    )
    return upstream_failure(response, upstream, f"refused our credentials ({status})")


def failure_code(exc: BaseException) -> str:
    """What a record's ``error`` says when the exchange with the upstream failed
    (one of ``clients.UPSTREAM_ERRORS``): aiohttp's timeouts are ``TimeoutError``s."""
    return UPSTREAM_TIMEOUT if isinstance(exc, TimeoutError) else UPSTREAM_UNREACHABLE


def upstream_failed(upstream: Upstream, exc: BaseException) -> JsonResponse:
    """504 for an upstream silent too long (or no connection in time), else 502."""
    if isinstance(exc, TimeoutError):
        status, message = 504, f"The upstream {upstream.name!r} did not answer in time."
        what = "did not answer in time"
    else:
        status, message = 502, f"The upstream {upstream.name!r} could not be reached."
        what = "could not be reached"
    response = error_response(status, message, "server_error", code=failure_code(exc))
    return upstream_failure(response, upstream, f"{what} ({type(exc).__name__})")
