from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("stats/", include("ferrox_stats.urls"))]
