"""The trivial views ``bench/served.py`` serves, their URLconf, and its WSGI/ASGI apps.

``plain`` answers a small JSON body; ``tracked`` answers the same body inside
``live.track(...)``, as the README tells a host to record a request (the tracker
begins, the request finishes with its status and token counts); ``prometheus`` records
it with prometheus_client instead, its label children looked up once (the fair anchor).
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path
from prometheus_client import CollectorRegistry, Counter, Histogram

from ferrox_stats import live

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "served_settings")

BODY = b'{"id":"cmpl-bench","object":"chat.completion","choices":[]}'
ROUTE = "/v1/chat/completions"
MODEL = "bench-model"


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse(BODY, content_type="application/json")


# ``FERROX_BENCH_GROUPS`` > 1: the tracked view cycles through that many (model, key)
# label sets (four models at most), i.e. as many rollup groups, as a fleet serving a
# few models to several teams would; 1 (the default) is one model and no key.
_GROUPS = int(os.environ.get("FERROX_BENCH_GROUPS", "1"))
LABELS = (
    [(f"{MODEL}-{i % 4}", f"team-{i}") for i in range(_GROUPS)] if _GROUPS > 1 else [(MODEL, None)]
)
_next_labels = itertools.cycle(LABELS).__next__


def tracked(request: HttpRequest) -> HttpResponse:
    model, key = _next_labels()
    with live.track(
        route=ROUTE,
        model=model,
        stream=False,
        client=request.META.get("REMOTE_ADDR"),
        via_api_key=key,
    ) as t:
        response = HttpResponse(BODY, content_type="application/json")
        t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
    return response


# The fair anchor: the same request recorded with prometheus_client, label children
# looked up once (a counter and the three histograms the tracker's times feed).
_registry = CollectorRegistry()
_labels = ["model", "route"]
_requests = Counter("requests", "Finished requests.", [*_labels, "status"], registry=_registry)
_ttft = Histogram("ttft_seconds", "Arrival to first token.", _labels, registry=_registry)
_duration = Histogram("duration_seconds", "Arrival to end.", _labels, registry=_registry)
_decode = Histogram("decode_seconds", "First token to last.", _labels, registry=_registry)
_bound = (
    _requests.labels(MODEL, ROUTE, "200"),
    _ttft.labels(MODEL, ROUTE),
    _duration.labels(MODEL, ROUTE),
    _decode.labels(MODEL, ROUTE),
)


def prometheus(request: HttpRequest) -> HttpResponse:
    requests, ttft, duration, decode = _bound
    # What bench/hot_path.py's prometheus variants do: three clock reads, four updates.
    arrived = time.monotonic()
    response = HttpResponse(BODY, content_type="application/json")
    first = time.monotonic()
    end = time.monotonic()
    requests.inc()
    ttft.observe(first - arrived)
    duration.observe(end - arrived)
    decode.observe(end - first)
    return response


# ``bench/served.py --profile``: each view's own thread CPU, summed over its requests
# and written to the server's log when the worker exits (the tracked view's minus the
# plain view's is the tracker's cost in situ).
TIME_VIEWS = os.environ.get("FERROX_BENCH_TIME_VIEWS") == "1"
_timed: dict[str, list[int]] = {"plain": [0, 0], "tracked": [0, 0], "prometheus": [0, 0]}


WARM_UP = 200  # requests per view and worker left uncounted: the recorder's build, imports


def timed(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    tally = _timed[view.__name__]
    clock = time.thread_time_ns
    seen = [0]

    def run(request: HttpRequest) -> HttpResponse:
        start = clock()
        response = view(request)
        elapsed = clock() - start
        seen[0] += 1
        if seen[0] > WARM_UP:
            tally[0] += elapsed
            tally[1] += 1
        return response

    return run


def _report_timed() -> None:
    for name, (ns, requests) in _timed.items():
        if requests:
            print(f"TIMED {name} {os.getpid()} {requests} {ns}", file=sys.stderr, flush=True)


# ``bench/served.py``: the cycle collector's thread CPU and collections per generation,
# in each worker from its GC_WARM_UP-th request on (the imports and the recorder's build
# before it bring full collections a long-lived worker pays once), written to the
# server's log when the worker exits. The counting wraps every view alike.
COUNT_COLLECTIONS = os.environ.get("FERROX_BENCH_GC") == "1"
GC_WARM_UP = 1000
_requests = [0]
_collections = {"ns": [0, 0, 0], "n": [0, 0, 0], "started": [0]}


def _on_collection(phase: str, info: dict[str, int]) -> None:
    # Called on the thread that collects, before and after each collection.
    if _requests[0] <= GC_WARM_UP:
        return
    now = time.thread_time_ns()
    if phase == "start":
        _collections["started"][0] = now
    elif _collections["started"][0]:
        generation = info["generation"]
        _collections["ns"][generation] += now - _collections["started"][0]
        _collections["n"][generation] += 1


def counted(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    def run(request: HttpRequest) -> HttpResponse:
        _requests[0] += 1
        return view(request)

    return run


def _report_collections() -> None:
    requests = max(0, _requests[0] - GC_WARM_UP)
    if requests:
        ns, n = _collections["ns"], _collections["n"]
        # One write of the whole line: both workers write to the same log at exit.
        line = f"COLLECTOR {os.getpid()} {requests} {' '.join(map(str, [*ns, *n]))}\n"
        os.write(sys.stderr.fileno(), line.encode())


_views: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "plain": plain,
    "tracked": tracked,
    "prometheus": prometheus,
}
if TIME_VIEWS:
    atexit.register(_report_timed)
    _views = {name: timed(view) for name, view in _views.items()}
if COUNT_COLLECTIONS:
    import gc

    gc.callbacks.append(_on_collection)
    atexit.register(_report_collections)
    _views = {name: counted(view) for name, view in _views.items()}
urlpatterns = [path(name, view) for name, view in _views.items()]


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
