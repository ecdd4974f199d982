"""The app's URLs, mountable under any prefix: ``path("telemetry/", include("ferrox_stats.urls"))``.

The REST API and dashboard register here as they land.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "ferrox_stats"

urlpatterns: list[URLPattern | URLResolver] = []
