"""The OpenAPI schema of this app's API and its Swagger UI, served from static files (no CDN)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.apps import apps
from django.http import HttpResponseBase, HttpResponseNotFound
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView, _get_sidecar_url
from rest_framework.request import Request
from rest_framework.response import Response

from .. import access
from ..extras import DOCS
from .base import FerroxJSONRenderer, FerroxView, documented
from .openapi import AppSchemaGenerator

# Whoever may read any part of the API may read its description.
ANY_VIEW = (access.DASHBOARD, access.ARCHIVE)


def _app_version() -> str:
    try:
        return version("ferrox-stats")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


# Every drf-spectacular setting, at drf-spectacular's default unless named below: the
# host's SPECTACULAR_SETTINGS (title, version, hooks, enum overrides, path prefix…)
# describe the host's API, not this one. SERVE_* and the generator are the view's own.
SCHEMA_SETTINGS = {
    **{
        key: value
        for key, value in SPECTACULAR_DEFAULTS.items()
        if not key.startswith("SERVE_") and key != "DEFAULT_GENERATOR_CLASS"
    },
    "TITLE": "ferrox_stats API",
    "DESCRIPTION": (
        "Serving telemetry of an LLM control plane: the ring's since-cursor, live stats, "
        "the archive's history and ingest. Every endpoint needs a session with its "
        "permission or an API token (`Authorization: Bearer fxs_…`) unless the deployment "
        "opened it."
    ),
    "VERSION": _app_version(),
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["ferrox_stats.api.schema.only_this_app"],
}

DOCS_MISSING = (
    "The API's Swagger UI needs drf-spectacular-sidecar: pip install 'ferrox-stats[docs]' "
    f"and add {DOCS!r} to INSTALLED_APPS. The OpenAPI schema itself is at v1/schema.\n"
)


def only_this_app(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Describe this app's endpoints only, whatever else the project serves."""
    return [
        (path, regex, method, callback)
        for path, regex, method, callback in endpoints
        if issubclass(getattr(callback, "cls", object), FerroxView)
        and not issubclass(callback.cls, SpectacularAPIView | SpectacularSwaggerView)
    ]


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "ferrox_stats.api.authentication.BearerTokenAuthentication"
    # Prefixed like every name the app puts in a schema: a host that opts in
    # (HOST_SCHEMA) may have its own bearer and cookie schemes.
    name = "ferroxStatsToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An API token, fxs_…"}


class OutageAwareSessionScheme(SessionScheme):
    """The staff session, as drf-spectacular describes DRF's (whose subclass it is)."""

    target_class = "ferrox_stats.api.authentication.SessionAuthentication"
    name = "ferroxStatsSession"


class SchemaView(FerroxView, SpectacularAPIView):
    endpoint_name = "schema"
    session_permissions = ANY_VIEW
    renderer_classes = SpectacularAPIView.renderer_classes
    custom_settings = SCHEMA_SETTINGS
    generator_class = AppSchemaGenerator
    urlconf = None  # the project's, narrowed to this app by only_this_app
    serve_public = True  # access is EndpointAccess's, as for every endpoint
    api_version = None

    def _get_version_parameter(self, request: Request) -> None:
        return None  # the app's API is unversioned, whatever ?version= or the host say

    # drf-spectacular decorates its own get() with a schema built on DRF's
    # DEFAULT_SCHEMA_CLASS; in a project that leaves that setting alone, describing
    # this view fails (drf_spectacular.E001 in check --deploy). The schema view is no
    # part of the API it describes.
    @documented(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response: Response = super().get(request, *args, **kwargs)
        return response


class SwaggerView(FerroxView, SpectacularSwaggerView):
    endpoint_name = "docs"
    session_permissions = ANY_VIEW
    # HTML for browsers; a client asking for JSON gets its errors as JSON like elsewhere.
    renderer_classes = [*SpectacularSwaggerView.renderer_classes, FerroxJSONRenderer]
    url_name = "ferrox_stats:schema"
    title = "ferrox_stats API"

    @documented(exclude=True)  # as SchemaView.get
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # Without the sidecar's files the page would load no UI (or fail to find them
        # under manifest storage): say what is missing instead.
        if not apps.is_installed(DOCS):
            return HttpResponseNotFound(DOCS_MISSING, content_type="text/plain; charset=utf-8")
        # The page's SWAGGER_UI_* settings are the app's too, not the project's.
        with patched_settings(SCHEMA_SETTINGS):
            response: Response = super().get(request, *args, **kwargs)
        return response

    # Swagger UI's files come from drf-spectacular-sidecar, whatever the project's setting.
    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return str(_get_sidecar_url(f"swagger-ui-dist/{filename}"))

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return str(_get_sidecar_url("swagger-ui-dist/favicon-32x32.png"))
