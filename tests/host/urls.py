"""The host's URLs with the app mounted under ``telemetry/``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from .urls_noapp import urlpatterns as host_urlpatterns

urlpatterns: list[URLPattern | URLResolver] = [
    *host_urlpatterns,
    path("telemetry/", include("ferrox_stats.urls")),
]
