"""The host's own API routes (mounted by ``urls.py`` as its versioning class needs)."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from .hostapp import views

router = DefaultRouter()
router.register("notes", views.NoteViewSet)

urlpatterns = [
    path("stats", views.StatsView.as_view(), name="stats"),
    path("infer", views.InferView.as_view(), name="infer"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("", include(router.urls)),
]
