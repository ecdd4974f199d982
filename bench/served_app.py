"""The trivial views ``bench/served.py`` serves, their URLconf, and its WSGI/ASGI apps.

``plain`` answers a small JSON body; ``tracked`` answers the same body inside
``live.track(...)``, as the README tells a host to record a request (the tracker
begins, the request finishes with its status and token counts).
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path

from ferrox_stats import live

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "served_settings")

BODY = b'{"id":"cmpl-bench","object":"chat.completion","choices":[]}'
ROUTE = "/v1/chat/completions"
MODEL = "bench-model"


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse(BODY, content_type="application/json")


def tracked(request: HttpRequest) -> HttpResponse:
    with live.track(
        route=ROUTE, model=MODEL, stream=False, client=request.META.get("REMOTE_ADDR")
    ) as t:
        response = HttpResponse(BODY, content_type="application/json")
        t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
    return response


# ``bench/served.py --profile``: each view's own thread CPU, summed over its requests
# and written to the server's log when the worker exits (the tracked view's minus the
# plain view's is the tracker's cost in situ).
TIME_VIEWS = os.environ.get("FERROX_BENCH_TIME_VIEWS") == "1"
_timed: dict[str, list[int]] = {"plain": [0, 0], "tracked": [0, 0]}


def timed(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    tally = _timed[view.__name__]
    clock = time.thread_time_ns

    def run(request: HttpRequest) -> HttpResponse:
        start = clock()
        response = view(request)
        tally[0] += clock() - start
        tally[1] += 1
        return response

    return run


def _report_timed() -> None:
    for name, (ns, requests) in _timed.items():
        if requests:
            print(f"TIMED {name} {os.getpid()} {requests} {ns}", file=sys.stderr, flush=True)


if TIME_VIEWS:
    atexit.register(_report_timed)
    urlpatterns = [path("plain", timed(plain)), path("tracked", timed(tracked))]
else:
    urlpatterns = [path("plain", plain), path("tracked", tracked)]


def wsgi() -> object:
    """gunicorn's sync workers: ``gunicorn 'served_app:wsgi()'``."""
    from django.core.wsgi import get_wsgi_application

    from ferrox_stats.wsgi import wrap

    return wrap(get_wsgi_application())


def asgi() -> object:
    """uvicorn's workers, as the README serves: ``ferrox_stats.asgi.wrap`` around Django."""
    from django.core.asgi import get_asgi_application

    from ferrox_stats.asgi import wrap

    return wrap(get_asgi_application())
