"""The Django admin for the archive: read-only, and as fast at 10M rows as at 10.

Every changelist query is bounded: the count stops at a cap, filter choices and the
date drill-down never run ``SELECT DISTINCT`` over the table, and search is exact so
it can use an index. Retention is the prune command's job, so nothing is deleted here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Max, Min, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.formats import date_format, number_format
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from . import tokens
from .archive.export import csv_lines
from .archive.paginator import CappedCountPaginator
from .archive.rows import datetime_to_at_ms, record_from_values
from .core.requests import Record, decode_tps, itl_ms
from .models import ApiToken, DeadLetter, FinishedRequest, Instance

# What a value nothing measured reads as (None is "not measured", never 0).
EMPTY = "—"
# Where ApiTokenAdmin keeps a new secret between save_model and response_add.
_SECRET = "_ferrox_stats_issued_secret"


class RecentValuesFilter(admin.AllValuesFieldListFilter):
    """Offers the values found in the newest rows instead of every distinct value.

    A plain ``list_filter = ["model"]`` runs ``SELECT DISTINCT model`` over the whole
    table on every changelist view: seconds at 10M rows even on an indexed column, a
    full scan on one that is not (``finish_reason``). Reading the newest
    ``recent_rows`` bounds the cost. A value not seen lately can still be filtered on
    by URL (``?model=...``), and a selected value is always listed.
    """

    recent_rows = 5000

    def __init__(
        self,
        field: Any,
        request: HttpRequest,
        params: Any,
        model: Any,
        model_admin: Any,
        field_path: str,
    ) -> None:
        super().__init__(field, request, params, model, model_admin, field_path)
        newest = model_admin.get_queryset(request).order_by("-finished_at", "-id")
        self._newest = newest.values_list(field_path, flat=True)[: self.recent_rows]

    def choices(self, changelist: Any) -> Iterator[Any]:
        values = set(self._newest)
        shown = {str(v) for v in values}
        values.update(v for v in self.lookup_val or () if v not in shown)
        # Django only iterates ``lookup_choices``: a list serves as well as a queryset.
        self.lookup_choices = sorted(values, key=lambda v: (v is None, str(v)))  # type: ignore[assignment]
        yield from super().choices(changelist)


class ArchiveChangeList(ChangeList):
    """Django's changelist, with a date drill-down whose cost is bounded like the count."""

    @cached_property
    def date_drilldown(self) -> dict[str, Any]:
        """What Django's ``date_hierarchy`` tag shows, without its ``SELECT DISTINCT``.

        Django lists the years, months or days that hold rows with a DISTINCT over every
        row in range: on the default view of a month of archive, each page load reads
        all of it. One MIN/MAX bounds the range instead; a day in it without rows is
        still offered, and lists nothing.
        """
        field = str(self.date_hierarchy)
        year, month, day = (
            int(self.params[f"{field}__{part}"]) if self.params.get(f"{field}__{part}") else None
            for part in ("year", "month", "day")
        )

        def link(**parts: int) -> str:
            return str(
                self.get_query_string(
                    {f"{field}__{k}": v for k, v in parts.items()}, [f"{field}__"]
                )
            )

        def title(moment: date, fmt: str) -> str:
            return capfirst(date_format(moment, fmt))

        if year and month and day:
            moment = date(year, month, day)
            return {
                "back": {
                    "link": link(year=year, month=month),
                    "title": title(moment, "YEAR_MONTH_FORMAT"),
                },
                "choices": [{"title": title(moment, "MONTH_DAY_FORMAT")}],
            }
        rows = self.queryset
        if not self.paginator.capped:
            # Few rows match: read just those. PostgreSQL would otherwise answer MIN/MAX
            # by walking the time index from each end until it meets a match.
            rows = rows.order_by().values(field)[: self.paginator.cap + 1]
        span = rows.aggregate(first=Min(field), last=Max(field))
        if span["first"] is None:
            first = last = None
        else:
            first, last = (timezone.localtime(span[k]).date() for k in ("first", "last"))
        # Like Django: with nothing chosen, start lower when all rows share a year/month.
        if first and last and not year and not month and first.year == last.year:
            year = first.year
            if first.month == last.month:
                month = first.month
        choices: list[dict[str, str]] = []
        if year and month:
            back = {"link": link(year=year), "title": str(year)}
            if first and last:
                choices = [
                    {
                        "link": link(year=year, month=month, day=d),
                        "title": title(date(year, month, d), "MONTH_DAY_FORMAT"),
                    }
                    for d in range(first.day, last.day + 1)
                ]
        elif year:
            back = {"link": link(), "title": _("All dates")}
            if first and last:
                choices = [
                    {
                        "link": link(year=year, month=m),
                        "title": title(date(year, m, 1), "YEAR_MONTH_FORMAT"),
                    }
                    for m in range(first.month, last.month + 1)
                ]
        else:
            back = None
            if first and last:
                choices = [
                    {"link": link(year=y), "title": str(y)}
                    for y in range(first.year, last.year + 1)
                ]
        return {"back": back, "choices": choices}


def _record(obj: FinishedRequest) -> Record:
    return record_from_values(obj.__dict__)


def _number(value: float | None) -> str:
    # A readonly method's None would render as "None", not as the empty value. One
    # decimal: a latency of 5802.033534999964 ms reads 5802.0 (in the active locale).
    return EMPTY if value is None else number_format(value, 1)


class ReadOnlyRecords:
    """Browse only: no add, change or delete.

    Archived rows come from the writer and leave through the prune command; staff with
    the view permission browse them.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class FinishedRequestAdmin(ReadOnlyRecords, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "finished_at",
        "request_id",
        "model",
        # No route column: beside the admin's sidebar and filters nine columns do not
        # fit 1400 px; the route is a filter and on the detail page.
        "status",
        "outcome",
        "tokens",
        "ttft",
        "duration",
    )
    # Sorting by any other column is a full sort of the table: only the index's order.
    sortable_by = ("finished_at",)
    list_filter = (
        # Choices and booleans list their values without a query.
        "outcome",
        "stream",
        ("status", RecentValuesFilter),
        ("model", RecentValuesFilter),
        ("route", RecentValuesFilter),
        ("replica", RecentValuesFilter),
        ("finish_reason", RecentValuesFilter),
    )
    date_hierarchy = "finished_at"
    # Exact lookups, not "=field" (``iexact``: UPPER(col) = UPPER(%s) on PostgreSQL,
    # LIKE on SQLite), so the (client, finished_at) and request_id indexes serve them.
    search_fields = ("request_id__exact", "client__exact")
    search_help_text = gettext_lazy("Exact request id or client.")
    ordering = ("-finished_at", "-id")
    list_per_page = 100
    paginator = CappedCountPaginator
    # Neither the unfiltered total nor per-filter facet counts: both are COUNT(*)s.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    empty_value_display = EMPTY
    actions = ("export_csv",)

    fieldsets = (
        (None, {"fields": ("request_id", "finished_at", "at_ms", "outcome", "status")}),
        (
            gettext_lazy("Served"),
            {"fields": ("route", "model", "stream", "finish_reason", "aborted", "error")},
        ),
        (
            gettext_lazy("Tokens"),
            {"fields": ("prompt_tokens", "completion_tokens", "cached_tokens")},
        ),
        (gettext_lazy("Latency (ms)"), {"fields": ("queue", "ttft", "duration")}),
        (gettext_lazy("Decode"), {"fields": ("decode", "decode_tps", "itl_ms")}),
        (
            gettext_lazy("Provenance"),
            {
                "fields": (
                    "client",
                    "via_api_key",
                    "replica",
                    "ingested",
                    "instance",
                    "seq",
                    "commit_seq",
                    "id",
                )
            },
        ),
    )
    readonly_fields = (
        *("id", "at_ms", "decode_tps", "itl_ms", "commit_seq", "ingested"),
        *("queue", "ttft", "duration", "decode"),
    )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ArchiveChangeList

    @admin.display(description=gettext_lazy("tokens in → out"))
    def tokens(self, obj: FinishedRequest) -> str:
        def show(n: int | None) -> str:
            return EMPTY if n is None else str(n)

        return f"{show(obj.prompt_tokens)} → {show(obj.completion_tokens)}"

    @admin.display(description=gettext_lazy("at (epoch ms)"))
    def at_ms(self, obj: FinishedRequest) -> int:
        return datetime_to_at_ms(obj.finished_at)

    # The latencies, rounded: a model field's own name would show the raw float.
    @admin.display(description=gettext_lazy("queue (ms)"))
    def queue(self, obj: FinishedRequest) -> str:
        return _number(obj.queue_ms)

    @admin.display(description=gettext_lazy("TTFT (ms)"))
    def ttft(self, obj: FinishedRequest) -> str:
        return _number(obj.ttft_ms)

    @admin.display(description=gettext_lazy("duration (ms)"))
    def duration(self, obj: FinishedRequest) -> str:
        return _number(obj.duration_ms)

    @admin.display(description=gettext_lazy("decode (ms)"))
    def decode(self, obj: FinishedRequest) -> str:
        return _number(obj.decode_ms)

    @admin.display(description=gettext_lazy("decode tok/s"))
    def decode_tps(self, obj: FinishedRequest) -> str:
        return _number(decode_tps(_record(obj)))

    @admin.display(description=gettext_lazy("ITL (ms)"))
    def itl_ms(self, obj: FinishedRequest) -> str:
        return _number(itl_ms(_record(obj)))

    @admin.action(description=gettext_lazy("Export selected as CSV"), permissions=["view"])
    def export_csv(
        self, request: HttpRequest, queryset: QuerySet[FinishedRequest]
    ) -> StreamingHttpResponse:
        # Django hands the action the changelist's queryset narrowed to the selected
        # pks (or all of it on "select all"): one query streams every row's wire dict.
        # On the changelist's own alias (the router's), not the default database.
        rows = FinishedRequest.objects.using(queryset.db).filter(pk__in=queryset.values("pk"))
        response = StreamingHttpResponse(
            csv_lines(rows.order_by("-finished_at", "-id").entries()),
            content_type="text/csv; charset=utf-8",
        )
        response["Content-Disposition"] = 'attachment; filename="finished-requests.csv"'
        return response


class DeadLetterAdmin(ReadOnlyRecords, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("created_at", "replica", "request_id", "reason")
    search_fields = ("request_id__exact",)
    search_help_text = gettext_lazy("Exact request id.")
    ordering = ("-created_at", "-id")
    list_per_page = 100
    paginator = CappedCountPaginator
    show_full_result_count = False
    fields = ("created_at", "replica", "request_id", "instance", "reason", "payload_pretty")
    readonly_fields = ("payload_pretty",)

    @admin.display(description=gettext_lazy("payload"))
    def payload_pretty(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.payload, indent=2, sort_keys=True))


class InstanceAdmin(ReadOnlyRecords, admin.ModelAdmin):  # type: ignore[type-arg]
    """Each recorder's last heartbeat; the state is judged now, as ``v1/fleet`` does."""

    list_display = ("instance", "host", "pid", "fleet_state", "last_seen")
    list_filter = ("stopped",)
    search_fields = ("instance__exact", "host__exact")
    search_help_text = gettext_lazy("Exact instance id or host.")
    ordering = ("-last_seen", "instance")
    list_per_page = 100
    fields = (
        "instance",
        "replica",
        "host",
        "pid",
        "started_at",
        "last_seen",
        "heartbeat_s",
        "stopped",
        "state_pretty",
    )
    readonly_fields = ("state_pretty",)

    @admin.display(description=gettext_lazy("state"))
    def fleet_state(self, obj: Instance) -> str:
        from .conf import conf
        from .fleet import instance_state

        now_ms = datetime_to_at_ms(timezone.now())
        return instance_state(
            datetime_to_at_ms(obj.last_seen),
            obj.heartbeat_s,
            obj.stopped,
            now_ms,
            conf.INSTANCE_LOST_S,
        )

    @admin.display(description=gettext_lazy("state document"))
    def state_pretty(self, obj: Instance) -> str:
        try:
            shown = json.dumps(obj.document(), indent=2, sort_keys=True)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
            shown = obj.state  # not a document v1/fleet reads (it counts it unreadable)
        return format_html("<pre>{}</pre>", shown)


class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Tokens are issued here (the secret is shown once, on the page that answers the
    form, never in a message) and revoked; never edited. The issuing user owns them."""

    list_display = (
        "label",
        "prefix",
        "owned_by",
        "can_read",
        "can_ingest",
        "can_infer",
        "replica",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("can_read", "can_ingest", "can_infer")
    search_fields = ("label__exact",)
    fields = (
        "label",
        "can_read",
        "can_ingest",
        "can_infer",
        "replica",
        "expires_at",
        "owned_by",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("owned_by", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke_selected",)
    issued_template = "admin/ferrox_stats/apitoken/issued.html"

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        # Scopes, replica and expiry are fixed once issued: a new purpose gets a new token.
        if obj is not None:
            return (
                *self.readonly_fields,
                *("label", "can_read", "can_ingest", "can_infer", "replica", "expires_at"),
            )
        return self.readonly_fields

    @admin.display(description="owner")
    def owned_by(self, obj: ApiToken) -> str:
        # Looked up, never joined: the users may live on another database (``routers``).
        return tokens.owner_name(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the label stays to explain what used it

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        try:
            token, secret = tokens.issue(
                obj.label,
                read=obj.can_read,
                ingest=obj.can_ingest,
                infer=obj.can_infer,
                replica=obj.replica,
                owner=request.user,
                expires_at=obj.expires_at,
            )
        except ValueError as exc:
            messages.error(request, str(exc))
            return
        obj.pk, obj.owner, obj.prefix = token.pk, token.owner, token.prefix
        # Handed to response_add through the request, which lives only as long as this
        # response: a message would keep it in the (unencrypted) cookie or session.
        setattr(request, _SECRET, secret)

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The page that shows the new token's secret, once; nothing else ever does."""
        secret = getattr(request, _SECRET, None)
        if secret is None:  # not issued (the error is in the messages)
            return super().response_add(request, obj, post_url_continue)
        response = TemplateResponse(
            request,
            self.issued_template,
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"API token {obj.label!r} issued",
                "token": obj,
                "secret": secret,
            },
        )
        # Never kept by a browser or proxy cache: reloading the page must not show it.
        add_never_cache_headers(response)
        return response

    @admin.action(description=gettext_lazy("Revoke selected tokens"))
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            tokens.revoke(token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")


def register(site: admin.AdminSite) -> None:
    """Register the app's model admins on ``site``: a host's own ``AdminSite``.

    ``admin.site`` gets them when this module is imported (by ``admin.autodiscover``);
    a host with its own site calls ``ferrox_stats.admin.register(my_site)`` too.
    """
    site.register(FinishedRequest, FinishedRequestAdmin)
    site.register(DeadLetter, DeadLetterAdmin)
    site.register(Instance, InstanceAdmin)
    site.register(ApiToken, ApiTokenAdmin)


register(admin.site)
