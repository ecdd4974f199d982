"""The REST API: the ring's since-cursor, live stats, the archive's history, ingest.

Every view names its scope and endpoint for ``EndpointAccess``; every answer is built
by ``documents``, ``archive`` or ``ingest``, never here.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.http import StreamingHttpResponse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import access, documents, fleet, live
from ..archive import export
from ..archive.queries import CommitCursor, Cursor
from ..conf import conf
from ..core.requests import Record
from ..core.ring import Page
from ..ingest import ACCEPTED, DUPLICATE, REJECTED, describe_name, ingest, string_problem
from ..models import ApiToken, FinishedRequest
from . import errors, serializers, wire
from .base import FerroxView, documented
from .filters import HistoryFilter
from .params import clamped_limit, non_negative_int, only_known
from .parsers import BoundedJSONParser
from .permissions import INGEST
from .throttling import FerroxScopedRateThrottle

ERRORS = {
    code: OpenApiResponse(serializers.ErrorSerializer, description=text)
    for code, text in {
        400: "A parameter or the body is invalid; the error names it.",
        401: "No or an invalid token.",
        403: "Authenticated, but without this endpoint's scope.",
        429: "Throttled: this endpoint's rate, or too many failed authentications from "
        "this address; Retry-After says when to try again.",
        503: "The database is unreachable (credentials or archive); retry after Retry-After.",
    }.items()
}


SINCE = OpenApiParameter("since", int, description="Cursor: the `next_cursor` of the last poll.")
LIMIT = OpenApiParameter("limit", int, description="Rows at most; clamped to [1, MAX_PAGE].")
INSTANCE = OpenApiParameter(
    "instance", str, description="The instance your cursor came from; a different one resets."
)


RING_PARAMETERS = ("since", "limit", "instance")


def _ring_page(request: Request, recorder: live.Recorder) -> Any:
    only_known(request, RING_PARAMETERS)
    since = non_negative_int(request, "since", 0)
    limit = clamped_limit(request, conf.REQUESTS_DEFAULT_LIMIT, recorder.stats.max_page)
    return recorder.stats.since(since, limit, request.query_params.get("instance") or None)


class RequestsView(FerroxView):
    endpoint_name = "requests"
    renderer_classes = [wire.RingPageRenderer]  # each row's JSON encoded once

    @documented(
        summary="Finished requests since a cursor (this process's ring)",
        description=(
            "One process's ring of recent finished requests: whichever worker serves "
            "the poll answers with its own ring and names itself in `instance`. Behind a "
            "load balancer (several workers or hosts) successive polls reach different "
            "processes, so following `next_cursor` here neither sees the fleet nor sees "
            "each request once. To follow the whole fleet, poll "
            "`v1/history?order=committed` with its `next_cursor` (every archived request "
            "once, in commit order, a flush interval behind); for the fleet's numbers, "
            "`v1/fleet`."
        ),
        operation_id="requests",
        parameters=[SINCE, LIMIT, INSTANCE],
        responses={200: serializers.RingPageSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        recorder = live.get_recorder()
        page = _ring_page(request, recorder)
        return Response(wire.RingDocument(recorder.stats, page, documents.ring_page))


class StatsView(FerroxView):
    endpoint_name = "stats"

    @documented(
        summary="Live counters, throughput, pool occupancy and archive health",
        operation_id="stats",
        responses={200: serializers.StatsSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(documents.stats(live.get_recorder().snapshot()))


class AdminStatsView(FerroxView):
    endpoint_name = "admin_stats"
    renderer_classes = [wire.RingPageRenderer]  # each row's JSON encoded once

    @documented(
        summary="What the dashboard polls: a ring page, summaries and live counters",
        operation_id="admin_stats",
        parameters=[SINCE, LIMIT, INSTANCE],
        responses={200: serializers.AdminStatsSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        recorder = live.get_recorder()
        page = _ring_page(request, recorder)
        snapshot = recorder.snapshot()

        def document(page: Page[Record]) -> dict[str, Any]:
            return documents.admin_stats(page, snapshot)

        return Response(wire.RingDocument(recorder.stats, page, document))


class FleetView(FerroxView):
    endpoint_name = "fleet"

    @documented(
        summary="The whole fleet: every instance's last heartbeat, live ones summed",
        operation_id="fleet",
        parameters=[
            OpenApiParameter(
                "instance",
                str,
                description="Narrow `totals` to this instance (any state); the list stays whole.",
            )
        ],
        responses={
            200: serializers.FleetSerializer,
            404: OpenApiResponse(
                serializers.ErrorSerializer, description="No heartbeat from that instance."
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request) -> Response:
        only_known(request, ["instance"])
        instance = request.query_params.get("instance") or None
        try:
            document = fleet.current(instance)
        except fleet.UnknownInstance:
            raise NotFound("No instance with this id has a heartbeat.") from None
        return Response(document)


def _filtered(request: Request, view: APIView) -> Any:
    """The archive, narrowed by the history filters in the query string."""
    queryset = FinishedRequest.objects.using(conf.ARCHIVE_DATABASE).all()
    if not HistoryFilter.base_filters.keys() & request.query_params.keys():
        # No filter asked: building the filterset costs a quarter of a page (bench/api.py).
        return queryset
    filterset = HistoryFilter(request.query_params, queryset=queryset, request=request)
    if not filterset.is_valid():
        raise ValidationError(filterset.errors)
    return filterset.qs


def _priced(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries with their ``cost`` at the prices in force when each finished
    (``FERROX_STATS["PRICES"]``; None without a price or without token counts)."""
    prices = conf.PRICE_BOOK
    for entry in entries:
        entry["cost"] = prices.token_cost(
            entry["model"],
            entry["at_ms"],
            entry["prompt_tokens"],
            entry["completion_tokens"],
            entry["cached_tokens"],
        )
    return entries


# Each order and the shared query that serves it.
ORDERS = {"newest": "newest_first", "oldest": "oldest_first", "committed": "committed_after"}

HISTORY_PARAMETERS = [
    OpenApiParameter("cursor", str, description="`next_cursor` of the previous page."),
    OpenApiParameter(
        "order",
        str,
        enum=list(ORDERS),
        description=(
            "newest (default) or oldest first by finish time; or committed: the order rows "
            "became visible, for a poller that follows the archive's tail and must never "
            "skip a row that commits late (its next_cursor is never null once it saw a row)."
        ),
    ),
    LIMIT,
]


class HistoryView(FerroxView):
    session_permissions = (access.ARCHIVE,)
    endpoint_name = "history"
    # Only read by drf-spectacular, which documents a filterset through its backend
    # and finds the filterset's model through the view's queryset.
    filter_backends = [DjangoFilterBackend]
    queryset = FinishedRequest.objects.none()
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_history"
    filterset_class = HistoryFilter  # read by drf-spectacular to document the filters

    @documented(
        summary="Archived requests, fleet-wide, a keyset page at a time",
        operation_id="history_list",
        parameters=HISTORY_PARAMETERS,
        filters=True,
        responses={200: serializers.HistoryPageSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        only_known(request, [*HistoryFilter.base_filters, "cursor", "order", "limit"])
        order = request.query_params.get("order", "newest")
        if order not in ORDERS:
            raise ValidationError({"order": ["order must be 'newest', 'oldest' or 'committed'."]})
        raw_cursor = request.query_params.get("cursor")
        parse = CommitCursor.decode if order == "committed" else Cursor.decode
        try:
            cursor = parse(raw_cursor) if raw_cursor else None
        except ValueError as exc:
            raise ValidationError({"cursor": [str(exc)]}) from None
        limit = clamped_limit(request, conf.HISTORY_DEFAULT_LIMIT, conf.HISTORY_MAX_PAGE)
        page = getattr(_filtered(request, self), ORDERS[order])(cursor, limit)
        return Response(
            {
                "entries": _priced(page.entries),
                "next_cursor": page.next_cursor.encode() if page.next_cursor else None,
            }
        )


class HistoryDetailView(FerroxView):
    session_permissions = (access.ARCHIVE,)
    endpoint_name = "history_detail"
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_history"

    @documented(
        summary="One archived request by the id its response carried",
        operation_id="history_detail",
        responses={
            200: serializers.HistoryDetailSerializer,
            404: OpenApiResponse(serializers.ErrorSerializer, description="Not archived."),
            **ERRORS,
        },
    )
    def get(self, request: Request, request_id: str) -> Response:
        if string_problem("request_id", request_id, 200) is not None:
            # No archived id can hold it (and PostgreSQL refuses NUL in a parameter).
            raise NotFound("No archived request has this request_id.")
        entries = FinishedRequest.objects.using(conf.ARCHIVE_DATABASE).by_request_id(request_id)
        if not entries:
            raise NotFound("No archived request has this request_id.")
        return Response({"entries": _priced(entries)})


class FormatIsOurs(DefaultContentNegotiation):
    """Leaves ``?format=`` to the export (DRF would read it as a renderer choice)."""

    # Duck-typed: the one setting DefaultContentNegotiation reads.
    settings = SimpleNamespace(URL_FORMAT_OVERRIDE=None)  # type: ignore[assignment]


class HistoryExportView(FerroxView):
    session_permissions = (access.ARCHIVE,)
    endpoint_name = "history_export"
    content_negotiation_class = FormatIsOurs
    filter_backends = [DjangoFilterBackend]
    filterset_class = HistoryFilter
    queryset = FinishedRequest.objects.none()
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_history"

    @documented(
        summary="Archived requests in a filtered range, streamed as CSV or JSON Lines",
        operation_id="history_export",
        parameters=[OpenApiParameter("format", str, enum=["csv", "jsonl"], required=True)],
        filters=True,
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/jsonl"): OpenApiTypes.STR,
            **ERRORS,
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        only_known(request, [*HistoryFilter.base_filters, "format"])
        fmt = request.query_params.get("format")
        if fmt not in export.CONTENT_TYPES:
            raise ValidationError({"format": ["format must be 'csv' or 'jsonl'."]})
        entries = _filtered(request, self).order_by("finished_at", "id").entries()
        response = StreamingHttpResponse(
            export.lines(entries, fmt), content_type=export.CONTENT_TYPES[fmt]
        )
        response["Content-Disposition"] = f'attachment; filename="ferrox-requests.{fmt}"'
        return response


class IngestView(FerroxView):
    endpoint_name = "ingest"
    access_scope = INGEST
    session_permissions = ()  # no session ingests
    parser_classes = [BoundedJSONParser]
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_ingest"

    @documented(
        summary="Report finished records (and gauges) from an engine elsewhere",
        operation_id="ingest",
        request=serializers.IngestBatchSerializer,
        responses={
            200: serializers.IngestResultSerializer,
            413: OpenApiResponse(serializers.ErrorSerializer, description="Body too large."),
            **ERRORS,
        },
    )
    def post(self, request: Request) -> Response:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > conf.INGEST_MAX_BODY_BYTES:
            raise errors.PayloadTooLarge(
                f"The body is larger than {conf.INGEST_MAX_BODY_BYTES} bytes."
            )
        body = request.data
        if not isinstance(body, dict):
            raise ValidationError({"records": ["The body must be an object with 'records'."]})
        unknown = sorted(set(body) - {"records", "instance", "gauges"})
        if unknown:
            name = describe_name(unknown[0])
            raise ValidationError({"body": [f"Unknown field {name}."]})
        records = body.get("records")
        if not isinstance(records, list):
            raise ValidationError({"records": ["records must be a list."]})
        if len(records) > conf.INGEST_MAX_BATCH:
            raise ValidationError(
                {"records": [f"A batch holds at most {conf.INGEST_MAX_BATCH} records."]}
            )
        instance = body.get("instance")
        if instance is not None and (problem := string_problem("instance", instance, 200)):
            raise ValidationError({"instance": [problem + "."]})
        token = request.auth
        assert isinstance(token, ApiToken)  # EndpointAccess admits only ingest tokens here
        result = ingest(
            records,
            replica=token.replica,
            instance=instance,
            recorder=live.get_recorder(),
            gauges=body.get("gauges"),
            using=conf.ARCHIVE_DATABASE,
        )
        return Response(
            {
                "accepted": result.count(ACCEPTED),
                "duplicate": result.count(DUPLICATE),
                "rejected": result.count(REJECTED),
                "results": [r.as_dict() for r in result.results],
                "gauges": result.gauges,
            }
        )
