"""The demo control plane's own pages (not part of the app)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from ferrox_stats import access, live

RECENT = 5


def home(request: HttpRequest) -> HttpResponse:
    """Where to go (dashboard, admin, API docs) and, for whoever may see the dashboard,
    this process's numbers now."""
    context: dict[str, Any] = {}
    user = request.user
    # Telemetry is closed by default: the numbers need the dashboard's permission.
    if access.may(user, (access.DASHBOARD,)):
        recorder = live.get_recorder()
        snapshot = recorder.snapshot()
        page = recorder.stats.since(max(0, snapshot.recorded_total - RECENT), RECENT)
        context["snapshot"] = snapshot
        context["recent"] = [record for _, record in reversed(page.rows)]
    return render(request, "home.html", context)
