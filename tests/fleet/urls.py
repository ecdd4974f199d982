"""The fleet project's URLs: the app under ``telemetry/``, the pass-through at the root
(``/v1/…``), and the host's own views (``host/…``)."""

from __future__ import annotations

from django.urls import include, path

from . import views

urlpatterns = [
    path("host/whoami", views.whoami, name="whoami"),
    path("host/tracked", views.tracked, name="tracked"),
    path("telemetry/", include("ferrox_stats.urls")),
    path("", include("ferrox_stats.proxy.urls")),
]
