"""The usage API: ``v1/usage`` (per bucket and group, JSON or CSV) and ``v1/usage/top``.

Both read the rollups only (``archive.usage``), never the archive's rows, so what they
cost grows with buckets x groups in the range, not with the requests archived. The
rollups are kept when ``FERROX_STATS["ROLLUPS"]`` is on (or rebuilt by
``ferrox_stats_rollup``); every answer says whether they are being kept.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from .. import access, live
from ..archive import usage as rollups
from ..archive.export import parse_moment
from ..archive.rows import at_ms_to_datetime
from ..conf import conf
from ..core.rollup import TIMES
from ..ingest import describe_name
from ..models import OUTCOMES
from . import serializers
from .base import FerroxView, documented
from .params import clamped_limit, only_known
from .throttling import FerroxScopedRateThrottle
from .usage_json import UsageDocument, UsageRenderer, total_dict
from .views import ERRORS, FormatIsOurs

DEFAULT_RANGE = timedelta(days=1)
OUTCOME_VALUES = {value for value, _ in OUTCOMES}
TOP_DEFAULT, TOP_MOST = 10, 100

MOMENT = "ISO 8601 (naive is UTC) or epoch milliseconds."
RANGE_PARAMETERS = [
    OpenApiParameter(
        "since",
        str,
        description=f"Start, widened to its bucket's start. {MOMENT} "
        "Default: a day before `until`.",
    ),
    OpenApiParameter(
        "until",
        str,
        description=f"End (exclusive), widened to its bucket's end. {MOMENT} Default: now.",
    ),
]
FILTER_PARAMETERS = [
    OpenApiParameter(name, str, description=f"Only requests whose {what} is this.")
    for name, what in (
        ("key", "API key label (`via_api_key`)"),
        ("model", "model"),
        ("replica", "replica"),
        ("route", "route"),
        ("outcome", "outcome (ok, error, aborted)"),
    )
]
GROUP_BY = OpenApiParameter(
    "group_by",
    str,
    description="Comma-separated dimensions to group by: key, model, replica, route, outcome.",
)
USAGE_FORMAT = OpenApiParameter("format", str, enum=["json", "csv"], description="Default json.")
LATENCY = OpenApiParameter(
    "latency",
    str,
    description="Comma-separated distributions to give percentiles of: duration, ttft, "
    "tpot (default none: they cost most to merge).",
)


def _moment(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return parse_moment(raw)
    except ValueError as exc:
        raise ValidationError({name: [f"{name}: {exc}."]}) from None


def _range(request: Request) -> tuple[datetime, datetime]:
    until = _moment(request, "until")
    if until is None:
        until = at_ms_to_datetime(live.get_recorder().clock.wall_ms())
    since = _moment(request, "since") or until - DEFAULT_RANGE
    if since >= until:
        raise ValidationError({"since": ["since must be before until."]})
    return since, until


def _filters(request: Request) -> dict[str, str | None]:
    filters: dict[str, str | None] = {}
    for name in rollups.DIMENSIONS:
        value = request.query_params.get(name)
        if value is None or value == "":
            continue
        if name == "outcome" and value not in OUTCOME_VALUES:
            raise ValidationError({"outcome": ["outcome must be 'ok', 'error' or 'aborted'."]})
        if "\x00" in value:
            # No label holds one (and PostgreSQL refuses NUL in a parameter).
            raise ValidationError({name: [f"{name} must not contain NUL characters."]})
        filters[name] = value
    return filters


def _names(request: Request, parameter: str, allowed: tuple[str, ...] | list[str]) -> list[str]:
    """A comma-separated list of ``allowed`` names, each once; a 400 naming the first
    that is not one (echoed only when it is a plain identifier)."""
    raw = request.query_params.get(parameter) or ""
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ValidationError(
            {
                parameter: [
                    f"{parameter} takes {', '.join(allowed)}, not {describe_name(unknown[0])}."
                ]
            }
        )
    return list(dict.fromkeys(names))


def _answer(
    request: Request, bucket: str, group_by: list[str], *, per_bucket: bool = True
) -> tuple[rollups.Usage, dict[str, str | None]]:
    since, until = _range(request)
    filters = _filters(request)
    latency = _names(request, "latency", TIMES)
    try:
        answer = rollups.usage(
            since,
            until,
            bucket=bucket,
            group_by=group_by,
            filters=filters,
            prices=conf.PRICE_BOOK,
            max_rows=conf.USAGE_MAX_ROWS,
            per_bucket=per_bucket,
            latency=latency,
            using=conf.ARCHIVE_DATABASE,
        )
    except rollups.TooManyRows as exc:
        raise ValidationError({"query": [f"{str(exc).capitalize()}."]}) from None
    return answer, filters


def _head(answer: rollups.Usage, filters: dict[str, str | None]) -> dict[str, Any]:
    return {
        "since": answer.since.isoformat(),
        "until": answer.until.isoformat(),
        "since_ms": rollups.epoch_ms(answer.since),
        "until_ms": rollups.epoch_ms(answer.until),
        "bucket": answer.bucket,
        "group_by": list(answer.group_by),
        "filters": filters,
        "rollups_kept": conf.ROLLUPS,
        "relative_error": answer.relative_error,
        "currency": conf.CURRENCY,
        "replica_costed": answer.replica_costed,
        "latency": list(answer.latency),
    }


class UsageView(FerroxView):
    session_permissions = (access.ARCHIVE,)
    endpoint_name = "usage"
    content_negotiation_class = FormatIsOurs
    renderer_classes = [UsageRenderer]  # the rows written from their values
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_history"

    @documented(
        summary="Usage, cost and latency over time, per bucket and group (from the rollups)",
        description=(
            "Requests, token sums, errors, aborts by reason, cost and latency percentiles "
            "(merged distributions, within `relative_error`) per time bucket and per "
            "combination of the `group_by` dimensions. Read from the usage rollups only, "
            "so it costs what the buckets x groups in the range cost, whatever the "
            "archive holds. `cost` prices each rollup row's tokens at its model's price in "
            "force (`FERROX_STATS['PRICES']`); null when no request of the row had a "
            "price, and `unpriced_requests` counts those that had none. `replica_cost` "
            "(the replicas' hourly cost over the buckets they served in) is given only "
            "when grouped and filtered by nothing but replica. `format=csv` answers the "
            "rows as CSV."
        ),
        operation_id="usage",
        parameters=[
            *RANGE_PARAMETERS,
            OpenApiParameter(
                "bucket", str, enum=list(rollups.BUCKETS), description="Default hour (UTC)."
            ),
            GROUP_BY,
            LATENCY,
            *FILTER_PARAMETERS,
            USAGE_FORMAT,
        ],
        responses={
            200: serializers.UsageSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            **ERRORS,
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        only_known(
            request,
            ["since", "until", "bucket", "group_by", "format", "latency", *rollups.DIMENSIONS],
        )
        fmt = request.query_params.get("format") or "json"
        if fmt not in ("json", "csv"):
            raise ValidationError({"format": ["format must be 'json' or 'csv'."]})
        bucket = request.query_params.get("bucket") or "hour"
        if bucket not in rollups.BUCKETS:
            raise ValidationError({"bucket": ["bucket must be 'minute', 'hour' or 'day'."]})
        answer, filters = _answer(
            request, bucket, _names(request, "group_by", list(rollups.DIMENSIONS))
        )
        if fmt == "csv":
            response = HttpResponse(
                "".join(rollups.csv_lines(answer)), content_type="text/csv; charset=utf-8"
            )
            response["Content-Disposition"] = 'attachment; filename="ferrox-usage.csv"'
            return response
        return Response(UsageDocument(_head(answer, filters), answer, answer.totals()))


class UsageTopView(FerroxView):
    session_permissions = (access.ARCHIVE,)
    endpoint_name = "usage_top"
    throttle_classes = [FerroxScopedRateThrottle]
    throttle_scope = "ferrox_stats_history"

    @documented(
        summary="The keys, models, replicas, routes or outcomes with the most usage",
        description=(
            "Totals over the range per value of `by`, ranked by `metric` (most first; a "
            "group without a value, such as no cost, last), at most `limit` of them. "
            "Read from the usage rollups (the range widened to whole UTC hours)."
        ),
        operation_id="usage_top",
        parameters=[
            OpenApiParameter(
                "by", str, enum=list(rollups.DIMENSIONS), required=True, description="Rank what."
            ),
            OpenApiParameter(
                "metric", str, enum=list(rollups.TOP_METRICS), description="Default total_tokens."
            ),
            OpenApiParameter(
                "limit",
                int,
                description=f"Groups at most (default {TOP_DEFAULT}, at most {TOP_MOST}).",
            ),
            *RANGE_PARAMETERS,
            LATENCY,
            *FILTER_PARAMETERS,
        ],
        responses={200: serializers.UsageTopSerializer, **ERRORS},
    )
    def get(self, request: Request) -> Response:
        only_known(
            request, ["by", "metric", "limit", "since", "until", "latency", *rollups.DIMENSIONS]
        )
        by = request.query_params.get("by")
        if by not in rollups.DIMENSIONS:
            raise ValidationError({"by": [f"by must be one of {', '.join(rollups.DIMENSIONS)}."]})
        metric = request.query_params.get("metric") or "total_tokens"
        if metric not in rollups.TOP_METRICS:
            raise ValidationError(
                {"metric": [f"metric must be one of {', '.join(rollups.TOP_METRICS)}."]}
            )
        limit = clamped_limit(request, TOP_DEFAULT, TOP_MOST)
        answer, filters = _answer(request, "hour", [by], per_bucket=False)
        ranked = rollups.top(answer.totals(), metric, limit)
        return Response(
            {
                **_head(answer, filters),
                "by": by,
                "metric": metric,
                "rows": [total_dict(row, answer.latency) for row in ranked],
            }
        )
