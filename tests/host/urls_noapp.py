"""The host's URLs before it added the app."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from rest_framework.settings import api_settings
from rest_framework.versioning import NamespaceVersioning, URLPathVersioning


def host_api() -> list[URLPattern | URLResolver]:
    """The host's API under ``api/``, shaped for the project's versioning class."""
    versioning = api_settings.DEFAULT_VERSIONING_CLASS
    if versioning is not None and issubclass(versioning, URLPathVersioning):
        return [path("api/<str:version>/", include("tests.host.urls_api"))]
    if versioning is not None and issubclass(versioning, NamespaceVersioning):
        return [path("api/v1/", include(("tests.host.urls_api", "host"), namespace="v1"))]
    return [path("api/", include("tests.host.urls_api"))]


urlpatterns: list[URLPattern | URLResolver] = [
    *host_api(),
    path("ops/", admin.site.urls),
]
