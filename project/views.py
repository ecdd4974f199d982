"""The demo control plane's own pages (not part of the app)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from ferrox_stats import live

from . import demo_traffic


@staff_member_required
def home(request: HttpRequest) -> HttpResponse:
    """What this process's recorder knows right now."""
    if settings.DEMO_TRAFFIC:
        demo_traffic.start_once(duration_s=600.0)
    snapshot = live.get_recorder().snapshot()
    recent = live.get_recorder().stats.since(max(0, snapshot.recorded_total - 20), 20)
    return render(
        request,
        "home.html",
        {
            "snapshot": snapshot,
            "recent": reversed([record for _, record in recent.rows]),
        },
    )


@staff_member_required
@require_POST
def sample_traffic(request: HttpRequest) -> HttpResponse:
    """Play ten minutes of plausible traffic through the in-process tracker."""
    demo_traffic.start_once(duration_s=600.0)
    return redirect("home")
