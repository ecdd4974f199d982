"""The pass-through's routes where aiohttp (``ferrox-stats[proxy]``) is not installed.

Including ``ferrox_stats.proxy.urls`` then still works (the URLconf loads, the rest of
the site runs); check reports ``ferrox_stats.E070``, and each route answers 503 in
OpenAI's error shape, naming the fix, rather than a 500 from an ImportError.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

__all__ = ["MESSAGE", "chat_completions", "completions", "embeddings", "models"]

MESSAGE = (
    "The pass-through is not available: it needs aiohttp. "
    "Install it with: pip install 'ferrox-stats[proxy]'."
)


@csrf_exempt
async def unavailable(request: HttpRequest) -> HttpResponse:
    body = {
        "error": {
            "message": MESSAGE,
            "type": "server_error",
            "param": None,
            "code": "pass_through_unavailable",
        }
    }
    return JsonResponse(body, status=503)


chat_completions = completions = embeddings = models = unavailable
