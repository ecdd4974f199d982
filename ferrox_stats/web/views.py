"""The dashboard's pages: the fleet, this worker process, history, usage, one request.

The fleet page and the per-process page need ``access.DASHBOARD``; history, usage and
one request's page read the archive (client addresses, key labels) and need
``access.ARCHIVE``, and so does the fleet page's recent-requests table (the archive's
tail): without it the page says so in the table's place.

HTML only: the fleet page polls the API's ``fleet`` endpoint (and ``history`` with
``order=committed``), the per-process page ``admin-stats``; each first paint is built
by the same functions as the endpoint it polls, so the first paint and the polls agree.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, NamedTuple

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_safe

from .. import access, documents, live
from .. import fleet as fleet_state
from ..archive.queries import Cursor, KeysetPage
from ..conf import conf
from ..models import FinishedRequest
from . import display, fleet, panels, usage_page
from .forms import NEWER, OLDER, HistoryForm, UsageForm

# The pages poll every POLL_INTERVAL_MS; the per-process page asks for POLL_LIMIT ring
# rows (the API caps it at MAX_PAGE); both keep TABLE_ROWS rows and SERIES_POINTS
# chart points.
POLL_INTERVAL_MS = 2000
POLL_LIMIT = 100
TABLE_ROWS = 200
SERIES_POINTS = 300
# Rows the first paint shows (at most MAX_PAGE, the most one ring page holds).
FIRST_PAINT_ROWS = 50
# The fleet page's tail asks for up to this many rows a poll (v1/history clamps it to
# HISTORY_MAX_PAGE): 250 archived rows a second before the table falls behind, and says so.
TAIL_LIMIT = 500
HISTORY_ROWS = 50

View = Callable[..., HttpResponse]


def _login_url() -> str | None:
    """The admin's login when the project has an admin site named ``admin``; else the
    project's ``LOGIN_URL`` (``None`` makes ``redirect_to_login`` read it)."""
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return None


def requires(permission: str) -> Callable[[View], View]:
    """Anonymous visitors go to the admin's login, as on admin pages; a logged-in user
    without ``permission`` gets 403 (logging in again would not help)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path(), _login_url())
            if not access.may(request.user, (permission,)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return checked

    return decorate


@requires(access.DASHBOARD)
@require_safe
def dashboard(request: HttpRequest) -> HttpResponse:
    """The fleet: every instance's last heartbeat, or one instance's (``?instance=``)."""
    instance = request.GET.get("instance") or None
    unknown = False
    document: dict[str, Any] | None = None
    try:
        document = fleet_state.current(instance)
    except fleet_state.UnknownInstance:
        unknown = True
    except DatabaseError:
        pass  # the page says so, and its polls retry
    tail = _tail() if access.may(request.user, (access.ARCHIVE,)) else None
    shown = fleet.view(document)
    return render(
        request,
        "ferrox_stats/dashboard.html",
        {
            "document": document,
            "shown": shown,
            "overview": shown["derived"]["overview"],
            "newest_age": display.age(shown["derived"]["overview"]["newest_age_s"]),
            "unreadable": display.unreadable_rows(shown.get("unreadable")),
            "relative_error": display.percent((document or {}).get("relative_error")),
            "groups": panels.render(shown, fleet.GROUPS),
            "instances": [
                fleet.instance_row(wire) for wire in (document or {}).get("instances", [])
            ],
            "instance": instance,
            "unknown": unknown,
            "charts": fleet.CHARTS,
            "tail": tail,
            "poll": {
                "interval_ms": POLL_INTERVAL_MS,
                "tail_limit": TAIL_LIMIT,
                "table_rows": TABLE_ROWS,
                "series_points": SERIES_POINTS,
            },
        },
        status=404 if unknown else 200,
    )


class Tail(NamedTuple):
    rows: list[dict[str, Any]]  # display rows, newest first
    cursor: str  # where the page's polls of the tail continue ("" from the start)
    unavailable: bool  # the archive's database did not answer


def _tail() -> Tail:
    """The newest archived rows in commit order, and the cursor that follows them."""
    try:
        page = FinishedRequest.objects.using(conf.ARCHIVE_DATABASE).committed_newest(
            FIRST_PAINT_ROWS
        )
    except DatabaseError:
        # No cursor to continue from, and following from the archive's first row would
        # show the oldest rows: the page says so and does not poll the tail.
        return Tail([], "", True)
    cursor = page.next_cursor.encode() if page.next_cursor else ""
    return Tail([display.row(wire) for wire in page.entries], cursor, False)


@requires(access.DASHBOARD)
@require_safe
def process(request: HttpRequest) -> HttpResponse:
    """This worker process only: its ring and its counters, as ``admin/stats`` reads them."""
    recorder = live.get_recorder()
    stats = recorder.stats
    # The newest rows the ring holds; the page's polls continue from next_cursor.
    first = max(0, stats.recorded_total - min(FIRST_PAINT_ROWS, stats.max_page))
    document = documents.admin_stats(stats.since(first, FIRST_PAINT_ROWS), recorder.snapshot())
    return render(
        request,
        "ferrox_stats/process.html",
        {
            "document": document,
            "groups": panels.render(document),
            "rows": [display.row(wire) for wire in reversed(document["entries"])],
            "uptime": display.uptime(document["live"]["uptime_s"]),
            "charts": panels.CHARTS,
            "poll": {
                "interval_ms": POLL_INTERVAL_MS,
                "limit": POLL_LIMIT,
                "table_rows": TABLE_ROWS,
                "series_points": SERIES_POINTS,
            },
        },
    )


@requires(access.ARCHIVE)
@require_safe
def history(request: HttpRequest) -> HttpResponse:
    form = HistoryForm(request.GET)
    if not form.is_valid():
        return render(request, "ferrox_stats/history.html", {"form": form}, status=400)
    data = form.cleaned_data
    rows = (
        FinishedRequest.objects.using(conf.ARCHIVE_DATABASE)
        .window(data["since"], data["until"])
        .matching(form.filters())
    )
    page = _history_page(rows, data["cursor"], data["direction"] or OLDER)
    entries = page.entries
    return render(
        request,
        "ferrox_stats/history.html",
        {
            "form": form,
            "rows": [display.row(wire) for wire in entries],
            "older": form.page_query(_cursor(entries[-1]), OLDER) if page.older else None,
            "newer": form.page_query(_cursor(entries[0]), NEWER) if page.newer else None,
            "newest": form.page_query(),
            "paged": not page.top,
        },
    )


@requires(access.ARCHIVE)
@require_safe
def usage(request: HttpRequest) -> HttpResponse:
    """Usage, cost and latency over 24 hours, 7 or 30 days, from the rollups."""
    form = UsageForm(request.GET)
    if not form.is_valid():
        return render(request, "ferrox_stats/usage.html", {"form": form}, status=400)
    range_name = form.cleaned_data["range"] or usage_page.DEFAULT_RANGE
    # The range ends at the recorder's clock, like the usage API's default "until".
    page = usage_page.build(range_name, form.filters(), live.get_recorder().clock.wall_ms())
    return render(
        request,
        "ferrox_stats/usage.html",
        {"form": form, "page": page, "rollups_kept": conf.ROLLUPS, "currency": conf.CURRENCY},
    )


class HistoryPage(NamedTuple):
    entries: list[dict[str, Any]]  # newest first
    older: bool  # older rows lie beyond the last entry
    newer: bool  # newer rows lie beyond the first entry
    top: bool  # the page starts at the newest row


def _history_page(rows: Any, cursor: Cursor | None, direction: str) -> HistoryPage:
    if cursor is not None and direction == NEWER:
        page: KeysetPage = rows.oldest_first(cursor, HISTORY_ROWS)
        if page.next_cursor is not None:
            # The row at ``cursor`` is older than these, so older rows exist.
            return HistoryPage(list(reversed(page.entries)), True, True, False)
        cursor = None  # reached the newest rows: show the first page as it is now
    page = rows.newest_first(cursor, HISTORY_ROWS)
    entries = page.entries
    top = cursor is None
    return HistoryPage(entries, page.next_cursor is not None, not top and bool(entries), top)


def _cursor(wire: dict[str, Any]) -> Cursor:
    return Cursor(wire["at_ms"], wire["id"])


@requires(access.ARCHIVE)
@require_safe
def request_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    # No archived id holds a NUL (such records are dead-lettered), and PostgreSQL
    # refuses one in a query: asking would be an error instead of "not found".
    archived = (
        []
        if "\x00" in request_id
        else FinishedRequest.objects.using(conf.ARCHIVE_DATABASE).by_request_id(request_id)
    )
    in_ring = [] if archived else _in_ring(live.get_recorder(), request_id)
    return render(
        request,
        "ferrox_stats/request_detail.html",
        {
            "request_id": request_id,
            "archived": [(wire, display.detail(wire)) for wire in archived],
            "in_ring": [display.detail(wire) for wire in in_ring],
        },
        status=200 if archived or in_ring else 404,
    )


def _in_ring(recorder: live.Recorder, request_id: str) -> list[dict[str, Any]]:
    """The ring's entries with this id, read a page at a time (the ring is bounded)."""
    stats = recorder.stats
    found: list[dict[str, Any]] = []
    cursor = 0
    # Enough pages for the whole ring, even while new rows arrive during the read.
    for _ in range(stats.ring.capacity // stats.max_page + 2):
        page = stats.since(cursor, stats.max_page)
        found.extend(
            e for e in documents.ring_page(page)["entries"] if e["request_id"] == request_id
        )
        if not page.rows or page.next_cursor >= page.recorded_total:
            break
        cursor = page.next_cursor
    return found
