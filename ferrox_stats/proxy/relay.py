"""One pass-through request: read and check it, forward it, record it, answer."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from .. import live
from ..conf import conf
from ..tracker import Tracker
from .accounting import StreamReader, take_body
from .auth import admit
from .clients import UPSTREAM_ERRORS, client_for
from .errors import (
    error_response,
    failure_code,
    upstream_failed,
    upstream_failure,
    upstream_refused,
    upstream_status_error,
)
from .stream import RelayStream
from .upstreams import Upstream, routing


@dataclass(frozen=True, slots=True)
class Route:
    """An inference endpoint: its public path (what records name) and its upstream path."""

    path: str
    upstream_path: str
    may_stream: bool
    # How the request's id starts: OpenAI's shape for the answer's ``id``.
    id_prefix: str


CHAT = Route("/v1/chat/completions", "chat/completions", may_stream=True, id_prefix="chatcmpl-")
COMPLETIONS = Route("/v1/completions", "completions", may_stream=True, id_prefix="cmpl-")
EMBEDDINGS = Route("/v1/embeddings", "embeddings", may_stream=False, id_prefix="req_")


async def relay(request: HttpRequest, route: Route) -> HttpResponse | StreamingHttpResponse:
    """Answer one inference request through its upstream, recording it on the way.

    Requests refused for their credentials are not recorded: nobody is accountable
    for them. Every other one is, whatever its end.
    """
    caller = await admit(request, "POST")
    if isinstance(caller, JsonResponse):
        return caller
    # Unique per request whatever ids engines use; one id for X-Request-Id, the
    # answer's "id" (the upstream's is replaced, see accounting) and the record.
    request_id = f"{route.id_prefix}{uuid.uuid4().hex}"
    tracker = live.track(
        route=route.path,
        request_id=request_id,
        client=request.META.get("REMOTE_ADDR") or None,
        via_api_key=caller.label if caller is not None else None,
    ).begin()
    try:
        response = await _forward(request, route, tracker)
    except BaseException as exc:  # cancelled (the client left) or a bug: end it as such
        tracker.close(exc)
        raise
    response["X-Request-Id"] = request_id
    return response


async def _forward(
    request: HttpRequest, route: Route, tracker: Tracker
) -> HttpResponse | StreamingHttpResponse:
    body = _read_body(request)
    if isinstance(body, JsonResponse):
        tracker.finish(status=body.status_code)
        return body
    document, raw = body
    model = document["model"]
    tracker.model = model
    stream = route.may_stream and document.get("stream") is True
    tracker.stream = stream
    upstream = routing().for_model(model)
    if upstream is None:
        tracker.finish(status=404)
        return error_response(
            404,
            f"The model {model!r} does not exist or is not served here.",
            param="model",
            code="model_not_found",
        )
    content, forward_usage = _upstream_body(document, raw, upstream, stream)
    try:
        answer = await client_for(upstream).post(
            upstream.url(route.upstream_path),
            data=content,
            headers=_upstream_headers(upstream, tracker.request_id, stream),
        )
    except UPSTREAM_ERRORS as exc:  # timeouts included
        return _failed(tracker, upstream, exc)
    tracker.status = answer.status
    content_type = answer.headers.get("Content-Type", "application/json")
    # An engine that answers a stream request with a whole JSON body is relayed whole.
    if stream and answer.status == 200 and content_type.startswith("text/event-stream"):
        relayed = StreamingHttpResponse(
            RelayStream(tracker, answer, StreamReader(tracker, forward_usage=forward_usage)),
            content_type=content_type,
        )
        relayed["Cache-Control"] = "no-cache"
        relayed["X-Accel-Buffering"] = "no"  # nginx in front must not hold events back
        return relayed
    try:
        whole = await answer.read()
    except UPSTREAM_ERRORS as exc:  # the answer broke off, or went silent, mid-body
        answer.close()
        return _failed(tracker, upstream, exc)
    finally:
        answer.release()
    return _whole_answer(tracker, route, upstream, answer.status, whole, content_type)


def _failed(tracker: Tracker, upstream: Upstream, exc: BaseException) -> JsonResponse:
    failed = upstream_failed(upstream, exc)
    tracker.finish(status=failed.status_code, error=failure_code(exc))
    return failed


def _whole_answer(
    tracker: Tracker,
    route: Route,
    upstream: Upstream,
    status: int,
    content: bytes,
    content_type: str,
) -> HttpResponse:
    if status < 400:
        body = take_body(tracker, content, embeddings=route is EMBEDDINGS)
        tracker.finish()
        return HttpResponse(body, status=status, content_type=content_type)
    if status in (401, 403):
        # The upstream refused the pass-through's own credentials: passed on, the client
        # would take it for a verdict on its key.
        tracker.finish(status=502, error=f"upstream_{status}")
        return upstream_refused(upstream, status)
    tracker.finish(error=upstream_status_error(status))
    if _is_openai_error(content):
        relayed = HttpResponse(content, status=status, content_type=content_type)
    else:
        # Not an OpenAI error object (a proxy's HTML page, say): say what happened instead.
        relayed = error_response(
            status,
            f"The upstream {upstream.name!r} answered {status}.",
            "server_error" if status >= 500 else "invalid_request_error",
            code=f"upstream_{status}",
        )
    if status >= 500:
        return upstream_failure(relayed, upstream, f"answered {status}")
    return relayed


def _is_openai_error(body: bytes) -> bool:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(document, dict) and isinstance(document.get("error"), dict)


def _too_big(limit: int) -> JsonResponse:
    # Made when it is the answer: a JsonResponse is a few dozen µs, of every request.
    return error_response(
        413, f"The request body is larger than {limit} bytes.", code="request_too_large"
    )


def _read_body(request: HttpRequest) -> tuple[dict[str, Any], bytes] | JsonResponse:
    """The request's JSON object and its bytes, or the 4xx that refuses it."""
    limit = conf.PROXY_MAX_BODY_BYTES
    declared = request.headers.get("Content-Length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return _too_big(limit)
    # read(), not .body: .body applies DATA_UPLOAD_MAX_MEMORY_SIZE, not our limit.
    raw = request.read(limit + 1)
    if len(raw) > limit:
        return _too_big(limit)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        return error_response(400, "We could not parse the JSON body of your request.")
    if not isinstance(document, dict):
        return error_response(400, "The request body must be a JSON object.")
    model = document.get("model")
    if not isinstance(model, str) or not model:
        return error_response(400, "You must provide a model parameter.", param="model")
    if document.get("stream") not in (None, True, False):
        return error_response(400, "'stream' must be true or false.", param="stream")
    if not isinstance(document.get("stream_options", {}), dict | None):
        return error_response(400, "'stream_options' must be an object.", param="stream_options")
    return document, raw


def _upstream_body(
    document: dict[str, Any], raw: bytes, upstream: Upstream, stream: bool
) -> tuple[bytes, bool]:
    """What to send upstream, and whether a usage chunk in the answer goes on to the client.

    A stream asks for usage (exact token counts) unless the client already did or the
    upstream cannot; the usage chunk then stays here. Otherwise the client's bytes go
    on as they came.
    """
    options = document.get("stream_options") or {}
    if not stream or not upstream.stream_usage or options.get("include_usage") is True:
        return raw, True
    asked = {**document, "stream_options": {**options, "include_usage": True}}
    return json.dumps(asked, ensure_ascii=False, separators=(",", ":")).encode(), False


def _upstream_headers(upstream: Upstream, request_id: str | None, stream: bool) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        # Compressed events could not be relayed one by one.
        "Accept-Encoding": "identity",
    }
    if request_id:
        headers["X-Request-Id"] = request_id
    if upstream.api_key:
        headers["Authorization"] = f"Bearer {upstream.api_key}"
    return headers
