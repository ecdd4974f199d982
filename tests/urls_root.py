"""The app mounted at the root beside the Django admin at ``admin/`` (it comes first)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("ferrox_stats.urls")),
    path("admin/", admin.site.urls),
]
