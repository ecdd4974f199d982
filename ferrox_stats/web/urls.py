"""The dashboard's pages; ``ferrox_stats.urls`` mounts them under ``dashboard/``.

Their own namespace (``ferrox_stats:web:…``) keeps ``history`` apart from the API's.
"""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "web"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("process/", views.process, name="process"),
    path("history/", views.history, name="history"),
    path("usage/", views.usage, name="usage"),
    path("requests/<path:request_id>", views.request_detail, name="request-detail"),
]
