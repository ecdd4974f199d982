"""``GET /v1/models``: what the upstreams serve, as one OpenAI model list."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from .auth import admit
from .clients import UPSTREAM_ERRORS, client_for
from .errors import upstream_failed, upstream_failure, upstream_refused
from .upstreams import Upstream, routing

logger = logging.getLogger(__name__)

# What leaves one upstream's models out of a merged list: no answer, or not a list.
_LEFT_OUT: tuple[type[BaseException], ...] = (*UPSTREAM_ERRORS, ValueError, AttributeError)


async def list_models(request: HttpRequest) -> HttpResponse:
    """One upstream's list is passed on as it is; several are merged (first listing of a
    model wins), leaving out models another upstream is routed to and upstreams that
    fail (logged). Not recorded: it is not inference."""
    caller = await admit(request, "GET")
    if isinstance(caller, JsonResponse):
        return caller
    routes = routing()
    upstreams = routes.upstreams
    if not upstreams:
        return JsonResponse({"object": "list", "data": []})
    if len(upstreams) == 1:
        return await _passed_on(upstreams[0])
    answers = await asyncio.gather(*(_models_of(upstream) for upstream in upstreams))
    merged: dict[str, dict[str, Any]] = {}
    for upstream, models in zip(upstreams, answers, strict=True):
        for model in models:
            name = model.get("id")
            if isinstance(name, str) and name not in merged and routes.for_model(name) == upstream:
                merged[name] = model
    return JsonResponse({"object": "list", "data": list(merged.values())})


async def _passed_on(upstream: Upstream) -> HttpResponse:
    try:
        status, content_type, body = await _get_models(upstream)
    except UPSTREAM_ERRORS as exc:
        return upstream_failed(upstream, exc)
    if status in (401, 403):
        return upstream_refused(upstream, status)
    passed = HttpResponse(body, status=status, content_type=content_type)
    if status >= 500:
        return upstream_failure(passed, upstream, f"answered {status}")
    return passed


async def _get_models(upstream: Upstream) -> tuple[int, str, bytes]:
    """The upstream's answer to ``GET models``: status, content type, body."""
    url, headers = upstream.url("models"), _auth(upstream)
    async with client_for(upstream).get(url, headers=headers) as answer:
        body = await answer.read()
    return answer.status, answer.headers.get("Content-Type", "application/json"), body


async def _models_of(upstream: Upstream) -> list[dict[str, Any]]:
    try:
        status, _, body = await _get_models(upstream)
        if status >= 400:
            raise ValueError(f"answered {status}")
        data = json.loads(body).get("data")
    except _LEFT_OUT as exc:
        logger.warning("models of upstream %r left out: %s", upstream.name, type(exc).__name__)
        return []
    return [model for model in data if isinstance(model, dict)] if isinstance(data, list) else []


def _auth(upstream: Upstream) -> dict[str, str]:
    return {"Authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}
