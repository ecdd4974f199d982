"""The demo control plane's URLs: its home page, login, the Django admin, ferrox_stats,
and the OpenAI-compatible pass-through at the root (``/v1/…``), where clients expect it."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

# The control plane brands its own admin; the app leaves admin.site alone.
admin.site.site_header = "Ferrox control plane"
admin.site.site_title = "Ferrox admin"
admin.site.index_title = "Administration"

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("telemetry/", include("ferrox_stats.urls")),
    path("", include("ferrox_stats.proxy.urls")),
]
