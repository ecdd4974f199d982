"""The app mounted under a non-root prefix, beside the Django admin, as a control plane would."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("ferrox_stats.proxy.urls")),
    path("admin/", admin.site.urls),
    path("control/telemetry/", include("ferrox_stats.urls")),
]
