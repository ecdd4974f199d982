"""The demo control plane's URLs: its own home page, the Django admin, and ferrox_stats."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("demo/sample-traffic/", views.sample_traffic, name="sample-traffic"),
    path("admin/", admin.site.urls),
    path("telemetry/", include("ferrox_stats.urls")),
]
