"""The urlconf of ``bench/api_poll.py``'s server (and of its in-process part).

Importing it fills this process's ring (in each worker: Django imports the urlconf at
its first request, after the fork) with ``bench/api.py``'s seeded records, the same in
every worker, and builds the baseline's document once: the page ``/v1/requests``
answers for ``?since=TOTAL-100&limit=100``, as 100 prebuilt dicts.
"""

from __future__ import annotations

from typing import Any

from api import fill_ring
from django.http import HttpResponse, JsonResponse
from django.urls import include, path

from ferrox_stats import documents
from ferrox_stats.api import wire
from ferrox_stats.api.views import RequestsView

PAGE = 100
FILLED = 1024 + 300  # the ring wrapped: it holds the last 1024

recorder = fill_ring(FILLED)
TOTAL = recorder.stats.recorded_total
QUERY = f"?since={TOTAL - PAGE}&limit={PAGE}"
PREBUILT = documents.ring_page(recorder.stats.since(TOTAL - PAGE, PAGE))


def json_response(request: Any) -> JsonResponse:
    """The baseline: a plain view answering ``JsonResponse`` of the prebuilt document."""
    return JsonResponse(PREBUILT)


def floor(request: Any) -> HttpResponse:
    """What the server, URL resolution and middleware cost before any view does work."""
    return HttpResponse(b"{}", content_type="application/json")


requests_view = RequestsView.as_view()


def cold(request: Any) -> Any:
    """``/v1/requests`` with no row's JSON kept: every row encoded, as on a first poll."""
    wire.ROW_JSON.clear()
    return requests_view(request)


urlpatterns = [
    path("control/telemetry/", include("ferrox_stats.urls")),
    path("bench/json", json_response),
    path("bench/floor", floor),
    path("bench/cold/v1/requests", cold),
]
