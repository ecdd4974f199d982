"""The pass-through's views: async, under ASGI; CSRF-exempt because callers
authenticate with a bearer key, never a session cookie."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from .models_list import list_models
from .relay import CHAT, COMPLETIONS, EMBEDDINGS, relay

__all__ = ["chat_completions", "completions", "embeddings", "models"]


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return await relay(request, CHAT)


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return await relay(request, COMPLETIONS)


@csrf_exempt
async def embeddings(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return await relay(request, EMBEDDINGS)


@csrf_exempt  # a POST gets the pass-through's 405, not CSRF's HTML 403
async def models(request: HttpRequest) -> HttpResponse:
    return await list_models(request)
