"""``GET metrics``: the host's telemetry for Prometheus (``ferrox_stats.metrics``).

Closed like every endpoint (a read-scoped token, a session with the dashboard
permission, or ``PUBLIC_ENDPOINTS``), and it never asks the database itself: with a
token this process has confirmed, a scrape answers through a database outage.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request

from .. import metrics
from .base import FerroxView, documented
from .params import only_known
from .views import ERRORS

__all__ = ["MetricsView"]


class TextWhateverAccepted(DefaultContentNegotiation):
    """The exposition is text whatever ``Accept`` asks (Prometheus offers OpenMetrics
    first and takes this too); an error keeps the API's JSON shape."""

    def select_renderer(self, request: Request, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class MetricsView(FerroxView):
    endpoint_name = "metrics"
    content_negotiation_class = TextWhateverAccepted

    @documented(
        summary="This host's metrics in Prometheus's text format (all its workers)",
        description="OpenTelemetry GenAI names and ferrox_stats_* (and vLLM's names when "
        "METRICS_FAMILIES says so), summed over every process of the host, including "
        "those that ended. Answers from files on the host, never from the database.",
        operation_id="metrics",
        responses={(200, "text/plain"): OpenApiTypes.STR, **ERRORS},
    )
    def get(self, request: Request) -> HttpResponse:
        only_known(request, ())
        return HttpResponse(metrics.scrape(), content_type=metrics.CONTENT_TYPE)
