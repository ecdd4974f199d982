"""A project whose admin site is not named ``admin``: no ``admin:login`` to reverse."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("control/telemetry/", include("ferrox_stats.urls"))]
