"""The API's routes; included by ``ferrox_stats.urls`` under whatever prefix the project picks."""

from __future__ import annotations

from django.urls import path

from . import metrics, schema, usage, views

urlpatterns = [
    path("v1/requests", views.RequestsView.as_view(), name="requests"),
    path("v1/stats", views.StatsView.as_view(), name="stats"),
    path("v1/fleet", views.FleetView.as_view(), name="fleet"),
    path("admin/stats", views.AdminStatsView.as_view(), name="admin-stats"),
    path("v1/history", views.HistoryView.as_view(), name="history"),
    path("v1/history/export", views.HistoryExportView.as_view(), name="history-export"),
    path("v1/history/<str:request_id>", views.HistoryDetailView.as_view(), name="history-detail"),
    path("v1/usage", usage.UsageView.as_view(), name="usage"),
    path("v1/usage/top", usage.UsageTopView.as_view(), name="usage-top"),
    path("v1/ingest", views.IngestView.as_view(), name="ingest"),
    path("metrics", metrics.MetricsView.as_view(), name="metrics"),
    path("v1/schema", schema.SchemaView.as_view(), name="schema"),
    path("v1/docs", schema.SwaggerView.as_view(), name="docs"),
]
