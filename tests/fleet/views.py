"""The host's own views: which process answered, and a request served in process and
recorded with ``ferrox_stats.live.track`` (the in-process tracker)."""

from __future__ import annotations

import os

from django.http import HttpRequest, JsonResponse

from ferrox_stats import live

TRACKED_ROUTE = "/host/tracked"
TRACKED_MODEL = "tracked-model"


def whoami(request: HttpRequest) -> JsonResponse:
    """This process's pid and recorder instance (building the recorder, and with it the
    heartbeat, as the first tracked request would)."""
    return JsonResponse({"pid": os.getpid(), "instance": live.get_recorder().instance})


def tracked(request: HttpRequest) -> JsonResponse:
    """A request "served" here: ``?id=`` is its request id, ``prompt`` and
    ``completion`` its token counts; answered with the instance that recorded it."""
    request_id = request.GET["id"]
    prompt, completion = int(request.GET["prompt"]), int(request.GET["completion"])
    with live.track(route=TRACKED_ROUTE, model=TRACKED_MODEL, request_id=request_id) as t:
        for _ in range(completion):
            t.tokens(completion=1)
        t.finish(status=200, finish_reason="stop", prompt_tokens=prompt)
    return JsonResponse({"pid": os.getpid(), "instance": live.get_recorder().instance})
